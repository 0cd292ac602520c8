"""One dataset, one identity: the tokenizer, chat template and model its rows were made with.

A row records the tokenizer's files hash, the chat template's hash and the server's model
path. Rows of two tokenizers (or templates, or models) in one dataset train a draft on two
token spaces at once, so the readers (``stats``, ``export``, ``vocab-map``) refuse such a
dataset unless told ``allow_mixed``. An empty ``model_path`` (a server that does not say)
matches any model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc

from eaglefeed.core.errors import DatasetError
from eaglefeed.dataset.snapshot import iter_batches

COLUMNS = ("tokenizer_id", "tokenizer_hash", "chat_template_hash", "model_path")
# What a user reads in the refusal for each column that differs, most telling first.
_NOUNS = (("tokenizer_hash", "tokenizers"), ("chat_template_hash", "chat templates"),
          ("model_path", "models"))


@dataclass(frozen=True, order=True)
class Identity:
    """What a row was made with (its ``tokenizer_id`` is the name it was given, for the reader)."""

    tokenizer_id: str
    tokenizer_hash: str
    chat_template_hash: str
    model_path: str

    def describe(self) -> str:
        """``demo (tokenizer ab12cd34ef56…, template 0123456789ab…, model m)``."""
        model = f", model {self.model_path}" if self.model_path else ""
        return (f"{self.tokenizer_id} (tokenizer {self.tokenizer_hash[:12]}…, "
                f"template {self.chat_template_hash[:12]}…{model})")


def identities(files: Sequence[Path]) -> Counter[Identity]:
    """The rows of ``files`` per identity, from four dictionary-encoded columns (cheap to read).

    Raises:
        DatasetError: a file cannot be read.
    """
    counts: Counter[Identity] = Counter()
    for batch in iter_batches(files, columns=COLUMNS, batch_rows=65536):
        values = [batch.column(name).cast("string").fill_null("") for name in COLUMNS]
        if all(len(pc.unique(v)) == 1 for v in values):  # the usual batch: one identity
            counts[Identity(*(str(v[0].as_py()) for v in values))] += batch.num_rows
            continue
        counts.update(Identity(*row) for row in zip(*(v.to_pylist() for v in values), strict=True))
    return counts


def mixed(counts: Counter[Identity]) -> list[str]:
    """What differs between the identities of ``counts`` (``["tokenizers"]``); empty when one."""
    differ = []
    for column, noun in _NOUNS:
        seen = {getattr(i, column) for i in counts}
        if column == "model_path":
            seen.discard("")
        if len(seen) > 1:
            differ.append(noun)
    return differ


def refuse_mixed(files: Sequence[Path], *, allow_mixed: bool) -> Counter[Identity]:
    """The identities of ``files``; refused in one line when more than one, unless ``allow_mixed``.

    Raises:
        DatasetError: the rows have more than one identity and ``allow_mixed`` is false.
    """
    counts = identities(files)
    differ = mixed(counts)
    if differ and not allow_mixed:
        raise DatasetError(describe_mix(counts, differ) + "; pass --allow-mixed to read it anyway")
    return counts


def describe_mix(counts: Counter[Identity], differ: Sequence[str]) -> str:
    """``the dataset mixes 2 tokenizers: demo (tokenizer ab12…, …) 360 rows, other (…) 20 rows``."""
    column = next(c for c, n in _NOUNS if n == differ[0])
    number = len({getattr(i, column) for i in counts} - {""})
    first = differ[0]
    also = f" (and {' and '.join(differ[1:])})" if len(differ) > 1 else ""
    parts = ", ".join(f"{ident.describe()} {rows} rows" for ident, rows in counts.most_common())
    return f"the dataset mixes {number} {first}{also}: {parts}"
