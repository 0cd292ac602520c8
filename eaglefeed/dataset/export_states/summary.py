"""What one hidden-state export wrote: ``StatesSummary`` and its line for people."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class StatesSummary:
    """What one hidden-state export wrote.

    Attributes:
        fmt: ``speculators`` or ``specforge``.
        folder: where the layout is (speculators' ``--data-path``; SpecForge's ``hidden_states_path``).
        rows: rows written, each with its states.
        positions: positions (states) written.
        linked: speculators files hard-linked (or copied, when a link cannot be made) unchanged.
        rewritten: files written anew (cut rows, joined lanes; every SpecForge file).
        lanes: rows that are conversation lanes of several turns, their turns' files joined.
        missing: rows left out because they have no states (only with ``skip_missing``).
        no_loss: rows left out with no loss token among the positions that have states.
        aux_layers: the auxiliary layers (vLLM ids), ascending.
        last_layer: N, the last layer (vLLM's: before the final norm).
        dtype: the rows' stored dtype (SpecForge's files hold fp8 dequantized to bfloat16).
        notes: what a trainer must know of the files, one line each.
    """

    fmt: str
    folder: Path
    rows: int = 0
    positions: int = 0
    linked: int = 0
    rewritten: int = 0
    lanes: int = 0
    missing: int = 0
    no_loss: int = 0
    aux_layers: tuple[int, ...] = ()
    last_layer: int = -1
    dtype: str = ""
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for people."""
        how = (f"{self.linked} linked, {self.rewritten} written" if self.fmt == "speculators"
               else f"{self.rewritten} .ckpt files")
        skipped = f"; left out: {self.missing} rows without states, {self.no_loss} with no loss token"
        lanes = f" ({self.lanes} of them lanes of several turns, joined)" if self.lanes else ""
        return (f"{self.fmt} hidden states: {self.rows} rows{lanes}, {self.positions} positions ({how}), "
                f"{self.dtype}, aux layers {list(self.aux_layers)} + last layer {self.last_layer} "
                f"→ {self.folder}{skipped}" + "".join(f"; {note}" for note in self.notes))
