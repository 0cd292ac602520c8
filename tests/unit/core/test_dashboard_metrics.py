"""The Grafana dashboard graphs only metrics the stages register (docs/METRICS.md is their catalogue)."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_metric_the_dashboard_queries_is_registered():
    catalogue = set(re.findall(r"`(eaglefeed_[a-z0-9_]+)`", (ROOT / "docs/METRICS.md").read_text()))
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/eaglefeed.json").read_text())
    exprs = re.findall(r'"expr": "((?:[^"\\]|\\.)*)"', json.dumps(dashboard, indent=1))
    queried = {re.sub(r"_(bucket|sum|count)$", "", name)
               for expr in exprs for name in re.findall(r"\beaglefeed_[a-z0-9_]+", expr)}
    assert queried and queried <= catalogue, sorted(queried - catalogue)
