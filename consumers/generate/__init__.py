"""The generate worker: prompts topic → inference server → generations topic."""

from eaglefeed.consumers.generate.loop import run_worker

__all__ = ["run_worker"]
