"""The progress ledger: how far each input file is published and acknowledged, to resume after a restart."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from eaglefeed.core.config import ProducerConfig, PromptSettings, producer_state_dir
from eaglefeed.core.diskspace import disk_full, is_disk_full
from eaglefeed.core.errors import ConfigError
from eaglefeed.producers.fixes import DeadLettered
from eaglefeed.producers.position import Position
from eaglefeed.producers.sources import STDIN, InputFile, Mark

log = logging.getLogger(__name__)

LEDGER_VERSION = 2  # 1 kept byte offsets and inodes without a fingerprint of the bytes consumed


class Ledger:
    """Per input file (by absolute path), the position up to which every row is acknowledged.

    Each file keeps a :class:`Position`: the bytes consumed (for a JSON array or Parquet file, read
    whole, its size), the lines or rows before them, and the sha256 of those bytes. A reader
    resumes after a position only while the file still starts with exactly those bytes, so a
    file edited, rewritten or replaced under the same name is read again from the start (prompt
    ids dedupe what was published). Positions move in two steps: :meth:`advance` once the rows
    before a mark are sent, :meth:`commit` once the producer has flushed them. A lock file keeps
    a second producer off the same ledger. It also keeps :attr:`dead_lettered`, the input lines
    dead-lettered and not fixed since (:mod:`eaglefeed.producers.fixes`), saved by each commit.

    Args:
        path: the ledger file; its folder is created.
        restart: forget the saved positions (the next commit overwrites them); the dead-lettered
            lines are kept, so a line fixed before a ``--restart`` still marks its letters fixed.

    Raises:
        ConfigError: when another producer holds the ledger, the file is not a ledger, or the
            folder cannot be written.
    """

    def __init__(self, path: Path, *, restart: bool = False) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._lock: IO[str] = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115 - held until close()
        except OSError as exc:
            raise ConfigError(f"cannot keep the progress ledger in {path.parent}: {exc.strerror or exc} "
                              "(pass a writable --state-dir)") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise ConfigError(f"another producer is using the progress ledger {path}") from None
        self._saved, self.dead_lettered = self._load(strict=not restart)
        if restart:
            self._saved = {}
        self._advanced: dict[str, Position] = {}

    @classmethod
    def for_run(cls, state_dir: Path, topic_prefix: str, fingerprint: str, *,
                restart: bool = False) -> Ledger:
        """The ledger of the runs that publish the same inputs with the same settings to ``topic_prefix``.

        Args:
            state_dir: where ledgers are kept.
            topic_prefix: the topics' prefix (part of the file name, for the operator).
            fingerprint: :func:`run_fingerprint` of the run; another one gets another ledger.
            restart: start over instead of resuming.
        """
        return cls(state_dir / f"{topic_prefix}.{fingerprint}.ledger.json", restart=restart)

    def positions(self) -> Mapping[str, Position]:
        """Every saved position, by input key."""
        return self._saved

    def reset(self) -> None:
        """Forget every saved position (the next commit overwrites the file); dead-lettered lines stay.

        (A marker for a letter on another broker matches nothing there; a forgotten line would
        leave its letter open for good.)
        """
        self._saved = {}

    def get(self, key: str) -> Position | None:
        """The acknowledged position of input ``key``, if any."""
        return self._saved.get(key)

    def advance(self, mark: Mark) -> None:
        """Note that every row before ``mark`` has been sent."""
        self._advanced[mark.key] = mark.state

    def commit(self) -> None:
        """Save the advanced positions and the dead-lettered lines (once the producer flushed cleanly)."""
        if not self._advanced and not self.dead_lettered.dirty:
            return
        self._saved.update(self._advanced)
        self._advanced.clear()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                files = {key: pos.to_json() for key, pos in self._saved.items()}
                json.dump({"version": LEDGER_VERSION, "files": files,
                           "dead_lettered": self.dead_lettered.to_json()}, fh, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            self.dead_lettered.dirty = False
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if is_disk_full(exc):  # the old ledger is intact: a rerun re-reads from it, ids dedupe
                raise disk_full(self.path.parent, "the progress ledger keeps its last position: run produce "
                                                  "again once there is space (the rows read again keep "
                                                  "their prompt ids, which dedupe them downstream)") from exc
            raise

    def close(self) -> None:
        """Release the lock (uncommitted positions are dropped: their rows will be read again)."""
        self._lock.close()

    def _load(self, *, strict: bool) -> tuple[dict[str, Position], DeadLettered]:
        """The saved positions and dead-lettered lines; not ``strict`` (``--restart``): none if unreadable."""
        if not self.path.exists():
            return {}, DeadLettered()
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            files = data["files"]
            if data.get("version") == 1 and isinstance(files, dict):
                if strict:
                    log.warning("%s was written by an older eaglefeed and cannot tell whether an input "
                                "changed: reading every input again (prompt ids dedupe)", self.path)
                return {}, DeadLettered()
            if data.get("version") != LEDGER_VERSION or not isinstance(files, dict):
                raise ValueError("unknown layout")
            # (a ledger from before dead-lettered lines were kept has none: its letters stay open)
            return ({key: Position.from_json(pos) for key, pos in files.items()},
                    DeadLettered.from_json(data.get("dead_lettered", {})))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if not strict:
                return {}, DeadLettered()
            self._lock.close()
            raise ConfigError(f"{self.path} is not a progress ledger ({exc}); "
                              "move it away to start over") from exc


def run_fingerprint(*, inputs: Sequence[str], bootstrap_servers: str, settings: Mapping[str, Any],
                    overrides: Mapping[str, str]) -> str:
    """A short digest of what decides a run's prompts: the same digest means it is safe to resume.

    Args:
        inputs: the input names as given (made absolute here).
        bootstrap_servers: the Kafka cluster (another cluster has none of the records).
        settings: every setting that changes a PromptRecord (tokenizer, sampling, template
            kwargs, their cycles, samples, turns, prompt length cap).
        overrides: per input file, the canonical text of its sidecar overrides.
    """
    what = {"inputs": sorted(str(Path(name).absolute()) if name != "-" else name for name in inputs),
            "kafka": bootstrap_servers, "settings": settings, "overrides": dict(sorted(overrides.items()))}
    text = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def open_ledger(cfg: ProducerConfig, *, files: Sequence[InputFile]) -> Ledger | None:
    """The run's progress ledger (None without a state dir, or for stdin alone), and say what resumes.

    The ledger is keyed by the inputs and every setting that changes a prompt, so a run with
    another tokenizer, template or sampling setting starts afresh instead of resuming wrongly.

    Args:
        cfg: the run's settings.
        files: the input files found at start-up (their sidecar overrides are part of the key).

    Raises:
        ConfigError: when the state dir cannot be written or another producer holds the ledger.
    """
    state_dir = cfg.state_dir or (producer_state_dir() if cfg.follow else None)
    if state_dir is None or all(name == STDIN for name in cfg.inputs):
        return None
    overrides = {} if cfg.follow else {f.key: f.overrides.key for f in files}
    fingerprint = run_fingerprint(inputs=cfg.inputs, bootstrap_servers=cfg.kafka.bootstrap_servers,
                                  settings=_keyed_settings(cfg.prompts), overrides=overrides)
    ledger = Ledger.for_run(state_dir, cfg.kafka.topic_prefix, fingerprint, restart=cfg.restart)
    saved = ledger.positions()
    if cfg.restart:
        log.info("--restart: publishing every input again (progress ledger %s)", ledger.path)
    elif saved and not cfg.follow:
        sizes = {f.key: f.path.stat().st_size for f in files}
        resumed = [f"{Path(key).name} after line {pos.line}" if pos.offset < sizes.get(key, 0)
                   else f"{Path(key).name} (all published)" for key, pos in saved.items()]
        # (whether each input still starts with what was read is checked as it is read: an edited
        # one is read again from its start, with a warning of its own)
        log.info("resuming from %s: %s; --restart starts over",
                 ledger.path, ", ".join(resumed[:5])
                 + (f" and {len(resumed) - 5} more" if len(resumed) > 5 else ""))
    return ledger


def _keyed_settings(prompts: PromptSettings) -> dict[str, Any]:
    """The prompt settings a ledger is keyed by (this layout names every ledger on disk: keep it)."""
    tokenizer = Path(prompts.tokenizer)
    settings = {"tokenizer": str(tokenizer.absolute()) if tokenizer.exists() else prompts.tokenizer,
                "sampling": prompts.sampling.as_params(),
                "template_kwargs": dict(prompts.chat_template_kwargs), "samples": prompts.samples,
                "max_prompt_tokens": prompts.max_prompt_tokens, "all_turns": prompts.turns == "all"}
    if prompts.conversations:  # a conversation run's prompts differ from an original-history run's
        settings.update(history=prompts.history, max_turns=prompts.max_turns)
    if prompts.keep_duplicates:  # other prompt ids: a merging run's progress says nothing of them
        settings.update(keep_duplicates=True)
    if prompts.mix.active:  # another cycle draws other settings, so other prompts, for the same rows
        settings.update(mix=prompts.mix.as_key())
    if prompts.model is not None:  # prompts for another model (the tokenizer's own is keyed by it)
        settings.update(model=prompts.model)
    return settings
