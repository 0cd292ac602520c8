"""``eaglefeed export --hidden-states``: the rows' captured states in speculators' or SpecForge's layout."""

from eaglefeed.dataset.export_states.final_norm import FinalNorm
from eaglefeed.dataset.export_states.run import FORMATS, export_states
from eaglefeed.dataset.export_states.summary import StatesSummary

__all__ = ["FORMATS", "FinalNorm", "StatesSummary", "export_states"]
