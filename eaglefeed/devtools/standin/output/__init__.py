"""The stand-in's output model: which ids a request gets back (seeded draws, tool calls in a format).

Module map: ``generation`` (plans a completion) → ``tools`` (the offered tools, a call of one) →
``declarations`` (how each family's template declares tools, read back from text) and
``toolformats`` (the call written in a named format); ``draws`` (seeded uniform draws) under all.
"""

from eaglefeed.devtools.standin.output.generation import Completion, OutputModel, plan_completion

__all__ = ["Completion", "OutputModel", "plan_completion"]
