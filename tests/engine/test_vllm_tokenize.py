"""vLLM's /tokenize agrees with the worker's encoding of the demo tokenizer (issue 24), on a real server."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from eaglefeed.consumers.generate.agreement import PROBES, TokenizerAgreement
from eaglefeed.consumers.generate.servers import ServerPool
from eaglefeed.consumers.generate.vocab import load_local
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
    local = load_local(str(TOKENIZER_DIR), trust_remote_code=False)

    async def go() -> ServerPool:
        async with httpx.AsyncClient() as http:
            pool = ServerPool(client=http, urls=[vllm_server.url], eject_after=3, probe_interval=1.0,
                              engine="vllm")
            await TokenizerAgreement(pool=pool, client=http).check(local)
            await pool.close()
            return pool

    pool = asyncio.run(go())
    assert pool.servers[0].refused is None
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
