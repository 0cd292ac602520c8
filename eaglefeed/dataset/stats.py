"""``eaglefeed stats``: rows, tokens, finish reasons, lengths and flags of a dataset, streamed.

Length percentiles are exact (nearest rank, from a count per length), so a user can choose
the ``--max-length`` of an export, and the report says what each framework's default maximum
would cost (rows longer, rows it drops, loss tokens lost).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eaglefeed.core.errors import ConfigError, DatasetError
from eaglefeed.dataset import manifest
from eaglefeed.dataset.identity import Identity, describe_mix, mixed, refuse_mixed
from eaglefeed.dataset.ids import DIGEST, digest
from eaglefeed.dataset.lengths import FRAMEWORK_MAX_LENGTH, LengthCounts
from eaglefeed.dataset.snapshot import iter_batches, snapshot

# Length buckets: [0, 1), [1, 2), [2, 4), ... [2^19, 2^20), [2^20, ∞)
EDGES = np.array([0, *(2**k for k in range(21)), np.iinfo(np.int64).max], np.int64)
_COLUMNS = ("id", "prompt_len", "seq_len", "finish_reason", "has_reasoning", "has_tool_call",
            "sampling_params", "chat_template_kwargs", "cached_tokens", "turn_index")
UNKNOWN = "unknown"  # a row whose sampling params or template kwargs do not read
# The worker records sampling params with json.dumps: a regex finds the temperature of a batch at
# C speed (a JSON parse per row would cost stats more than everything else it counts together).
_TEMPERATURE = r'"temperature"\s*:\s*(?P<t>[-+0-9.eE]+)'


@dataclass
class DatasetStats:
    """Summary of the live rows of a dataset, plus what the manifest says was left out."""

    files: int = 0
    bytes: int = 0
    rows: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the prefix cache served (SGLang cached_tokens, vLLM's hits)
    # turn index → [rows, prompt tokens, cached tokens]: how much of each turn's prompt was prefilled again
    by_turn: dict[int, list[int]] = field(default_factory=dict)
    finish_reasons: Counter[str] = field(default_factory=Counter)
    reasoning: int = 0
    tool_call: int = 0
    flags_unknown: int = 0
    prompt_hist: np.ndarray = field(default_factory=lambda: np.zeros(len(EDGES) - 1, np.int64))
    output_hist: np.ndarray = field(default_factory=lambda: np.zeros(len(EDGES) - 1, np.int64))
    duplicates_dropped: int = 0
    duplicate_ids: int = 0  # rows whose id another live row has too (counted in the data, not the manifest)
    dead_lettered: int = 0
    capped: int = 0  # rows the engine cut below max_new_tokens, kept with --on-capped keep
    # rows with hidden states (row schema 5), their files' bytes and the positions they hold
    state_rows: int = 0
    state_bytes: int = 0
    state_positions: int = 0
    # the sampling mix the rows were generated with (produce --temperature-cycle, --template-kwargs-cycle)
    temperatures: Counter[str] = field(default_factory=Counter)
    template_kwargs: Counter[str] = field(default_factory=Counter)  # canonical JSON, as recorded
    dropped_by_compaction: Counter[str] = field(default_factory=Counter)
    # what the rows were made with, rows per identity (more than one only with allow_mixed)
    identities: Counter[Identity] = field(default_factory=Counter)
    seq_lengths: LengthCounts = field(default_factory=LengthCounts)
    output_lengths: LengthCounts = field(default_factory=LengthCounts)
    # framework → {"max_length", "over", "dropped_rows", "lost_loss_tokens"} at its default maximum
    framework_cuts: dict[str, dict[str, int]] = field(default_factory=lambda: {
        fmt: {"max_length": length, "over": 0, "dropped_rows": 0, "lost_loss_tokens": 0}
        for fmt, length in FRAMEWORK_MAX_LENGTH.items()})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (histograms as ``{"lo-hi": count}`` over non-empty buckets)."""
        return {
            "files": self.files, "bytes": self.bytes, "rows": self.rows,
            "tokens": self.prompt_tokens + self.output_tokens, "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens, "cached_tokens": self.cached_tokens,
            "prefill_tokens": self.prompt_tokens - self.cached_tokens,
            "by_turn": {str(t): {"rows": r, "prompt_tokens": p, "cached_tokens": c}
                        for t, (r, p, c) in sorted(self.by_turn.items())},
            "finish_reasons": dict(self.finish_reasons),
            "has_reasoning": self.reasoning, "has_tool_call": self.tool_call,
            "flags_unknown": self.flags_unknown,
            "prompt_len_hist": _buckets(self.prompt_hist), "output_len_hist": _buckets(self.output_hist),
            "duplicates_dropped": self.duplicates_dropped, "duplicate_ids": self.duplicate_ids,
            "dead_lettered": self.dead_lettered, "capped": self.capped,
            "hidden_states": {"rows": self.state_rows, "bytes": self.state_bytes,
                              "positions": self.state_positions,
                              "bytes_per_token": round(self.state_bytes / max(self.state_positions, 1), 1)},
            "temperatures": dict(_by_temperature(self.temperatures)),
            "chat_template_kwargs": dict(self.template_kwargs.most_common()),
            "dropped_by_compaction": dict(self.dropped_by_compaction),
            "made_with": [dict(vars(ident), rows=rows) for ident, rows in self.identities.most_common()],
            "seq_len_percentiles": self.seq_lengths.summary(),
            "output_len_percentiles": self.output_lengths.summary(),
            "framework_default_cuts": self.framework_cuts,
        }


