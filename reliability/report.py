"""The suite's verdicts: one result per scenario, the summary table, and the memory table of a soak."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from reliability.ledger import Outcome
from reliability.monitor import Fault, Memory

FLAT_MB = 25.0  # a process's RSS may grow this much (or FLAT_SHARE of itself) from mid-run to the end
FLAT_SHARE = 0.10
JUDGED = ("producer", "worker", "sink", "sglang")  # the broker's JVM heap is shown, not judged


@dataclass
class Result:
    """How one scenario went."""

    scenario: str
    outcome: Outcome | None
    faults: list[Fault] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    memory: dict[str, Memory] | None = None  # kept for the soak's memory table
    notes: list[str] = field(default_factory=list)

    @property
    def recovery(self) -> float | None:
        """The longest recovery over the scenario's faults (None when no fault left work waiting)."""
        times = [f.recovery for f in self.faults if f.recovery is not None]
        return max(times) if times else None

    @property
    def memory_flat(self) -> bool:
        """Whether no judged process grew beyond the allowance in the second half of the run."""
        return all(row.flat for row in memory_rows(self.memory or {}) if row.judged)

    @property
    def ok(self) -> bool:
        """Books balanced, no process died, every fault recovered, memory flat (when sampled)."""
        recovered = all(f.recovery != float("inf") for f in self.faults)
        return (self.outcome is not None and self.outcome.ok and not self.errors and recovered
                and self.memory_flat)


@dataclass(frozen=True)
class MemoryRow:
    """RSS of one process at points of its run, and whether it stayed flat."""

    name: str
    points: tuple[float, ...]  # MB at 10 %, 25 %, 50 %, 75 % and 100 % of its samples
    growth: float  # MB from the median of the second quarter to the median of the last
    judged: bool

    @property
    def flat(self) -> bool:
        """Growth within the allowance."""
        return self.growth <= max(FLAT_MB, FLAT_SHARE * self.points[2])


def memory_rows(memory: dict[str, Memory]) -> list[MemoryRow]:
    """One row per process that was sampled at least 8 times in one life."""
    rows = []
    for name, mem in sorted(memory.items()):
        series = max(mem.series, key=len, default=[])
        if len(series) < 8:
            continue
        values = [mb for _t, mb in series]
        n = len(values)
        points = tuple(values[min(n - 1, int(q * n))] for q in (0.1, 0.25, 0.5, 0.75, 1.0))
        second = statistics.median(values[n // 4: n // 2])
        last = statistics.median(values[3 * n // 4:])
        rows.append(MemoryRow(name=name, points=points, growth=last - second,
                              judged=name.startswith(JUDGED) and len(mem.series) == 1))
    return rows


def table(results: list[Result]) -> str:
    """The summary table: scenario, prompts in, rows out, dead-lettered, duplicates, missing, recovery."""
    head = ("scenario", "prompts in", "samples", "rows out", "dead-lettered", "duplicates", "missing",
            "recovery", "time", "result")
    lines = [head]
    for r in results:
        o = r.outcome
        cells = (str(o.inputs), str(o.samples), str(o.rows_out), str(o.dead_lettered), str(o.duplicates),
                 str(o.missing)) if o else ("-",) * 6
        lines.append((r.scenario, *cells, _seconds(r.recovery), f"{r.seconds:.0f} s",
                      "ok" if r.ok else "FAILED"))
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(row, widths, strict=True))) for row in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def details(result: Result) -> str:
    """What happened in one scenario: faults and their recovery, dead-letter kinds, errors, memory."""
    out = [f"## {result.scenario}"]
    o = result.outcome
    if o is not None:
        out.append(f"units (prompts × samples, injected records once): {o.units}; rows without an input: "
                   f"{o.unexpected}; dead letters for samples that also became rows: {o.lettered_and_row}")
        if o.letter_kinds:
            kinds = ", ".join(f"{k}={v}" for k, v in sorted(o.letter_kinds.items()))
            out.append(f"dead letters by stage:kind: {kinds}")
        if o.state_problems or o.state_orphans or o.states_collected:
            out.append(f"hidden states: rows whose states are absent or do not match: {o.state_problems}; "
                       f"unnamed files gc collected: {o.states_collected}; left after gc: {o.state_orphans}")
    for f in result.faults:
        out.append(f"fault: {f.stage} {f.target} at +{f.at - result.faults[0].at:.1f}s, down "
                   f"{f.ended - f.at:.1f}s, recovery {_seconds(f.recovery)}")
        if f.resume:
            stages = ", ".join(f"{stage} {_seconds(t)}" for stage, t in f.resume.items())
            out.append(f"  resumed after the fault's first instant: {stages}")
    rows = memory_rows(result.memory or {})
    if rows:
        out.append("memory (RSS MB at 10/25/50/75/100 % of the run; growth = median of the last quarter "
                   "minus median of the second):")
        for row in rows:
            verdict = ("flat" if row.flat else "GROWING") if row.judged else "shown only"
            pts = " ".join(f"{p:7.1f}" for p in row.points)
            out.append(f"  {row.name:<10} {pts}   growth {row.growth:+6.1f}   {verdict}")
    out += result.notes
    out += [f"ERROR: {e}" for e in result.errors]
    return "\n".join(out)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return "never" if value == float("inf") else f"{value:.1f} s"
