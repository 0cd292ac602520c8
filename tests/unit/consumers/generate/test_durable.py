"""The durable-generations index: a prompt published again is finished without a request."""

from hypothesis import given
from hypothesis import strategies as st

from eaglefeed.consumers.generate.durable import DurableIds
from tests.unit.consumers.generate.loop_support import (
    KAFKA,
    PROMPTS,
    Server,
    WorkerRun,
    generated_ids,
    kafka_with_prompts,
    prompt,
    wait_until,
)

PID = "ab" * 16


def test_a_prompt_is_covered_only_when_every_sample_is_durable():
    ids = DurableIds(limit=10)
    ids.add(f"{PID}:0".encode())
    assert not ids.covers({"prompt_id": PID, "num_samples": 2})
    ids.add(f"{PID}:1")
    assert ids.covers({"prompt_id": PID, "num_samples": 2})
    assert not ids.covers({"prompt_id": "cd" * 16, "num_samples": 1})
    ids.add(b"not-a-record-id")  # no sample index: ignored
    assert len(ids) == 1


def test_a_limit_of_zero_never_skips():
    ids = DurableIds(limit=0)
    ids.add(f"{PID}:0")
    assert not ids.covers({"prompt_id": PID, "num_samples": 1})


@given(st.lists(st.integers(0, 50), max_size=200), st.integers(1, 20))
def test_memory_is_bounded_and_the_newest_prompts_are_kept(prompts, limit):
    ids = DurableIds(limit=limit)
    for n in prompts:
        ids.add(f"{n:032x}:0")
    assert len(ids) <= limit
    if prompts:
        assert ids.covers({"prompt_id": f"{prompts[-1]:032x}", "num_samples": 1})


def test_the_worker_does_not_generate_a_prompt_published_again():
    fake = kafka_with_prompts(0, partitions=1)
    for pid in ("a1", "b2"):
        fake.append(PROMPTS, prompt(pid), key=pid.encode(), partition=0)
    server = Server()
    run = WorkerRun(fake, server, exit_when_idle=0.5)
    wait_until(lambda: len(generated_ids(fake)) == 2, "the first generations")
    for pid in ("a1", "b2", "c3"):  # a restarted producer published a1 and b2 again
        fake.append(PROMPTS, prompt(pid), key=pid.encode(), partition=0)
    assert run.join() == 5
    assert sorted(server.requests) == ["a1", "b2", "c3"]
    assert sorted(generated_ids(fake)) == ["a1:0", "b2:0", "c3:0"]
    assert fake.committed(KAFKA.default_group("generate"), PROMPTS, 0).offset == 5


def test_a_prompt_published_again_while_in_flight_costs_one_more_generation_at_most():
    fake = kafka_with_prompts(0, partitions=1)
    server = Server()
    server.hold("a1")
    for _ in range(2):
        fake.append(PROMPTS, prompt("a1"), key=b"a1", partition=0)
    run = WorkerRun(fake, server, exit_when_idle=0.3)
    wait_until(lambda: len(server.waiting) == 1 and len(server.requests) == 2, "both copies in flight")
    server.release()
    assert run.join() == 2 and server.requests == ["a1", "a1"]
