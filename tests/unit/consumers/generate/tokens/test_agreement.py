"""The servers' /tokenize is checked against the prompts' tokenizer: a disagreeing server is refused.

The fakes render chat ``messages`` as SGLang 0.5.23 and vLLM do (GOOD: the demo tokenizer's own
template; OTHER: the same vocabulary, another template), or refuse them (the stand-in's 400).
"""

import asyncio
import json
import logging

import httpx
import pytest

from eaglefeed.consumers.generate.inference import ServerPool
from eaglefeed.consumers.generate.tokens import PROBES, TokenizerAgreement, VocabSizes, load_local
from eaglefeed.consumers.generate.tokens._chat_probe import SAMPLE_CONVERSATION, render_sample
from eaglefeed.core.errors import ConfigError
from eaglefeed.devtools.demo import TOKENIZER_DIR

LOCAL = load_local(str(TOKENIZER_DIR), trust_remote_code=False)
GOOD, BAD, BARE, OTHER, PLAIN = "http://good:1", "http://bad:1", "http://bare:1", "http://other:1", "http://plain:1"
CHAT = render_sample(str(TOKENIZER_DIR), trust_remote_code=False)  # the producer's rendering of the sample
assert CHAT is not None


def handler(seen):
    """GOOD encodes as the demo tokenizer; BAD swaps two ids of the unicode probe; BARE has no route."""
    swapped = LOCAL.encode(PROBES[1])[:2]

    def answer(request):
        body = json.loads(request.content)
        seen.append((str(request.url), body))
        host = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        if host == BARE:
            return httpx.Response(404, json={"detail": "Not Found"})
        if "messages" in body:
            assert body["messages"] == list(SAMPLE_CONVERSATION) and body["add_generation_prompt"] is True
            if host == PLAIN:
                return httpx.Response(400, json={"error": {"message": "Chat template tokenization requires a "
                                                                      "template manager."}})
            ids = CHAT if host != OTHER else [*CHAT[:5], *CHAT[6:]]  # OTHER's template drops one separator
            return httpx.Response(200, json={"tokens": ids, "count": len(ids), "max_model_len": 8192})
        ids = LOCAL.encode(body["prompt"])
        if host == BAD:
            ids = [swapped[1] if i == swapped[0] else swapped[0] if i == swapped[1] else i for i in ids]
        return httpx.Response(200, json={"tokens": ids, "count": len(ids), "max_model_len": 8192})

    return answer


def run(urls):
    seen = []

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler(seen))) as http:
            pool = ServerPool(client=http, urls=urls, eject_after=3, probe_interval=0.01)
            try:
                await TokenizerAgreement(pool=pool, client=http).check(LOCAL)
                return pool
            finally:
                await pool.close()

    return asyncio.run(go()), seen


def test_the_probes_are_sglang_and_vllm_shaped_and_cover_the_special_tokens():
    _pool, seen = run([GOOD])
    assert {url for url, _b in seen} == {f"{GOOD}/tokenize"}
    *texts, chat = [body for _u, body in seen]
    assert all(set(body) == {"prompt", "add_special_tokens"} and body["add_special_tokens"] is False
               for body in texts)
    assert set(chat) == {"messages", "add_generation_prompt", "add_special_tokens"}
    assert chat["add_special_tokens"] is False
    prompts = [body["prompt"] for body in texts]
    assert prompts[:2] == list(PROBES) and {"<|im_end|>", "<think>", "</think>"} <= set(prompts)


def test_a_disagreeing_server_is_refused_in_one_line_naming_it_the_tokenizer_and_the_probe(caplog):
    caplog.set_level(logging.INFO)
    pool, _seen = run([GOOD, BAD])
    good, bad = pool.servers
    assert good.healthy and good.refused is None
    assert not bad.healthy and bad.refused is not None
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR
    text = lines[0].getMessage()
    assert BAD in text and str(TOKENIZER_DIR) in text and "Grüße" in text and GOOD not in text


def test_a_refused_server_is_not_probed_back_into_rotation():
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as http:
            pool = ServerPool(client=http, urls=[GOOD, BAD], eject_after=1, probe_interval=0.01)
            bad = pool.servers[1]
            pool.refuse(bad, reason="another tokenizer")
            bad.outstanding += 1
            pool.release(bad, failed=True)
            await asyncio.sleep(0.1)
            await pool.close()
            return bad

    bad = asyncio.run(go())
    assert not bad.healthy and bad.refused == "another tokenizer"


