"""The broker's jar cache location: one definition for the CLI, the tests, bench and reliability."""

from pathlib import Path

from eaglefeed.localbroker import cache_dir


def test_the_cache_dir_comes_from_the_environment_else_the_home_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLEFEED_CACHE_DIR", str(tmp_path / "jars"))
    assert cache_dir() == tmp_path / "jars"
    monkeypatch.setenv("EAGLEFEED_CACHE_DIR", "")  # empty counts as unset, as for every EAGLEFEED_ variable
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == Path(tmp_path) / ".cache" / "eaglefeed"
