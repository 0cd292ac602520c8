"""Dead-lettered input lines that a later run publishes: remember them, and mark their letters fixed.

A produce dead letter names its input line (``source:line``); the cure is to fix the line and
run ``produce`` again. To show that letter as resolved, the progress ledger remembers which lines
were dead-lettered (:class:`DeadLettered`, saved with the positions), and when a later read of such
a line becomes a prompt with no rejection of the same row, :class:`LineFixes` has a fix marker
sent to ``<prefix>.redriven`` (see :mod:`eaglefeed.schemas.redriven`). The publisher sends the
markers only once the prompts are acknowledged, and the ledger forgets a line only once its
marker is acknowledged, in the same checkpoint that saves the positions after it: a run cut short
in between reads the line again and sends the marker again (harmless: the newest one counts).

The ledger also keeps each remembered line's reason, so a line that is still bad when read again
(its file was edited elsewhere, or ``--restart``) and already has an open letter with the same
reason gets no second one (:meth:`DeadLettered.lettered`): one open letter per bad line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any

from eaglefeed.schemas.redriven import fix_marker

DEAD_LETTERED_LIMIT = 100_000
"""Dead-lettered lines remembered (about 8 bytes each in the ledger, which is rewritten at every
checkpoint); beyond it the oldest are forgotten, and their letters stay open when fixed."""

Line = tuple[str, int]  # (source as the dead letter records it, 1-based line)


class DeadLettered:
    """The input lines dead-lettered and not fixed since, oldest first, with the reason of their open letter.

    Bounded: beyond ``limit`` the oldest are forgotten. A reason of None is unknown (a ledger
    written before reasons were kept, or letters on a dead-letter topic since recreated).

    Args:
        lines: lines remembered already (from the ledger), oldest first, each with its reason.
        limit: how many lines to remember.
    """

    def __init__(self, lines: Iterable[tuple[Line, str | None]] = (), *,
                 limit: int = DEAD_LETTERED_LIMIT) -> None:
        self.limit = limit
        self._lines: dict[Line, str | None] = dict(lines)  # insertion order = age
        self.dirty = False  # changed since the ledger last saved it
        self._trim()

    def __contains__(self, line: object) -> bool:
        return line in self._lines

    def __len__(self) -> int:
        return len(self._lines)

    def __iter__(self) -> Iterator[Line]:
        return iter(self._lines)

    def add(self, source: str, line: int, reason: str | None = None) -> None:
        """Remember that ``line`` of ``source`` was dead-lettered (for ``reason``, when known)."""
        known = (source, line) in self._lines
        if not known or (reason is not None and self._lines[(source, line)] != reason):
            self._lines[(source, line)] = reason
            self.dirty = True
            if not known:
                self._trim()

    def lettered(self, source: str, line: int, reason: str) -> bool:
        """Whether ``line`` of ``source`` already has an open dead letter for ``reason``."""
        return self._lines.get((source, line)) == reason

    def forget_reasons(self) -> None:
        """The dead-letter topic is new: its letters are gone, so every line gets a letter again."""
        if any(reason is not None for reason in self._lines.values()):
            self._lines = dict.fromkeys(self._lines)
            self.dirty = True

    def discard(self, source: str, line: int) -> None:
        """Forget ``line`` of ``source`` (its letters are marked fixed)."""
        if (source, line) in self._lines:
            del self._lines[(source, line)]
            self.dirty = True

    def to_json(self) -> dict[str, list[Any]]:
        """The ledger's layout: ``[line, reason]`` pairs by source, oldest first (a path is written once)."""
        by_source: dict[str, list[Any]] = {}
        for (source, line), reason in self._lines.items():
            by_source.setdefault(source, []).append([line, reason])
        return by_source

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, limit: int = DEAD_LETTERED_LIMIT) -> DeadLettered:
        """Read :meth:`to_json`'s layout back (the age order across sources is approximate).

        A bare line number (the layout before reasons were kept) reads with an unknown reason.
        """
        if not isinstance(data, Mapping) or not all(isinstance(v, list) for v in data.values()):
            raise ValueError("dead_lettered must map sources to line lists")
        return cls((_entry(str(source), item) for source, items in data.items() for item in items),
                   limit=limit)

    def _trim(self) -> None:
        # Forget a tenth at once when full: deleting a dict's first key one at a time makes every
        # later lookup of the first key walk the deleted slots (see publisher.RecentIds).
        if len(self._lines) > self.limit:
            keep = self.limit - self.limit // 10
            self._lines = dict(islice(self._lines.items(), len(self._lines) - keep, None))
            self.dirty = True


def _entry(source: str, item: Any) -> tuple[Line, str | None]:
    """One remembered line of the ledger: ``[line, reason]``, or a bare line (reason unknown)."""
    if isinstance(item, list):
        line, reason = item
        return (source, int(line)), None if reason is None else str(reason)
    return (source, int(item)), None


class LineFixes:
    """Which remembered lines this run has published since, and their fix markers.

    Args:
        memory: the ledger's dead-lettered lines (updated here: added on rejection, forgotten
            once their marker is acknowledged).
    """

    def __init__(self, memory: DeadLettered) -> None:
        self.memory = memory
        self.pending: dict[Line, str] = {}  # fixed line → the prompt id it became, marker not sent yet

    def note(self, *, published: Mapping[Line, str], rejected: Iterable[tuple[Line, str]]) -> None:
        """Take in what one batch became: lines rejected are remembered, remembered lines published are fixed.

        A row that became a prompt and a rejection (``--turns all``, one turn too long) is not fixed.

        Args:
            published: each line that became a prompt → the (first) prompt id it became.
            rejected: the lines rejected (dead-lettered now or before), each with its reason.
        """
        bad = dict(rejected)
        if self.memory:
            for line, prompt_id in published.items():
                if line in self.memory and line not in bad:
                    self.pending[line] = prompt_id
        for (source, number), reason in bad.items():
            self.pending.pop((source, number), None)  # failed again before its marker went out
            self.memory.add(source, number, reason)

    def markers(self, *, at_ms: int) -> list[tuple[bytes, bytes]]:
        """The (key, value) fix markers of the pending lines."""
        return [fix_marker(source, line, prompt_id=prompt_id, at_ms=at_ms)
                for (source, line), prompt_id in self.pending.items()]

    def acknowledged(self) -> int:
        """The markers were acknowledged: forget their lines (the ledger saves that next); how many."""
        done = len(self.pending)
        for source, line in self.pending:
            self.memory.discard(source, line)
        self.pending.clear()
        return done
