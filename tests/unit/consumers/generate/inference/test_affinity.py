"""Conversation affinity: a conversation's turns go to one server while it is healthy and not overloaded."""

import asyncio
import json
from collections import Counter

import httpx
import pytest

from eaglefeed.consumers.generate.inference import InferenceClient, Server, ServerPool, affinity_key
from eaglefeed.consumers.generate.inference.affinity import SLACK, choose, home_server, overloaded
from eaglefeed.core.config import KafkaConfig, WorkerConfig
from eaglefeed.core.errors import ConfigError

URLS = [f"http://gpu-{i}:30000" for i in range(4)]
KEYS = [f"{i:032x}" for i in range(2000)]


def servers(urls=URLS, loads=None):
    out = [Server(url=u) for u in urls]
    for server, load in zip(out, loads or [0] * len(out), strict=True):
        server.outstanding = load
    return out


def state_json(cid: str) -> str:
    # ConversationState.to_json's layout: conversation_id first, then the rest.
    return json.dumps({"conversation_id": cid, "lane": 0, "turn_index": 1, "mode": "tokens",
                       "source_messages": [{"role": "user", "content": "hi"}]}, separators=(",", ":"))


def test_the_key_is_the_conversation_id_read_from_the_state_head_or_parsed():
    cid = "0123456789abcdef0123456789abcdef"
    assert affinity_key({"conversation": state_json(cid)}) == cid
    reordered = json.dumps({"lane": 0, "conversation_id": "other-id"})
    assert affinity_key({"conversation": reordered}) == "other-id"
    assert affinity_key({"conversation": None}) is None
    assert affinity_key({}) is None
    assert affinity_key({"conversation": "not json"}) is None
    assert affinity_key({"conversation": '{"conversation_id":"short"}'}) == "short"


def test_every_turn_of_a_conversation_goes_to_one_server_and_conversations_spread():
    pool = servers()
    homes = Counter()
    for key in KEYS:
        chosen = {choose(pool, key=key, load_factor=1.25)[0].url for _ in range(3)}
        assert len(chosen) == 1
        homes[chosen.pop()] += 1
    assert set(homes) == set(URLS)
    assert min(homes.values()) > len(KEYS) / len(URLS) * 0.8  # balanced within 20 %


def test_the_mapping_is_the_same_in_another_pool_of_the_same_urls():
    # Each worker of a group has its own pool: they must agree without talking to each other.
    a, b = servers(), servers(list(reversed(URLS)))
    assert all(home_server(k, a).url == home_server(k, b).url for k in KEYS[:200])


def test_an_overloaded_home_falls_back_to_the_least_outstanding_server():
    pool = servers(loads=[10, 10, 10, 10])
    key = next(k for k in KEYS if home_server(k, pool).url == URLS[0])
    assert choose(pool, key=key, load_factor=1.25) == (pool[0], "home")
    pool[0].outstanding = 40  # mean (70 + 1) / 4 = 17.75; bound 1.25 x 17.75 + SLACK = 26.2
    pool[3].outstanding = 5
    assert overloaded(pool[0], pool, load_factor=1.25)
    assert choose(pool, key=key, load_factor=1.25) == (pool[3], "overloaded")


def test_an_idle_or_lightly_loaded_pool_never_counts_a_home_overloaded():
    pool = servers(loads=[0, 0, 0, 0])
    assert not overloaded(pool[0], pool, load_factor=1.25)
    pool[0].outstanding = SLACK - 1  # a few requests above an empty pool: within the slack
    assert not overloaded(pool[0], pool, load_factor=1.25)


def test_without_a_conversation_or_with_affinity_off_the_least_loaded_server_is_chosen():
    pool = servers(loads=[3, 1, 2, 5])
    assert choose(pool, key=None, load_factor=1.25) == (pool[1], "least")
    assert choose(pool, key=KEYS[0], load_factor=0) == (pool[1], "least")
    one = servers(URLS[:1])
    assert choose(one, key=KEYS[0], load_factor=1.25) == (one[0], "least")


