"""The target model's chat template, applied once: messages → exact prompt token ids.

The exact path is ``tokenizer.apply_chat_template(..., add_generation_prompt=True, tokenize=True)``
for one conversation. ``render_many`` renders batches with the same public call
(``tokenize=False``, conversations that share tools and kwargs in one call) and tokenizes all
texts in one ``tokenizer(texts, add_special_tokens=False)`` call, which is what
``apply_chat_template`` does internally. A probe at start-up checks on varied conversations that
this gives the exact path's ids; if it ever does not, every prompt takes the exact path.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from eaglefeed.chat.probes import PROBES
from eaglefeed.chat.prompts import is_utf8
from eaglefeed.core.errors import ConfigError, InputError
from eaglefeed.core.tokenizer import load_tokenizer, remote_code_files, runs_remote_code, tokenizer_file

log = logging.getLogger(__name__)

# Files that define how text becomes ids; whichever exist are hashed (and, for a tokenizer without
# tokenizer.json or with code of its own, its .py files and the vocabulary files its class names).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model")


@dataclass(frozen=True)
class RenderJob:
    """One conversation to render; jobs with equal ``group`` share tools and kwargs."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    template_kwargs: Mapping[str, Any]
    group: Hashable


def tokenizer_problem(tokenizer: str, exc: BaseException) -> str:
    """One line on why ``--tokenizer`` could not be loaded."""
    cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    if Path(tokenizer).is_dir():
        return f"cannot load the tokenizer in {tokenizer}: {cause}"
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", tokenizer) or tokenizer.startswith("."):
        return f"no tokenizer at {tokenizer} (not a directory, and not a model id)"
    return f"cannot load tokenizer {tokenizer!r} (no such directory here; as a model id: {cause})"


