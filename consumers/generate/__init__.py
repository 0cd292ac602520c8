"""The generate worker: prompts topic → inference server → generations topic."""

from consumers.worker.loop import run_worker

__all__ = ["run_worker"]
