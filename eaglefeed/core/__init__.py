"""The foundation every stage stands on: errors, config, Kafka clients, metrics, lifecycle, tokenizer markers.

Imports nothing above it; each module is imported by name (``eaglefeed.core.kafka``), so importing
one does not load the others.
"""
