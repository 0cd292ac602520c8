"""Importing one stage loads that stage: no other stage, and nothing heavy it does not use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

STAGES = ("eaglefeed.producers", "eaglefeed.consumers.generate", "eaglefeed.consumers.converse",
          "eaglefeed.consumers.sink")
HEAVY = ("transformers", "httpx", "aiohttp")


def _loaded(module: str) -> set[str]:
    """The top-level and eaglefeed.* modules a fresh interpreter holds after ``import module``."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


@pytest.mark.parametrize(("module", "unwanted"), [
    ("eaglefeed.consumers.sink", HEAVY),
    ("eaglefeed.consumers.generate", ("transformers",)),
    ("eaglefeed.dataset", HEAVY),
    ("eaglefeed.ops.pipeline_status", HEAVY),
    ("eaglefeed.schemas", (*HEAVY, "kafka")),
    # the package, eaglefeed.load included, is imported by everything (render processes too)
    ("eaglefeed", (*HEAVY, "kafka", "pyarrow", "numpy", "datasets", "eaglefeed.dataset")),
])
def test_a_module_does_not_load_what_it_does_not_use(module, unwanted):
    loaded = _loaded(module)
    assert not loaded & set(unwanted), f"importing {module} loads {sorted(loaded & set(unwanted))}"


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_loads_no_other_stage(stage):
    others = {s for s in STAGES if s != stage}
    loaded = _loaded(stage)
    assert stage in loaded and not loaded & others, sorted(loaded & others)


def test_the_python_api_is_there_after_a_light_import():
    code = ("import json, sys, eaglefeed; "
            "print(json.dumps([callable(eaglefeed.load), 'pyarrow' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [True, False]
