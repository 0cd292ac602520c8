"""vLLM's /tokenize agrees with the worker's encoding of the demo tokenizer (issue 24), on a real server;
prompts of another tokenizer stop the worker, and the run's spot check agrees on a rendered prompt."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path

import httpx
import pytest

from eaglefeed.consumers.generate.inference import ServerPool
from eaglefeed.consumers.generate.tokens import PROBES, SpotCheck, TokenizerAgreement, VocabSizes, load_local
from eaglefeed.core.errors import ConfigError
from tests.engine.conftest import TOKENIZER_DIR, VllmServer

pytestmark = pytest.mark.engine


def test_vllm_tokenize_shape_matches_what_the_worker_reads(vllm_server: VllmServer) -> None:
    local = load_local(str(TOKENIZER_DIR), trust_remote_code=False)
    body = httpx.post(f"{vllm_server.url}/tokenize", json={"prompt": PROBES[1], "add_special_tokens": False},
                      timeout=60).json()
    assert body["tokens"] == local.encode(PROBES[1]) and body["count"] == len(body["tokens"])


def test_the_worker_accepts_vllm_serving_the_prompts_tokenizer(vllm_server: VllmServer,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    pool = _checked(vllm_server, str(TOKENIZER_DIR))
    assert pool.servers[0].refused is None
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def _swapped_tokenizer(target: Path) -> Path:
    """A copy of the demo tokenizer with the ids of two tokens of the plain probe swapped."""
    shutil.copytree(TOKENIZER_DIR, target)
    first, second = load_local(str(TOKENIZER_DIR), trust_remote_code=False).encode(PROBES[0])[:2]
    spec = json.loads((target / "tokenizer.json").read_text(encoding="utf-8"))
    names = {i: token for token, i in spec["model"]["vocab"].items()}
    spec["model"]["vocab"][names[first]], spec["model"]["vocab"][names[second]] = second, first
    (target / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return target


def test_prompts_of_another_tokenizer_stop_the_worker_in_one_line_on_vllm(vllm_server: VllmServer,
                                                                          tmp_path: Path) -> None:
    """The issue's case: prompts rendered with a shuffled vocabulary, a server with the right one."""
    with pytest.raises(ConfigError) as caught:
        _checked(vllm_server, str(_swapped_tokenizer(tmp_path / "swapped")))
    message = str(caught.value)
    assert vllm_server.url in message and "swapped" in message and "\n" not in message


def test_the_run_spot_check_agrees_with_vllm_on_a_rendered_prompt(vllm_server: VllmServer) -> None:
    """A chat-rendered prompt, special tokens included, decodes and re-tokenizes alike on vLLM."""
    local = load_local(str(TOKENIZER_DIR), trust_remote_code=False)
    text = "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    prompt = {"prompt_id": "p0", "tokenizer_id": str(TOKENIZER_DIR), "input_ids": local.encode(text)}
    outcomes: list[str] = []

    async def go() -> None:
        async with httpx.AsyncClient() as http:
            pool = ServerPool(client=http, urls=[vllm_server.url], eject_after=3, probe_interval=1.0,
                              engine="vllm")
            vocab = VocabSizes(fixed=None, from_tokenizer=True, pool=pool, http=http)
            await vocab.size_for(str(TOKENIZER_DIR))
            await SpotCheck(vocab=vocab, every=1, on_outcome=outcomes.append).check(prompt)
            await pool.close()

    asyncio.run(go())
    assert outcomes == ["agree"]


def test_vllm_renders_the_sample_chat_as_the_producer_does(vllm_server: VllmServer,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """vLLM's /tokenize with messages (its own template) gives the ids transformers renders here."""
    caplog.set_level(logging.INFO)
    assert load_local(str(TOKENIZER_DIR), trust_remote_code=False).render_chat is not None
    pool = _checked(vllm_server, str(TOKENIZER_DIR))
    assert pool.servers[0].refused is None
    assert any("compared on 1 of 1" in r.getMessage() for r in caplog.records), caplog.text


def test_prompts_rendered_with_another_chat_template_stop_the_worker_on_vllm(vllm_server: VllmServer,
                                                                             tmp_path: Path) -> None:
    """Same vocabulary, another template (one separator changed): only the chat rendering tells."""
    other = tmp_path / "other-template"
    shutil.copytree(TOKENIZER_DIR, other)
    template = other / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    turn_end = "<|im_end|>\\n'"  # the template's Jinja string literal: a backslash-n, then the quote
    assert turn_end in text
    template.write_text(text.replace(turn_end, "<|im_end|>\\n\\n'"), encoding="utf-8")
    local = load_local(str(other), trust_remote_code=False)
    assert all(local.encode(p) == load_local(str(TOKENIZER_DIR), trust_remote_code=False).encode(p)
               for p in PROBES)  # the text probes alone cannot tell
    with pytest.raises(ConfigError) as caught:
        _checked(vllm_server, str(other))
    message = str(caught.value)
    assert vllm_server.url in message and "chat template" in message and "\n" not in message


def _checked(vllm_server: VllmServer, tokenizer: str) -> ServerPool:
    """Run the start-up agreement check of ``tokenizer`` against the real vLLM; return the pool."""
    local = load_local(tokenizer, trust_remote_code=False)

    async def go() -> ServerPool:
        async with httpx.AsyncClient() as http:
            pool = ServerPool(client=http, urls=[vllm_server.url], eject_after=3, probe_interval=1.0,
                              engine="vllm")
            try:
                await TokenizerAgreement(pool=pool, client=http).check(local)
            finally:
                await pool.close()
            return pool

    return asyncio.run(go())
