"""The Avro contracts between eaglefeed's stages and their single-object codec."""

from eaglefeed.schemas.codec import AvroCodec, load_schema, schema_fingerprint
from eaglefeed.schemas.versions import codec_for, current_version, history

PROMPT = codec_for("prompt")
GENERATION = codec_for("generation")
DEAD_LETTER = codec_for("dead_letter")
CONVERSATION_EVENT = codec_for("conversation_event")
WORKER_STATUS = codec_for("worker_status")
SINK_STATUS = codec_for("sink_status")

__all__ = ["CONVERSATION_EVENT", "DEAD_LETTER", "GENERATION", "PROMPT", "SINK_STATUS", "WORKER_STATUS",
           "AvroCodec", "codec_for", "current_version", "history", "load_schema", "schema_fingerprint"]
