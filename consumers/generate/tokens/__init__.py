"""The generate stage's tokenizer checks: vocabulary sizes, agreement with the servers, spot checks.

Nothing here knows Kafka; the servers are reached through the inference face
(``eaglefeed.consumers.generate.inference``).
"""

from eaglefeed.consumers.generate.tokens.agreement import PROBES, TokenizerAgreement
from eaglefeed.consumers.generate.tokens.spot_check import SpotCheck
from eaglefeed.consumers.generate.tokens.vocab import VocabSizes, load_local

__all__ = ["PROBES", "SpotCheck", "TokenizerAgreement", "VocabSizes", "load_local"]
