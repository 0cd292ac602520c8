"""The stand-in serves a tokenizer without tokenizer.json (Kimi's tiktoken kind) with --trust-remote-code."""

from __future__ import annotations

import argparse

import pytest

from eaglefeed.core.tokenizer.remote_code import RemoteCodeError, load_tokenizer
from eaglefeed.devtools.standin import add_arguments
from eaglefeed.devtools.standin.cli import run
from eaglefeed.devtools.standin.vocab import load_vocab


def test_the_token_facts_come_from_the_tokenizers_own_class(remote_tokenizer):
    vocab = load_vocab(remote_tokenizer, trust_remote_code=True)
    tok = load_tokenizer(str(remote_tokenizer), trust_remote_code=True)
    assert vocab.vocab_size == len(tok) == 311
    assert vocab.eos_id == tok.eos_token_id
    assert (vocab.think_start, vocab.think_end) == tuple(tok.convert_tokens_to_ids(["<think>", "</think>"]))
    assert vocab.special_ids == frozenset(tok.added_tokens_decoder) and len(vocab.normal_ids) == 295
    assert vocab.encode("hello world") == tok.encode("hello world")
    assert vocab.decode(vocab.encode("héllo 1234")) == "héllo 1234"
    assert vocab.tool_call_start is None and vocab.newline_ids == (10,)


def test_without_the_flag_the_stand_in_stops_with_one_line(remote_tokenizer, capsys):
    with pytest.raises(RemoteCodeError):
        load_vocab(remote_tokenizer)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args(["--tokenizer", str(remote_tokenizer)])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --trust-remote-code" in err[0], err