def compute_stats(root: Path, *, allow_mixed: bool = False) -> DatasetStats:
    """Read the few columns stats need from every live file, a batch at a time.

    Raises:
        DatasetError: ``root`` is not a dataset, a file cannot be read, or its rows were made with
            more than one tokenizer, chat template or model and ``allow_mixed`` is false.
    """
    stats = DatasetStats()
    events = manifest.read_manifest(Path(root))
    stats.duplicates_dropped = sum(e.get("duplicates", 0) for e in events)
    stats.dead_lettered = sum(e.get("dead_lettered", 0) for e in events)
    for dropped in manifest.dropped_files(events):
        stats.dropped_by_compaction.update(dropped.get("reasons", {}))
    digests: list[np.ndarray] = []
    with snapshot(root) as files:
        stats.identities = refuse_mixed(files, allow_mixed=allow_mixed)
        stats.files = len(files)
        stats.bytes = sum(f.stat().st_size for f in files)
        for batch in iter_batches(files, columns=_COLUMNS, batch_rows=65536):
            prompt = batch.column("prompt_len").to_numpy().astype(np.int64)
            output = batch.column("seq_len").to_numpy().astype(np.int64) - prompt
            stats.rows += batch.num_rows
            digests.append(np.array([digest(i) for i in batch.column("id").to_pylist()], DIGEST))
            stats.prompt_tokens += int(prompt.sum())
            stats.output_tokens += int(output.sum())
            _count_cached(stats, batch, prompt)
            stats.prompt_hist += np.histogram(prompt, EDGES)[0]
            stats.output_hist += np.histogram(output, EDGES)[0]
            _count_lengths(stats, prompt, output)
            stats.finish_reasons.update(batch.column("finish_reason").to_pylist())
            reasoning = batch.column("has_reasoning")
            stats.reasoning += int(sum(1 for v in reasoning.to_pylist() if v))
            stats.tool_call += int(sum(1 for v in batch.column("has_tool_call").to_pylist() if v))
            stats.flags_unknown += reasoning.null_count
            _count_mix(stats, batch)
        stats.capped = sum(_capped_rows(f) for f in files)
        for path in files:
            _count_states(stats, path)
    if digests:  # 16 bytes per row: an honest count, whatever the manifest's counters say
        stats.duplicate_ids = stats.rows - len(np.unique(np.concatenate(digests)))
    return stats