class PromptRenderer:
    """Render conversations with a tokenizer's own chat template and tokenize them once.

    Args:
        tokenizer: a local path or hub id accepted by ``AutoTokenizer.from_pretrained``.
        fast: use batched rendering and tokenization (None: only when the start-up probe shows
            that it gives the exact path's ids).
        trust_remote_code: run a tokenizer's own Python code (``--trust-remote-code``); without
            it such a tokenizer raises :class:`~eaglefeed.core.tokenizer.remote_code.RemoteCodeError`.
    """

    def __init__(self, tokenizer: str, *, fast: bool | None = None, trust_remote_code: bool = False) -> None:
        self.tokenizer_id = tokenizer
        try:
            self.tokenizer: PreTrainedTokenizerBase = load_tokenizer(tokenizer,
                                                                      trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as exc:  # transformers' 80-line traceback says less than this
            raise ConfigError(tokenizer_problem(tokenizer, exc)) from None
        if not self.tokenizer.chat_template:
            raise ConfigError(f"tokenizer {tokenizer!r} has no chat template")
        self._template_hashes: dict[bool, str] = {}
        self.chat_template_hash = self.template_hash(None)
        self.tokenizer_hash = tokenizer_files_hash(tokenizer, _backend_blob(self.tokenizer),
                                                   extra=defining_files(tokenizer, self.tokenizer))
        self.vocab_size = len(self.tokenizer)
        # Keys that apply_chat_template consumes itself must not pass as template kwargs.
        params = inspect.signature(self.tokenizer.apply_chat_template).parameters
        self.reserved_kwargs = frozenset(p for p in params if p != "kwargs") | {"messages"}
        self._backend = _fast_backend(self.tokenizer)
        self.fast = self._probe() if fast is None else fast

    def template_hash(self, tools: Sequence[Mapping[str, Any]] | None) -> str:
        """sha256 of the template text used for a conversation with (or without) tools."""
        with_tools = bool(tools)
        if with_tools not in self._template_hashes:
            text = self.tokenizer.get_chat_template(None, [{}] if with_tools else None)
            self._template_hashes[with_tools] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return self._template_hashes[with_tools]

    def render(self, messages: Sequence[Mapping[str, Any]], *,
               tools: Sequence[Mapping[str, Any]] | None,
               template_kwargs: Mapping[str, Any]) -> list[int]:
        """Return the prompt ids for ``messages`` with the generation prompt appended (exact path).

        Raises:
            InputError: ``template_error`` when the template rejects the conversation.
        """
        try:
            encoded = self._apply(list(messages), tools, template_kwargs, tokenize=True)
        except Exception as exc:  # noqa: BLE001 - any template failure is a bad row, not a crash
            raise _render_error(exc) from exc
        return list(encoded["input_ids"])

    def render_many(self, jobs: Sequence[RenderJob]) -> list[list[int] | InputError]:
        """Prompt ids (or the error) for every job, in order; identical to :meth:`render` per job."""
        if not self.fast:
            return [self._render_one(job) for job in jobs]
        out: list[list[int] | InputError | None] = [None] * len(jobs)
        texts: dict[int, str] = {}
        groups: dict[Hashable, list[int]] = {}
        for i, job in enumerate(jobs):
            groups.setdefault(job.group, []).append(i)
        for idxs in groups.values():
            self._render_texts(jobs, idxs, texts, out)
        order = sorted(texts)
        if order:
            ids: Sequence[list[int] | InputError]
            try:
                ids = self._tokenize([texts[i] for i in order])
            except Exception:  # noqa: BLE001 - find the bad text one by one
                ids = [self._tokenize_one(texts[i]) for i in order]
            for i, row in zip(order, ids, strict=True):
                out[i] = row
        return out  # type: ignore[return-value]

    def _render_texts(self, jobs: Sequence[RenderJob], idxs: list[int], texts: dict[int, str],
                      out: list[list[int] | InputError | None]) -> None:
        first = jobs[idxs[0]]
        try:
            rendered = self._apply([jobs[i].messages for i in idxs], first.tools, first.template_kwargs,
                                   tokenize=False)
            texts.update(zip(idxs, rendered, strict=True))
            return
        except Exception:  # noqa: BLE001 - one bad conversation fails the call; retry one by one
            pass
        for i in idxs:
            job = jobs[i]
            try:
                texts[i] = self._apply(job.messages, job.tools, job.template_kwargs, tokenize=False)
            except Exception as exc:  # noqa: BLE001
                out[i] = _render_error(exc)

    def _render_one(self, job: RenderJob) -> list[int] | InputError:
        try:
            return self.render(job.messages, tools=job.tools, template_kwargs=job.template_kwargs)
        except InputError as exc:
            return exc

    def _apply(self, conversation: list[Any], tools: Sequence[Mapping[str, Any]] | None,
               template_kwargs: Mapping[str, Any], *, tokenize: bool) -> Any:
        return self.tokenizer.apply_chat_template(
            conversation, tools=[dict(tool) for tool in tools] if tools else None, add_generation_prompt=True,
            tokenize=tokenize, return_dict=True, **template_kwargs)

    def _tokenize(self, texts: list[str]) -> list[list[int]]:
        # apply_chat_template tokenizes with tokenizer(text, add_special_tokens=False), which for a
        # fast tokenizer is the backend's encode_batch with no truncation or padding; the backend's
        # encode_batch_fast gives the same ids without computing offsets. The probe checks both.
        backend = self._backend
        if backend is not None:
            backend.encode_special_tokens = self.tokenizer.split_special_tokens
            return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
        encoded = self.tokenizer(texts, add_special_tokens=False, return_attention_mask=False,
                                 return_token_type_ids=False)
        return [list(ids) for ids in encoded["input_ids"]]

    def _tokenize_one(self, text: str) -> list[int] | InputError:
        try:
            return self._tokenize([text])[0]
        except Exception as exc:  # noqa: BLE001
            if not is_utf8(text):
                return InputError("invalid_utf8", "the prompt holds a lone surrogate")
            return InputError("tokenize_error", f"the tokenizer failed: {exc}")

    def _probe(self) -> bool:
        """Whether batched rendering + tokenizing gives the exact path's ids on varied conversations."""
        alone = [RenderJob(messages=p.messages, tools=p.tools, template_kwargs=p.kwargs, group=n)
                 for n, p in enumerate(PROBES)]
        together = [RenderJob(messages=j.messages, tools=None, template_kwargs={}, group=0)
                    for j in alone if not j.tools and not j.template_kwargs]
        exact = [self._render_one(job) for job in alone + together]
        self.fast = True
        fast = self.render_many(alone) + self.render_many(together)
        usable = [(e, f) for e, f in zip(exact, fast, strict=True) if not isinstance(e, InputError)]
        if usable and all(e == f for e, f in usable):
            return True
        log.warning("batched chat-template rendering does not match apply_chat_template for %s; "
                    "rendering one prompt at a time", self.tokenizer_id)
        return False


def tokenizer_files_hash(name_or_path: str, fallback: bytes, *, extra: Sequence[str] = ()) -> str:
    """sha256 over the tokenizer's files (names and contents); ``fallback`` when none is found.

    Args:
        name_or_path: the tokenizer directory or hub id (only files on this host are read).
        fallback: hashed when no file is found (the loaded tokenizer's own serialization).
        extra: more file names, after ``TOKENIZER_FILES`` (see :func:`defining_files`).
    """
    digest = hashlib.sha256()
    found = False
    for name in (*TOKENIZER_FILES, *extra):
        path = tokenizer_file(name_or_path, name)
        if path is not None:
            digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
            found = True
    if not found:
        digest.update(fallback)
    return digest.hexdigest()


def defining_files(name_or_path: str, tokenizer: PreTrainedTokenizerBase) -> tuple[str, ...]:
    """The files beyond ``TOKENIZER_FILES`` that define ``tokenizer`` (none for a tokenizer.json one).

    A tokenizer that runs its own code, or has no tokenizer.json, is defined also by its ``.py``
    files (the ``auto_map`` module and what it imports beside it) and, without tokenizer.json, by
    the vocabulary files its class names (``tiktoken.model`` for Kimi's).

    Args:
        name_or_path: the tokenizer directory or hub id.
        tokenizer: the tokenizer loaded from it.
    """
    has_json = tokenizer_file(name_or_path, "tokenizer.json") is not None
    names: set[str] = set()
    if runs_remote_code(tokenizer) or not has_json:
        names.update(remote_code_files(name_or_path))
    if not has_json:
        named = getattr(tokenizer, "vocab_files_names", None) or {}
        names.update(n for n in named.values() if isinstance(n, str))
    return tuple(sorted(names - set(TOKENIZER_FILES)))


def _fast_backend(tokenizer: PreTrainedTokenizerBase) -> Any:
    """The ``tokenizers.Tokenizer`` behind a fast tokenizer, without truncation or padding.

    transformers sets the backend up the same way for a call without truncation or padding.
    Returns None for slow tokenizers or a ``tokenizers`` without ``encode_batch_fast``.
    """
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast"):
        return None
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    return backend


def _backend_blob(tokenizer: PreTrainedTokenizerBase) -> bytes:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return str(backend.to_str()).encode("utf-8")
    return repr(sorted(tokenizer.get_vocab().items())).encode("utf-8")


def _render_error(exc: Exception) -> InputError:
    return InputError("template_error", f"the chat template failed: {exc}")