def test_when_no_server_agrees_the_worker_stops_in_one_line(caplog):
    caplog.set_level(logging.INFO)
    with pytest.raises(ConfigError, match=r"no server tokenizes as .*http://bad:1: probe .*Grüße") as raised:
        run([BAD])
    assert "point the worker (--sglang-url) at a server that serves the prompts' model" in str(raised.value)
    assert "skip" not in str(raised.value) and "--vocab-size" not in str(raised.value)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_server_without_tokenize_is_accepted_with_one_warning(caplog):
    caplog.set_level(logging.INFO)
    seen: list = []

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler(seen))) as http:
            pool = ServerPool(client=http, urls=[BARE], eject_after=3, probe_interval=0.01)
            agreement = TokenizerAgreement(pool=pool, client=http)
            await agreement.check(LOCAL)
            await agreement.check(LOCAL)  # a second tokenizer: no second warning
            return pool

    pool = asyncio.run(go())
    assert pool.servers[0].healthy and pool.servers[0].refused is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and BARE in warnings[0] and "no /tokenize" in warnings[0]


def test_a_server_that_cannot_answer_now_is_kept_with_a_warning(caplog):
    def refuse(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as http:
            pool = ServerPool(client=http, urls=[GOOD], eject_after=3, probe_interval=0.01)
            await TokenizerAgreement(pool=pool, client=http).check(LOCAL)
            return pool

    assert asyncio.run(go()).servers[0].refused is None
    assert any("connection refused" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_vocab_sizes_checks_each_tokenizer_once_and_a_fixed_size_skips_with_one_info_line(caplog):
    caplog.set_level(logging.INFO)
    seen: list = []

    async def go(fixed):
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler(seen))) as http:
            pool = ServerPool(client=http, urls=[GOOD], eject_after=3, probe_interval=0.01)
            sizes = VocabSizes(fixed=fixed, from_tokenizer=True, pool=pool, http=http)
            return await asyncio.gather(*(sizes.size_for(str(TOKENIZER_DIR)) for _ in range(3)))

    assert asyncio.run(go(None)) == [4096] * 3
    assert len(seen) == len(PROBES) + len(LOCAL.specials) + 1  # and the chat
    seen.clear()
    assert asyncio.run(go(100)) == [100] * 3 and seen == []
    skipped = [r for r in caplog.records if "not checked" in (m := r.getMessage()) and "--vocab-size" in m]
    assert len(skipped) == 1


def test_vocab_sizes_stops_when_no_server_agrees():
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler([]))) as http:
            pool = ServerPool(client=http, urls=[BAD], eject_after=3, probe_interval=0.01)
            sizes = VocabSizes(fixed=None, from_tokenizer=True, pool=pool, http=http)
            await sizes.size_for(str(TOKENIZER_DIR))

    with pytest.raises(ConfigError, match="no server tokenizes as"):
        asyncio.run(go())


def test_a_server_with_the_same_vocabulary_and_another_chat_template_is_refused(caplog):
    """Qwen2.5 and Qwen3 share a vocabulary: only the chat rendering tells them apart."""
    caplog.set_level(logging.INFO)
    pool, _seen = run([GOOD, OTHER])
    good, other = pool.servers
    assert good.refused is None and other.refused is not None
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert OTHER in line and "chat template" in line and "first differing at id 5" in line


def test_a_server_rendering_chat_otherwise_alone_stops_the_worker_in_one_line():
    with pytest.raises(ConfigError, match=r"no server tokenizes as .*other:1: its chat template is not the "
                                          r"prompts'.*point the worker .* or produce the prompts again "
                                          r"with the server's tokenizer") as caught:
        run([OTHER])
    assert "\n" not in str(caught.value)


def test_a_server_that_renders_no_chat_is_compared_on_text_alone(caplog):
    caplog.set_level(logging.INFO)
    pool, seen = run([PLAIN])
    assert pool.servers[0].refused is None
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("compared on 0 of 1" in r.getMessage() for r in caplog.records)
    assert sum("messages" in body for _u, body in seen) == 1  # asked once, refused, accepted


def test_the_sample_renders_as_the_demo_template_writes_a_conversation():
    text = LOCAL.decode(CHAT)  # type: ignore[misc]
    assert text.count("<|im_start|>") == 5 and text.endswith("<|im_start|>assistant\n")
