"""The foundation every stage stands on: errors, config, the Kafka seam, metrics, lifecycle, tokenizers.

Imports nothing above it; each module is imported by name (``eaglefeed.core.clients``), so importing
one does not load the others. ``eaglefeed.core.tokenizer`` is the one room inside: tokenizer files,
marker spellings and remote code, behind its face.
"""
