"""The emulated per-server prefix cache behind meta_info.cached_tokens."""

import asyncio

from eaglefeed.devtools.standin.config import StandinConfig
from eaglefeed.devtools.standin.engine import Engine
from eaglefeed.devtools.standin.parsing import parse_generate
from eaglefeed.devtools.standin.prefix_cache import PrefixCache


def test_second_prompt_hits_whole_blocks_up_to_len_minus_one():
    cache = PrefixCache(block_size=4, capacity_tokens=1000)
    prompt = list(range(10))
    assert cache.match_and_insert(prompt) == 0
    assert cache.match_and_insert(prompt) == 8
    assert cache.match_and_insert(list(range(8))) == 7  # the last prompt token is always computed
    assert cache.match_and_insert(list(range(6)) + [99, 98, 97]) == 4


def test_diverging_prefix_misses_later_blocks():
    cache = PrefixCache(block_size=2, capacity_tokens=1000)
    cache.match_and_insert([1, 2, 3, 4, 5, 6])
    assert cache.match_and_insert([9, 2, 3, 4, 5, 6]) == 0


def test_lru_eviction_and_clear():
    cache = PrefixCache(block_size=2, capacity_tokens=4)
    cache.match_and_insert([1, 2, 3, 4])
    cache.match_and_insert([5, 6, 7, 8])
    assert len(cache) == 2
    assert cache.match_and_insert([1, 2, 3, 4, 0]) == 0
    cache.clear()
    assert len(cache) == 0


def test_disabled_cache_never_hits():
    cache = PrefixCache(block_size=0, capacity_tokens=100)
    cache.match_and_insert([1, 2, 3, 4])
    assert cache.match_and_insert([1, 2, 3, 4]) == 0


def test_a_shared_prefix_outlives_the_branches_that_use_it():
    # Leaf-first LRU: the system prompt [1, 2] is refreshed by every use of a branch below it.
    cache = PrefixCache(block_size=2, capacity_tokens=6)
    cache.insert([1, 2, 3, 4])
    cache.insert([1, 2, 5, 6])
    cache.insert([1, 2, 7, 8])  # 4 blocks for 3: the oldest leaf [3, 4] goes, not the root
    assert cache.match_and_insert([1, 2, 9]) == 2
    assert cache.match_and_insert([1, 2, 3, 4, 0]) == 2
    assert cache.match_and_insert([1, 2, 7, 8, 0]) == 4


def test_capacity_bounds_what_is_held_and_reports_whole_blocks():
    cache = PrefixCache(block_size=16, capacity_tokens=100)
    assert cache.capacity_tokens == 96
    cache.insert(list(range(1000)))
    assert len(cache) == 6


def engine_and_request(vocab, **config):
    cfg = StandinConfig(latency_model="none", think_fraction=0, tool_call_fraction=0, **config)
    engine = Engine(config=cfg, vocab=vocab)

    def request(ids, tokens=40):
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": tokens, "temperature": 0.0}}
        return parse_generate(body, vocab=vocab, context_length=cfg.context_length)
    return engine, request


def run(engine, req):
    async def go():
        job = engine.admit(req)
        await engine.wait(job)
        engine.release(job)
        return job.seqs[0]
    return asyncio.run(go())


def test_a_finished_turns_prompt_and_output_are_cached_on_its_own_server_only(vocab):
    first, request = engine_and_request(vocab, output_len_sigma=0.0, output_len_mean=40)
    other, _ = engine_and_request(vocab, output_len_sigma=0.0, output_len_mean=40)
    prompt = list(range(100, 200))
    turn0 = run(first, request(prompt))
    assert turn0.cached_tokens == 0 and len(turn0.output_ids) > 16
    # The next turn's prompt: this turn's prompt and output, then a new user message.
    following = [*prompt, *turn0.output_ids, *range(300, 320)]
    hit = run(first, request(following)).cached_tokens
    computed = len(prompt) + len(turn0.output_ids) - 1  # the last output token's KV is not cached
    assert computed - 16 < hit <= computed
    assert run(other, request(following)).cached_tokens == 0  # another server never saw turn 0


def test_a_small_cache_forgets_old_conversations(vocab):
    engine, request = engine_and_request(vocab, prefix_cache_tokens=256)  # 16 blocks
    assert run(engine, request(list(range(100, 300)))).cached_tokens == 0  # 14 blocks cached at the end
    run(engine, request(list(range(400, 600))))  # 14 more: the first one's deepest blocks go first
    assert run(engine, request(list(range(100, 300)))).cached_tokens <= 32  # of 192: two blocks left
