"""The consuming stages: ``generate`` (workers), ``converse`` (conversation continuation) and ``sink``.

Deliberately empty: each stage is imported on its own (``eaglefeed.consumers.sink`` loads no
tokenizer, HTTP client or other stage).
"""
