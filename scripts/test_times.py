"""Where a test run's time went: read pytest's JUnit XML and print the slowest files and tests.

Usage: python scripts/test_times.py [JUNIT_XML ...] [--top N]

`make test` writes the JUnit file (.eaglefeed/test-results/junit.xml) and calls this at the end, so
every run, CI's included, prints its own table; docs/TESTING.md keeps the figures of a CI run.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

DEFAULT_JUNIT = Path(".eaglefeed/test-results/junit.xml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", nargs="*", type=Path, default=[DEFAULT_JUNIT], help="pytest --junitxml files")
    parser.add_argument("--top", type=int, default=25, help="how many tests and files to list (default 25)")
    args = parser.parse_args()
    cases = [case for path in args.junit for case in ET.parse(path).getroot().iter("testcase")]
    tests: list[tuple[float, str]] = []
    by_file: dict[str, float] = defaultdict(float)
    by_folder: dict[str, float] = defaultdict(float)
    for case in cases:
        seconds = float(case.get("time", "0"))
        module = case.get("classname", "").split(".")
        # classname is dotted: tests.integration.test_x[.Class]; the file is the first test_* part
        stem = next((i for i, part in enumerate(module) if part.startswith("test_")), len(module) - 1)
        file = "/".join(module[: stem + 1]) + ".py"
        tests.append((seconds, f"{file}::{case.get('name')}"))
        by_file[file] += seconds
        by_folder["/".join(module[:2])] += seconds
    total = sum(seconds for seconds, _ in tests)
    print(f"{len(tests)} tests, {total / 60:.1f} min of test time in all")
    for folder, seconds in sorted(by_folder.items(), key=lambda kv: -kv[1]):
        print(f"  {seconds / 60:6.1f} min  {seconds / total:4.0%}  {folder}/")
    print(f"\nslowest {args.top} files:")
    for file, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {seconds:7.1f} s  {file}")
    print(f"\nslowest {args.top} tests:")
    for seconds, name in sorted(tests, reverse=True)[: args.top]:
        print(f"  {seconds:7.1f} s  {name}")


if __name__ == "__main__":
    main()
