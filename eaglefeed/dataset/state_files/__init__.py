"""The hidden-state store's files without torch: the FP8 e4m3 codec (``e4m3``) and the writers (``write``).

Nothing is re-exported: ``eaglefeed.dataset.hidden_states`` (the reader and the checks) uses the
codec, and the writers use the reader, so each is imported by its module path.
"""
