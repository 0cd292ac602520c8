"""Fixtures of the tool-call format tests: one tokenizer per family, written once per session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from tests.toolcall_tokenizers import FORMAT_NAMES, write_family_tokenizer


@pytest.fixture(scope="session")
def family_tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Format name → its loaded tokenizer (the family's markers as added tokens, its template)."""
    root: Path = tmp_path_factory.mktemp("families")
    return {fmt: AutoTokenizer.from_pretrained(str(write_family_tokenizer(fmt, root / fmt)))
            for fmt in FORMAT_NAMES}
