"""reliability.resume: a stage resumed when every partition that had work waiting at the fault moved since."""

from eaglefeed.core.config import KafkaConfig
from reliability.resume import Reading, ResumeWatch


def watch_with(readings: list[Reading]) -> ResumeWatch:
    watch = ResumeWatch(kafka=KafkaConfig(topic_prefix="t"), groups={"worker": "g", "sink": "s"},
                        partitions=2)
    watch.readings = readings
    return watch


def reading(t, worker=None, sink=None, prompts=None, generations=None):
    r = Reading(t=t)
    for stage, values in (("worker", worker), ("sink", sink)):
        if values is not None:
            r.committed[stage] = values if isinstance(values, dict) else dict(enumerate(values))
    for topic, values in (("prompts", prompts), ("generations", generations)):
        if values is not None:
            r.ends[topic] = values if isinstance(values, dict) else dict(enumerate(values))
    return r


def test_the_slowest_partition_that_had_work_decides_and_unknown_pieces_are_skipped():
    watch = watch_with([
        reading(9.0, worker=[10, 20], sink=[5, 7], prompts=[12, 20], generations=[9, 7]),
        # the fault at 10.0; partition 1's leader and the sink's coordinator are on the dead node
        reading(10.5, worker=[11, 20], prompts={0: 13}),  # partition 1's end did not answer
        reading(11.0, worker=[12, 20], prompts=[14, 20], generations=[10, 8]),
        reading(14.0, worker=[13, 20], sink=[9, 7], prompts=[15, 21]),
    ])
    times = watch.resume_times(10.0)
    # worker: only partition 0 had work waiting (partition 1 was caught up): it moved at 10.5
    # sink: partition 0 had work (5 < 9), partition 1 none (7 == 7); its offsets answered again at 14
    # producer: every prompts partition must grow: partition 1 only at 14
    assert times == {"worker": 0.5, "sink": 4.0, "producer": 4.0}


def test_a_stage_that_never_moved_is_inf_and_one_without_work_is_none():
    watch = watch_with([
        reading(9.0, worker=[10, 20], sink=[9, 7], prompts=[12, 20], generations=[9, 7]),
        reading(12.0, worker=[10, 20], sink=[9, 7], prompts=[12, 20], generations=[9, 7]),
    ])
    times = watch.resume_times(10.0, feeding=False)
    assert times == {"worker": float("inf"), "sink": None, "producer": None}
    assert watch.longest_gap(8.0, 13.0) == 3.0


def test_the_longest_stall_counts_only_time_with_work_waiting():
    watch = watch_with([
        reading(0.0, worker=[1, 5], prompts=[5, 5]),
        reading(1.0, worker=[2, 5], prompts=[6, 5]),  # partition 1 caught up: no work, no stall
        reading(2.0, worker=[2, 5], prompts={0: 6}),  # partition 0 stands still from 1.0 ...
        reading(7.0, worker=[3, 5], prompts=[7, 6]),  # ... to 7.0; partition 1 has work from 7.0
        reading(8.0, worker=[4, 5], prompts=[8, 6]),  # ... and stands still to the end (9.0)
    ])
    stalls = watch.longest_stall(0.0, 9.0)
    assert stalls["worker"] == 6.0  # partition 0 from 1.0 to 7.0 (not 2.0 to 9.0 for partition 1)
    assert stalls["producer"] == 7.0  # prompts partition 1 grew only at 7.0 (first seen at 0.0)
    assert stalls["sink"] is None


def test_a_partition_whose_leader_died_at_the_fault_counts_as_stalled_from_the_fault():
    watch = watch_with([
        reading(9.0, worker=[10, 20], prompts=[12, 20]),
        reading(10.5, worker=[10, 20], prompts={1: 20}),  # partition 0's end unknown from the fault on
        reading(20.0, worker=[12, 20], prompts=[13, 20]),
    ])
    assert watch.longest_stall(10.0, 21.0)["worker"] == 10.0  # 10.0 → 20.0: work known from before 10.0


def test_work_done_just_before_the_fault_and_read_just_after_it_is_no_resume():
    watch = watch_with([
        reading(9.9, worker=[10, 20], prompts=[30, 30]),
        reading(10.1, worker=[11, 21], prompts=[31, 31]),  # began 0.1 s after the SIGKILL
        reading(10.4, worker=[11, 21], prompts=[31, 31]),
        reading(19.6, worker=[12, 22], prompts=[32, 32]),
    ])
    times = watch.resume_times(10.0)
    assert times["sink"] is None
    assert round(times["worker"], 3) == round(times["producer"], 3) == 9.6  # not 0.1


def test_a_group_whose_coordinator_died_stands_still_until_its_offsets_answer_again():
    watch = watch_with([
        reading(9.0, worker=[10, 20], prompts=[12, 20]),
        reading(10.5, prompts=[13, 21]),  # the worker group's offsets do not answer
        reading(15.0, prompts=[14, 22]),
        reading(20.0, worker=[12, 21], prompts=[15, 23]),
    ])
    assert watch.longest_stall(10.0, 21.0)["worker"] == 10.0  # 10.0 (the fault) → 20.0


def test_a_stage_caught_up_at_the_fault_resumed_once_it_took_in_work_that_came_after():
    watch = watch_with([
        reading(9.0, worker=[12, 20], sink=[9, 7], prompts=[12, 20], generations=[9, 7]),  # nothing waiting
        reading(12.0, worker=[12, 20], prompts=[14, 20], generations=[9, 7]),  # prompts-0 grew; not taken yet
        reading(15.0, worker=[14, 20], prompts=[14, 21], generations=[11, 7]),  # prompts-1 grew at 15
        reading(17.0, worker=[14, 21], prompts=[14, 21], generations=[11, 8]),
    ])
    times = watch.resume_times(10.0)
    # the worker: partition 0 moved at 15.0, partition 1 (fed at 15.0) at 17.0; the sink's offsets
    # never answered again after the fault, though generations grew: it is not yet seen resumed
    assert times["worker"] == 7.0
    assert times["sink"] == float("inf")
