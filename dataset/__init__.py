"""The training-data format: manifest, segments and shards, id index, snapshots, compaction, exports, stats.

A dataset directory is ``manifest.jsonl`` + ``segments/*.parquet``; the manifest, not the
folder, says which files belong to it. The sink writes it, and the CLI, ``status`` and the
producer's ``--skip-done`` read it through this package only.
"""

from dataset.compact import CompactOptions, CompactSummary, compact
from dataset.done import load_done
from dataset.export import ExportSummary, export
from dataset.ids import IdIndex
from dataset.manifest import live_segments, read_manifest, resume_offsets
from dataset.owner import claim_output, read_owner
from dataset.snapshot import iter_batches, snapshot
from dataset.stats import DatasetStats, compute_stats, plot, render

__all__ = [
    "CompactOptions", "CompactSummary", "DatasetStats", "ExportSummary", "IdIndex", "claim_output", "compact",
    "compute_stats", "export", "iter_batches", "live_segments", "load_done", "plot",
    "read_manifest", "read_owner", "render", "resume_offsets", "snapshot",
]