def render(stats: DatasetStats) -> str:
    """A plain-text report."""
    rows = max(stats.rows, 1)
    differ = mixed(stats.identities)
    lines = [
        f"rows: {stats.rows} in {stats.files} files ({stats.bytes / 1e6:.1f} MB)",
        *([f"WARNING: {describe_mix(stats.identities, differ)}"] if differ else []),
        f"tokens: {stats.prompt_tokens + stats.output_tokens} ({stats.prompt_tokens} prompt, "
        f"{stats.output_tokens} generated = loss tokens)",
        f"prompt tokens from the engine's prefix cache: {stats.cached_tokens} "
        f"({100 * stats.cached_tokens / max(stats.prompt_tokens, 1):.1f}%); prefilled: "
        f"{stats.prompt_tokens - stats.cached_tokens}"
        + ("; by turn: " + ", ".join(f"turn {t} {100 * c / max(p, 1):.1f}% of {p} ({r} rows)"
                                     for t, (r, p, c) in sorted(stats.by_turn.items()))
           if len(stats.by_turn) > 1 else ""),
        "finish reasons: " + (", ".join(f"{k} {v} ({100 * v / rows:.1f}%)"
                                        for k, v in stats.finish_reasons.most_common()) or "-"),
        f"with reasoning: {stats.reasoning} ({100 * stats.reasoning / rows:.1f}%); with tool calls: "
        f"{stats.tool_call} ({100 * stats.tool_call / rows:.1f}%)"
        + (f"; flags unknown for {stats.flags_unknown} rows" if stats.flags_unknown else ""),
        f"duplicates dropped by the sink: {stats.duplicates_dropped}; dead-lettered by the sink: "
        f"{stats.dead_lettered}",
        f"capped by the engine below max_new_tokens (kept with --on-capped keep): {stats.capped}",
        f"hidden states: {stats.state_rows} rows, {stats.state_bytes / 2**20:.1f} MiB, "
        f"{stats.state_bytes / max(stats.state_positions, 1) / 1024:.2f} KiB per token"
        + (f"; {stats.rows - stats.state_rows} rows without" if stats.state_rows < stats.rows else ""),
        "temperatures: " + (", ".join(f"{t} {n} ({100 * n / rows:.1f}%)"
                                      for t, n in _by_temperature(stats.temperatures)) or "-"),
        "chat template kwargs: " + (", ".join(f"{k} {n} ({100 * n / rows:.1f}%)"
                                              for k, n in stats.template_kwargs.most_common()) or "-"),
        f"duplicate ids in the data: {stats.duplicate_ids}"
        + (" (WARNING: rows with the same id; was the output written by two sinks?)"
           if stats.duplicate_ids else ""),
        "dropped by compaction: "
        + (", ".join(f"{k} {v}" for k, v in sorted(stats.dropped_by_compaction.items())) or "none"),
        "length percentiles (p50 / p90 / p99 / max): seq_len " + _percentiles(stats.seq_lengths)
        + "; output (loss tokens) " + _percentiles(stats.output_lengths),
        *(f"at the {fmt} default max length {cut['max_length']}: {cut['over']} rows longer, "
          f"{cut['dropped_rows']} of them left with no loss token, {cut['lost_loss_tokens']} loss tokens lost"
          for fmt, cut in stats.framework_cuts.items()),
        "length histogram (tokens):",
        f"  {'bucket':>17}  {'prompts':>9}  {'outputs':>9}",
    ]
    for i in np.flatnonzero(stats.prompt_hist + stats.output_hist).tolist():
        lines.append(f"  {_label(i):>17}  {stats.prompt_hist[i]:>9}  {stats.output_hist[i]:>9}")
    return "\n".join(lines)


def plot(stats: DatasetStats, path: Path) -> None:
    """Draw the length histograms and the finish-reason mix to ``path`` (PNG).

    Raises:
        ConfigError: matplotlib is not installed (``pip install -e '.[plot]'`` in a clone).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("stats --plot needs matplotlib: pip install matplotlib "
                          "(from a clone: pip install -e '.[plot]')") from exc
    used = np.flatnonzero(stats.prompt_hist + stats.output_hist)
    lo, hi = (int(used.min()), int(used.max()) + 1) if used.size else (0, 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    x = np.arange(lo, hi)
    left.bar(x - 0.2, stats.prompt_hist[lo:hi], width=0.4, label="prompt")
    left.bar(x + 0.2, stats.output_hist[lo:hi], width=0.4, label="output (loss tokens)")
    left.set_xticks(x, [_label(i) for i in range(lo, hi)], rotation=45, ha="right", fontsize=8)
    left.set_xlabel("length (tokens)")
    left.set_ylabel("rows")
    left.set_title(f"Length histogram ({stats.rows} rows)")
    left.legend()
    reasons = stats.finish_reasons.most_common()
    right.bar([k for k, _ in reasons], [v for _, v in reasons], color="tab:green")
    right.set_title("Finish reasons")
    right.set_ylabel("rows")
    for i, (_, v) in enumerate(reasons):
        right.annotate(f"{100 * v / max(stats.rows, 1):.1f}%", (i, v), ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _count_cached(stats: DatasetStats, batch: pa.RecordBatch, prompt: np.ndarray) -> None:
    """Add a batch's cached prompt tokens, in total and by turn index."""
    cached = batch.column("cached_tokens").fill_null(0).to_numpy().astype(np.int64)
    turns = batch.column("turn_index").fill_null(0).to_numpy().astype(np.int64)
    stats.cached_tokens += int(cached.sum())
    for turn in np.unique(turns).tolist():
        mine = turns == turn
        row = stats.by_turn.setdefault(int(turn), [0, 0, 0])
        row[0] += int(mine.sum())
        row[1] += int(prompt[mine].sum())
        row[2] += int(cached[mine].sum())


