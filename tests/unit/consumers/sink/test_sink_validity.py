"""Which decoded generations the sink refuses, and the reasons it gives."""

from eaglefeed.schemas import GENERATION
from eaglefeed.schemas.columnar import decode_generations
from eaglefeed.schemas.validity import invalid_rows
from tests.unit.consumers.sink.sink_support import gen


def test_validation_reasons():
    recs = [gen(0), gen(1, output=()), gen(2, output=(5, -1)), gen(3, completion=1), gen(4)]
    recs[0]["id"] = ""
    recs[4]["prompt_tokens"] = 7
    batch = decode_generations([GENERATION.encode(r) for r in recs]).batch
    assert invalid_rows(batch) == [(0, "empty id"), (1, "empty output"), (2, "negative token id"),
                                   (3, "completion_tokens 1 != 3 output ids"),
                                   (4, "prompt_tokens 7 != 2 prompt ids")]


def test_valid_rows_and_an_empty_batch_have_no_reasons():
    batch = decode_generations([GENERATION.encode(gen(i)) for i in range(3)]).batch
    assert invalid_rows(batch) == []
    assert invalid_rows(batch.select([])) == []