def test_a_server_leaving_moves_only_its_own_conversations_and_one_joining_takes_only_its_share():
    full = servers()
    before = {k: home_server(k, full).url for k in KEYS}
    without = [s for s in full if s.url != URLS[2]]
    after = {k: home_server(k, without).url for k in KEYS}
    moved = [k for k in KEYS if before[k] != after[k]]
    assert moved and all(before[k] == URLS[2] for k in moved)
    joined = servers([*URLS, "http://gpu-4:30000"])
    later = {k: home_server(k, joined).url for k in KEYS}
    changed = [k for k in KEYS if later[k] != before[k]]
    assert all(later[k] == "http://gpu-4:30000" for k in changed)
    assert 0.1 < len(changed) / len(KEYS) < 0.3  # about a fifth, not a reshuffle


def test_the_pool_routes_by_conversation_skips_an_ejected_home_and_counts_routes():
    routes: list[str] = []

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as http:
            pool = ServerPool(client=http, urls=URLS, eject_after=1, probe_interval=60.0, affinity_load=1.25,
                              on_route=routes.append)
            key = next(k for k in KEYS if home_server(k, pool.servers).url == URLS[1])
            first = await pool.acquire(key)
            pool.release(first, failed=False)
            again = await pool.acquire(key)
            assert first.url == again.url == URLS[1]
            pool.release(again, failed=True)  # eject_after=1: out of rotation
            assert not pool.servers[1].healthy
            moved = await pool.acquire(key)
            assert moved.url != URLS[1]
            assert moved.url == home_server(key, [s for s in pool.servers if s.healthy]).url
            pool.release(moved, failed=False)
            other = await pool.acquire(None)
            pool.release(other, failed=False)
            await pool.close()

    asyncio.run(go())
    assert routes == ["home", "home", "home", "least"]


@pytest.mark.parametrize("affinity_load", [0.0, 1.25])
def test_a_burst_of_one_conversations_requests_stays_bounded_on_its_server(affinity_load):
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as http:
            pool = ServerPool(client=http, urls=URLS, eject_after=3, probe_interval=60.0,
                              affinity_load=affinity_load)
            held = [await pool.acquire(KEYS[7]) for _ in range(100)]
            loads = [s.outstanding for s in pool.servers]
            for server in held:
                pool.release(server, failed=False)
            await pool.close()
            return loads

    loads = asyncio.run(go())
    assert sum(loads) == 100
    # affinity on: the home takes what the bound allows, the rest spread; off: even spread
    assert max(loads) <= 1.25 * 100 / 4 + SLACK + 1
    assert (max(loads) > 26) == (affinity_load > 0)


def test_a_retry_leaves_the_conversations_server_that_just_failed():
    sent: list[str] = []
    routes: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/model_info":
            return httpx.Response(200, json={"model_path": "demo/model"})
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"version": "0.5.0"})
        sent.append(f"http://{request.url.host}:{request.url.port}")
        if len(sent) == 1:
            return httpx.Response(500, json={"error": {"message": "boom"}})
        ids = json.loads(request.content)["input_ids"]
        return httpx.Response(200, json={"text": "x", "output_ids": [7, 2], "meta_info": {
            "id": "r", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": len(ids),
            "completion_tokens": 2, "cached_tokens": 0, "e2e_latency": 0.01}})

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            pool = ServerPool(client=http, urls=URLS, eject_after=100, probe_interval=2.0, affinity_load=1.25,
                              on_route=routes.append)
            key = next(k for k in KEYS if home_server(k, pool.servers).url == URLS[2])
            client = InferenceClient(pool=pool, http=http, concurrency=8, max_attempts=3, backoff=0.001,
                                     backoff_max=0.01)
            params = {"max_new_tokens": 8, "temperature": 0.0}
            await client.generate([1, 2, 3], params, rid="p-0", affinity=key)
            await pool.close()

    asyncio.run(go())
    assert sent[0] == URLS[2] and sent[1] != URLS[2]
    assert routes == ["home", "least"]


def test_the_affinity_load_is_off_or_at_least_one():
    kafka = KafkaConfig(bootstrap_servers="127.0.0.1:9092")
    assert WorkerConfig(kafka=kafka, sglang_urls=("http://s",)).affinity_load == 1.25
    assert WorkerConfig(kafka=kafka, sglang_urls=("http://s",), affinity_load=0).affinity_load == 0
    with pytest.raises(ConfigError, match="--affinity-load"):
        WorkerConfig(kafka=kafka, sglang_urls=("http://s",), affinity_load=0.5)
