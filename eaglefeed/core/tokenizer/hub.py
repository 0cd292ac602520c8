"""Whether the Hugging Face hub can be reached, asked once in a few seconds instead of 48 s of retries.

A hub id (``Qwen/Qwen3-8B``) that is not in the local cache is downloaded by ``from_pretrained``;
without a network huggingface_hub retries every file five times with backoff (about 48 s) and
logs each retry. :func:`hub_unreachable` asks the endpoint once with a short TCP connect, so a
caller can load from the cache alone (``local_files_only``) or fail at once. ``HF_HUB_OFFLINE``
says offline without asking; behind an HTTP(S) proxy nothing is asked (only the proxy knows).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from urllib.parse import urlsplit

PROBE_SECONDS = 3.0
"""How long the connect to the hub may take before it counts as unreachable."""
DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = ("1", "true", "yes", "on")


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) says to stay offline."""
    return any(os.environ.get(name, "").strip().lower() in _TRUE
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_endpoint() -> str:
    """The hub's base URL (``HF_ENDPOINT``, else huggingface.co)."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


@functools.cache
def hub_unreachable(endpoint: str | None = None) -> str | None:
    """Why the hub cannot be reached (``HF_HUB_OFFLINE``, a DNS or connect error), or None if it can.

    Asked once per process and endpoint. Behind a proxy (``HTTPS_PROXY``, ``ALL_PROXY``) the answer
    is None: a direct connect says nothing about the proxy's way out.

    Args:
        endpoint: the hub's URL (:func:`hub_endpoint` when None).
    """
    if hub_offline():
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    url = urlsplit(endpoint or hub_endpoint())
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=PROBE_SECONDS):
            return None
    except OSError as exc:
        cause = exc.strerror or type(exc).__name__
        return f"{host} cannot be reached ({cause})"


def one_copy_of_hub_logs() -> None:
    """Let huggingface_hub's lines reach the log once, through the root handler.

    huggingface_hub adds a stderr handler of its own and propagates to the root logger too, so
    with the CLI's logging configured every retry line was printed twice.
    """
    try:
        from huggingface_hub.utils import logging as hub_logging
    except ImportError:
        return
    hub = hub_logging.get_logger()  # the library's root logger, its handler added by now
    if logging.getLogger().handlers:
        for handler in list(hub.handlers):
            if type(handler) is logging.StreamHandler:
                hub.removeHandler(handler)
