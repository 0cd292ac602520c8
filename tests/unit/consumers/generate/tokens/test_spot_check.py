"""During the run, 1 prompt in --tokenizer-spot-check N is re-tokenized by the servers and counted."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from eaglefeed.consumers.generate.tokens import PROBES, load_local
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import GENERATION, PROMPT
from tests.fakes.kafka import FakeKafka
from tests.unit.consumers.generate.loop_support import (
    DEAD_LETTERS,
    GENERATIONS,
    PROMPTS,
    Server,
    WorkerRun,
)

LOCAL = load_local(str(TOKENIZER_DIR), trust_remote_code=False)
TEXTS = [f"<|im_start|>user\nquestion number {i}: how are you?<|im_end|>\n" for i in range(6)]
METRIC = "eaglefeed_worker_tokenizer_spot_checks_total"


class TokenizingServer(Server):
    """SGLang with ``/tokenize``: right on the start-up probes; on other text only if ``faithful``.

    An unfaithful one is the drift the start-up check cannot see: another model behind the URL
    later, or a difference only on text the fixed probes miss.
    """

    def __init__(self, *, faithful: bool) -> None:
        super().__init__()
        self.faithful = faithful
        self.tokenized: list[str] = []

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/tokenize":
            return await super()._handle(request)
        body = json.loads(request.content)
        if "prompt" not in body:  # chat messages: the stand-in (like SGLang without a template) refuses them
            return httpx.Response(400, json={"error": {"message": "Chat template tokenization requires a "
                                                                  "template manager."}})
        text = body["prompt"]
        self.tokenized.append(text)
        ids = LOCAL.encode(text)
        if not self.faithful and text not in (*PROBES, *LOCAL.specials):
            ids = ids[::-1]
        return httpx.Response(200, json={"tokens": ids, "count": len(ids)})


def kafka_with_demo_prompts() -> FakeKafka:
    fake = FakeKafka()
    for topic, partitions in ((PROMPTS, 1), (GENERATIONS, 1), (DEAD_LETTERS, 1)):
        fake.create_topic(topic, partitions)
    for i, text in enumerate(TEXTS):
        fake.append(PROMPTS, PROMPT.encode({
            "prompt_id": f"p{i}", "source": "test", "source_row": str(i), "turn_index": 0,
            "input_ids": LOCAL.encode(text), "num_samples": 1,
            "sampling_params": {"max_new_tokens": 8, "temperature": 0.7, "top_p": 0.95, "top_k": 20,
                                "min_p": 0.0, "stop_token_ids": [], "seed": 1},
            "chat_template_kwargs": "{}", "tokenizer_id": str(TOKENIZER_DIR), "tokenizer_hash": "t",
            "chat_template_hash": "c", "created_at": 0}), key=b"k", partition=0)
    return fake


def run(server: TokenizingServer, every: int) -> WorkerRun:
    fake = kafka_with_demo_prompts()
    worker = WorkerRun(fake, server, exit_when_idle=0.3, check_vocab=True, tokenizer_spot_check=every)
    assert worker.join() == len(TEXTS)
    rows = [GENERATION.decode(r.value) for r in fake.read(GENERATIONS)]
    assert len(rows) == len(TEXTS) and fake.read(DEAD_LETTERS) == []  # a spot check never stops a prompt
    return worker


def test_a_server_that_drifts_after_start_up_is_counted_in_one_prompt_in_n(caplog):
    caplog.set_level(logging.WARNING)
    server = TokenizingServer(faithful=False)
    worker = run(server, every=2)
    spot = [t for t in server.tokenized if t not in (*PROBES, *LOCAL.specials)]
    assert len(spot) == len(TEXTS) // 2 and set(spot) <= set(TEXTS)  # the prompts' own text, 1 in 2
    assert worker.metric(METRIC, outcome="disagree") == len(TEXTS) // 2
    assert worker.metric(METRIC, outcome="agree") == 0
    warned = [r.getMessage() for r in caplog.records if "spot check" in r.getMessage()]
    assert len(warned) == 1 and str(TOKENIZER_DIR) in warned[0]  # once per server, naming the tokenizer


@pytest.mark.parametrize(("every", "checks"), [(3, 2), (1, 6), (0, 0)])
def test_a_faithful_server_agrees_and_n_sets_how_often(every, checks):
    server = TokenizingServer(faithful=True)
    worker = run(server, every=every)
    assert worker.metric(METRIC, outcome="agree") == checks
    assert worker.metric(METRIC, outcome="disagree") == 0
    assert len([t for t in server.tokenized if t in TEXTS]) == checks
