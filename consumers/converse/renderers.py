"""The chat-template renderers of the converse stage: one per tokenizer the prompts name, loaded once."""

from __future__ import annotations

import logging

from eaglefeed.chat.render import PromptRenderer
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.tokenizer import RemoteCodeError

log = logging.getLogger(__name__)


class Renderers:
    """Load the tokenizer a generation's prompt was rendered with (or ``--tokenizer``), once.

    The next turn must be rendered with the very template and vocabulary of the earlier ones, so
    the tokenizer's files hash is checked against the record's ``tokenizer_hash``: a mismatch, or
    a tokenizer that cannot be loaded, is a configuration problem that stops the stage before it
    commits anything (a restart with the right tokenizer resumes at that record).

    Args:
        override: a tokenizer (path or hub id) used for every record instead of its ``tokenizer_id``.
        trust_remote_code: a tokenizer may run its own Python code (``--trust-remote-code``).
    """

    def __init__(self, *, override: str | None = None, trust_remote_code: bool = False) -> None:
        self.override = override
        self.trust_remote_code = trust_remote_code
        self._loaded: dict[str, PromptRenderer] = {}

    def get(self, tokenizer_id: str, tokenizer_hash: str) -> PromptRenderer:
        """The renderer of ``tokenizer_id`` (checked against ``tokenizer_hash``).

        Raises:
            ConfigError: the tokenizer cannot be loaded or is not the one the prompt names.
        """
        name = self.override or tokenizer_id
        renderer = self._loaded.get(name)
        if renderer is None:
            try:
                renderer = PromptRenderer(name, fast=False, trust_remote_code=self.trust_remote_code)
            except RemoteCodeError:
                raise
            except ConfigError as exc:
                raise ConfigError(f"cannot load tokenizer {name!r} to render the next turns ({exc}); make it "
                                  "available to `eaglefeed converse` or pass --tokenizer") from None
            log.info("rendering next turns with tokenizer %s", name)
            self._loaded[name] = renderer
        if renderer.tokenizer_hash != tokenizer_hash:
            raise ConfigError(f"tokenizer {name!r} (files hash {renderer.tokenizer_hash[:12]}) is not the "
                              f"one the prompts were rendered with ({tokenizer_hash[:12]}, "
                              f"{tokenizer_id!r}); "
                              "nothing was committed: restart with the right --tokenizer")
        return renderer
