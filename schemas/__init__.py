"""The Avro contracts between eaglefeed's stages and their single-object codec."""

from schemas.codec import AvroCodec, load_schema, schema_fingerprint

PROMPT = AvroCodec(load_schema("prompt.avsc"))
GENERATION = AvroCodec(load_schema("generation.avsc"))
DEAD_LETTER = AvroCodec(load_schema("dead_letter.avsc"))

__all__ = ["DEAD_LETTER", "GENERATION", "PROMPT", "AvroCodec", "load_schema", "schema_fingerprint"]
