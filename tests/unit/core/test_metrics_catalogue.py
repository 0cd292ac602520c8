import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def load_builder():
    spec = importlib.util.spec_from_file_location("build_metrics_catalogue",
                                                  ROOT / "scripts" / "build_metrics_catalogue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_catalogue_is_up_to_date():
    expected = load_builder().catalogue()
    assert (ROOT / "docs" / "METRICS.md").read_text() == expected, \
        "run: .venv/bin/python scripts/build_metrics_catalogue.py"


def test_metric_names_follow_prometheus_conventions():
    text = load_builder().catalogue()
    for name, kind in re.findall(r"^\| `(eaglefeed_[a-z_]+)` \| (\w+) \|", text, flags=re.M):
        assert kind != "counter" or name.endswith("_total"), name
        assert not re.search(r"_(ms|milliseconds|mb|kb)(_|$)", name), name
        if "latency" in name or "duration" in name:
            assert name.endswith(("_seconds", "_seconds_total")), name
