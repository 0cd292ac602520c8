"""A server preferring sampling params the worker sends: the row's sampling is what the engine applied.

SGLang merges ``--preferred-sampling-params`` under every request. The stand-in here prefers
``ignore_eos: true`` and ``min_new_tokens: 40``; eaglefeed sends both explicitly (``false``, 0),
and the rows say so. If the request did not win, every sample would run to ``max_new_tokens``
(``length``); rows that stop early on the EOS id, some below 40 tokens, show the engine applied
what the rows record.
"""

from __future__ import annotations

import json

import pytest

from tests.factories import make_prompt
from tests.integration.worker_support import (
    dead_letters,
    generations,
    publish_prompts,
    spawn_worker,
)

pytestmark = pytest.mark.kafka
PROMPTS = 24
MAX_NEW = 48
PREFERRED = {"ignore_eos": True, "min_new_tokens": 40}


def test_rows_record_the_sampling_the_engine_applied_over_the_servers_preferences(
        kafka_config, standin_factory, tmp_path):
    url = standin_factory("--preferred-sampling-params", json.dumps(PREFERRED), "--output-len-mean", "10")
    publish_prompts(kafka_config, [make_prompt(i, max_new_tokens=MAX_NEW) for i in range(PROMPTS)],
                    partitions=2)
    log = tmp_path / "worker.log"
    worker = spawn_worker(kafka_config, url, log, "--exit-when-idle", "4", "--connect-timeout", "20")
    try:
        assert worker.wait(timeout=180) == 0, log.read_text()[-3000:]
    finally:
        worker.kill()
    rows = [row for _rec, row in generations(kafka_config)]
    assert len(rows) == PROMPTS and dead_letters(kafka_config) == []
    for row in rows:
        sent = json.loads(row["sampling_params"])
        assert (sent["ignore_eos"], sent["min_new_tokens"]) == (False, 0)  # what the row records
    stopped = [row for row in rows if row["finish_reason"] == "stop"]
    assert stopped, "every row ran to max_new_tokens: the server's ignore_eos won over the request"
    assert min(len(row["output_ids"]) for row in stopped) < PREFERRED["min_new_tokens"]
