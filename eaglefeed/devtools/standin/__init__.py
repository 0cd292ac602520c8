"""An SGLang stand-in server: a labelled TEST AND DEMO DOUBLE, not SGLang and not a model.

It honours SGLang's native HTTP contract (``POST /generate`` with ``input_ids``, batches,
``n``, streaming, ``meta_info``, error shapes, health, model/server info, ``/metrics``) so the
pipeline can run without a GPU, but every output token is drawn from a seeded random
generator. ``/server_info`` reports ``"eaglefeed_standin": true`` and version
``0.0.0-eaglefeed-standin``. See docs/STANDIN.md.

Module map: ``config`` (knobs) → ``cli`` (flags, ``run``) → ``server`` (TCP, signals) →
``app`` (routes) → ``generate`` (the ``/generate`` handler) → ``parsing`` / ``sampling``
(validation) → ``engine`` (rids, planning) → ``output/`` (the output ids: ``generation``,
``tools``, ``toolformats``, ``draws``) → ``scheduler`` (latency model) → ``responses`` (shapes);
``prefix_cache``, ``faults``, ``metrics``, ``vocab``.
"""

from typing import TYPE_CHECKING, Any

from eaglefeed.devtools.standin.cli import add_arguments, run
from eaglefeed.devtools.standin.config import StandinConfig

if TYPE_CHECKING:
    from eaglefeed.devtools.standin.app import build_app

__all__ = ["StandinConfig", "add_arguments", "build_app", "run"]


def __getattr__(name: str) -> Any:
    """Import ``build_app`` (and with it aiohttp) only when it is used."""
    if name == "build_app":
        from eaglefeed.devtools.standin.app import build_app

        return build_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
