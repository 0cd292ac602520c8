"""The training-data format: manifest, segments, ids, snapshots, compaction, exports, stats, token counts.

A dataset directory is ``manifest.jsonl`` + ``segments/*.parquet``; the manifest, not the
folder, says which files belong to it. The sink writes it, and the CLI, ``status`` and the
producer's ``--skip-done`` read it through this package only. ``freq/`` holds each file's
loss-token counts, from which ``vocab`` builds the draft vocabularies of EAGLE-3 training.
"""

from eaglefeed.dataset.compact import CompactOptions, CompactSummary, compact
from eaglefeed.dataset.done import load_done
from eaglefeed.dataset.export import ExportSummary, export
from eaglefeed.dataset.freq import SnapshotCounts, snapshot_counts
from eaglefeed.dataset.ids import IdIndex
from eaglefeed.dataset.loader import load
from eaglefeed.dataset.manifest import live_segments, read_manifest, resume_offsets
from eaglefeed.dataset.owner import claim_output, read_owner
from eaglefeed.dataset.snapshot import iter_batches, snapshot
from eaglefeed.dataset.stats import DatasetStats, compute_stats, plot, render
from eaglefeed.dataset.vocab import (
    DraftVocab,
    draft_vocab,
    write_specforge,
    write_speculators,
    write_token_freq,
)

__all__ = [
    "CompactOptions", "CompactSummary", "DatasetStats", "DraftVocab", "ExportSummary", "IdIndex",
    "SnapshotCounts", "claim_output", "compact", "compute_stats", "draft_vocab", "export", "iter_batches",
    "live_segments", "load", "load_done", "plot", "read_manifest", "read_owner", "render", "resume_offsets",
    "snapshot", "snapshot_counts", "write_specforge", "write_speculators", "write_token_freq",
]