def _count_lengths(stats: DatasetStats, prompt: np.ndarray, output: np.ndarray) -> None:
    """Exact length counts, and what each framework's default cut (truncate, drop if no loss left) costs."""
    seq = prompt + output
    stats.seq_lengths.add(seq)
    stats.output_lengths.add(output)
    for cut in stats.framework_cuts.values():
        limit = cut["max_length"]
        over = seq > limit
        emptied = over & (prompt >= limit)
        cut["over"] += int(over.sum())
        cut["dropped_rows"] += int(emptied.sum())
        cut["lost_loss_tokens"] += int(np.where(emptied, output, np.where(over, seq - limit, 0)).sum())


def _count_mix(stats: DatasetStats, batch: pa.RecordBatch) -> None:
    """Count a batch's rows per temperature and per template kwargs (the sampling mix they used)."""
    params = batch.column("sampling_params")
    found = pc.struct_field(pc.extract_regex(params, _TEMPERATURE), [0])
    for entry in pc.value_counts(found).to_pylist():
        if entry["values"] is not None:
            stats.temperatures[_temperature(f'{{"temperature": {entry["values"]}}}')] += entry["counts"]
    missed = pc.filter(params, pc.is_null(found))  # not the worker's layout: read each one whole
    stats.temperatures.update(map(_temperature, missed.to_pylist()))
    for entry in pc.value_counts(batch.column("chat_template_kwargs")).to_pylist():
        stats.template_kwargs[UNKNOWN if entry["values"] is None else entry["values"]] += entry["counts"]


def _temperature(sampling_params: str | None) -> str:
    """The temperature a row was generated with, as text (``0.6``), from its recorded sampling params."""
    try:
        value = json.loads(sampling_params or "")["temperature"]
        return repr(float(value))
    except (ValueError, KeyError, TypeError, RecursionError):
        return UNKNOWN


def _by_temperature(counts: Counter[str]) -> list[tuple[str, int]]:
    """The temperature counts, coolest first (the unreadable ones last)."""
    return sorted(counts.items(), key=lambda kv: (kv[0] == UNKNOWN,
                                                  0.0 if kv[0] == UNKNOWN else float(kv[0])))


def _capped_rows(path: Path) -> int:
    """Rows of one file with a ``capped_at`` (row schema 4; older files have the column not)."""
    try:
        reader = pq.ParquetFile(path)
        if "capped_at" not in reader.schema_arrow.names:
            return 0
        column = reader.read(columns=["capped_at"]).column("capped_at")
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from exc
    return int(len(column) - column.null_count)


def _count_states(stats: DatasetStats, path: Path) -> None:
    """Add one file's rows with hidden states, their bytes and positions (row schema 5; none before)."""
    try:
        reader = pq.ParquetFile(path)
        if "hidden_states" not in reader.schema_arrow.names:
            return
        refs = reader.read(columns=["hidden_states"]).column("hidden_states").to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from exc
    for ref in refs:
        if ref:
            stats.state_rows += 1
            stats.state_bytes += int(ref["bytes"])
            stats.state_positions += int(ref["shape"][0])


def _percentiles(lengths: LengthCounts) -> str:
    return " / ".join(str(v) for v in lengths.summary().values())


def _label(i: int) -> str:
    lo, hi = int(EDGES[i]), int(EDGES[i + 1])
    return f"≥{lo}" if i == len(EDGES) - 2 else f"{lo}–{hi - 1}" if hi - lo > 1 else f"{lo}"


def _buckets(hist: np.ndarray) -> dict[str, int]:
    return {_label(i): int(hist[i]) for i in np.flatnonzero(hist).tolist()}
