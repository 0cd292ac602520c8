"""The emulated prefix cache behind meta_info.cached_tokens."""

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
