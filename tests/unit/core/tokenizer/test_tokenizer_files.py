"""The one tokenizer-file locator: a local directory, else the Hugging Face cache, nothing fetched."""

import pytest
from huggingface_hub import constants

from eaglefeed.core.tokenizer.files import tokenizer_file
from eaglefeed.devtools.demo import TOKENIZER_DIR


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache; ``add(repo, name)`` puts a file in it as a download would."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))

    def add(repo, name):
        root = tmp_path / f"models--{repo.replace('/', '--')}"
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / "main").write_text("abc123")
        path = root / "snapshots" / "abc123" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        return path

    return add


def test_a_local_directory_is_looked_in_alone(tmp_path, hub_cache):
    assert tokenizer_file(str(TOKENIZER_DIR)) == TOKENIZER_DIR / "tokenizer.json"
    config = "tokenizer_config.json"
    assert tokenizer_file(str(TOKENIZER_DIR), config) == TOKENIZER_DIR / config
    assert tokenizer_file(str(TOKENIZER_DIR), "vocab.txt") is None
    (tmp_path / "empty").mkdir()
    assert tokenizer_file(str(tmp_path / "empty")) is None


def test_a_hub_id_is_found_in_the_cache_only(hub_cache):
    cached = hub_cache("org/model", "tokenizer.json")
    assert tokenizer_file("org/model") == cached
    assert tokenizer_file("org/model", "merges.txt") is None
    assert tokenizer_file("org/not-downloaded") is None  # not fetched: there is no network call to make


@pytest.mark.parametrize("bad", ["", "a\0b", "x" * 5000, "/no/such/dir", "../up", "org/two/slashes"])
def test_ids_that_are_neither_a_directory_nor_a_cached_repo_give_none(bad, hub_cache):
    assert tokenizer_file(bad) is None
