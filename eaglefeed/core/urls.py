"""Inference server URLs: checked once, when the configuration is built, so a typo never waits."""

from __future__ import annotations

from urllib.parse import urlsplit

from eaglefeed.core.errors import ConfigError

SERVER_URL_SCHEMES = ("http", "https")


def check_server_url(url: str) -> str:
    """``url`` when it is an ``http://`` or ``https://`` URL with a host (and a numeric port, if any).

    Args:
        url: an inference server's base URL, as given (``--sglang-url``).

    Raises:
        ConfigError: no scheme or another scheme (``localhost:30000``, ``grpc://host``), no host, or
            a port that is not a number; the message suggests the likely fix.
    """
    parts = urlsplit(url)
    if parts.scheme.lower() not in SERVER_URL_SCHEMES or not parts.netloc:
        bare = url.split("://", 1)[-1].lstrip("/")
        hint = f" (did you mean 'http://{bare}'?)" if bare else ""
        raise ConfigError(f"server URL {url!r} must start with http:// or https:// and name a host{hint}")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise ConfigError(f"server URL {url!r}: {exc}") from None
    if not parts.hostname:
        raise ConfigError(f"server URL {url!r} names no host")
    return url
