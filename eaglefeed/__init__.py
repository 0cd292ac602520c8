"""eaglefeed: token-exact training data for speculative-decoding draft models."""

from eaglefeed.core import quiet as _quiet

__version__ = "0.1.0"

_quiet.install()
