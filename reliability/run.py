"""``python -m reliability``: run the scenarios on a broker of their own and print the table.

Exit code 0 when every scenario balanced its books (nothing lost, nothing doubled), no process
died on its own, every fault recovered and (in the soak) memory stayed flat.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from eaglefeed.core.config import cache_dir
from reliability.broker import Broker
from reliability.report import Result, details, table
from reliability.scenarios import QUICK, SCENARIOS
from reliability.scenarios.common import Settings

log = logging.getLogger("reliability")


def main(argv: list[str] | None = None) -> int:
    """Run the chosen scenarios; returns the exit code."""
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up children and the broker on SIGTERM
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # the broker goes away on purpose
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per health and metrics read
    names = args.only or (list(QUICK) if args.quick else list(SCENARIOS))
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; choose from {sorted(SCENARIOS)}")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="eaglefeed-reliability-"))
    work.mkdir(parents=True, exist_ok=True)
    settings = Settings(quick=args.quick, soak_prompts=args.soak_prompts, leader_down=args.leader_down,
                        nemesis_minutes=args.nemesis_minutes, nemesis_seed=args.nemesis_seed,
                        nemesis_kinds=tuple(args.nemesis_kinds) if args.nemesis_kinds else None,
                        nemesis_exactly_once=args.nemesis_exactly_once)
    results = run_scenarios(names, work=work, settings=settings, cache_dir=Path(args.cache_dir))
    print("\n" + table(results) + "\n")
    for result in results:
        print(details(result) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps([_as_json(r) for r in results], indent=2))
    ok = all(r.ok for r in results)
    if ok and not args.keep and not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"logs, inputs and datasets are in {work}")
    return 0 if ok else 1


def run_scenarios(names: list[str], *, work: Path, settings: Settings, cache_dir: Path) -> list[Result]:
    """Start a broker under ``work``, run ``names`` one after another on it, stop it."""
    broker = Broker(data_dir=work / "broker", cache_dir=cache_dir)
    results = []
    try:
        broker.start()
        for name in names:
            broker.start()  # a no-op unless a failed scenario left it stopped
            started = time.monotonic()
            log.info("scenario %s: starting", name)
            result = SCENARIOS[name](broker, work, settings)
            result.seconds = result.seconds or time.monotonic() - started
            log.info("scenario %s: %s in %.0fs", name, "ok" if result.ok else "FAILED", result.seconds)
            results.append(result)
    finally:
        broker.stop()
    return results


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reliability", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the CI form: smaller runs, no soak")
    p.add_argument("--only", nargs="+", metavar="SCENARIO", help=f"run only these: {', '.join(SCENARIOS)}")
    p.add_argument("--soak-prompts", type=int, default=20000, help="prompts fed to the soak")
    p.add_argument("--leader-down", type=float, metavar="SECONDS",
                   help="how long leader-kill leaves the killed node down (default 60, 10 with --quick)")
    p.add_argument("--nemesis-minutes", type=float, metavar="MINUTES",
                   help="how long the nemesis strikes (default 10, 2 with --quick)")
    p.add_argument("--nemesis-seed", type=int, default=26, help="seeds the nemesis's schedule (default 26)")
    p.add_argument("--nemesis-kinds", nargs="+", metavar="KIND",
                   help="strike only with these: kill, pause, node-kill, node-pause, standin (default all)")
    p.add_argument("--nemesis-exactly-once", action="store_true",
                   help="the nemesis's workers run generate --exactly-once (transactions through faults)")
    p.add_argument("--work-dir", help="keep inputs, logs and datasets here (default: a temp dir, "
                                      "removed when everything passed)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir even when everything passed")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--cache-dir", default=str(cache_dir()),
                   help="the Kafka jar cache (env EAGLEFEED_CACHE_DIR)")
    return p


def _as_json(result: Result) -> dict[str, object]:
    return {"scenario": result.scenario, "ok": result.ok, "seconds": round(result.seconds, 1),
            "recovery": result.recovery, "outcome": asdict(result.outcome) if result.outcome else None,
            "faults": [{"stage": f.stage, "target": f.target, "down": round(f.ended - f.at, 1),
                        "recovery": f.recovery, "resume": f.resume} for f in result.faults],
            "errors": result.errors, "notes": result.notes}
