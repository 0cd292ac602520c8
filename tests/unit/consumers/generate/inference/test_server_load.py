"""A server's load is read from its ``/metrics`` page, SGLang's names or vLLM's, summed over ranks."""

import asyncio

import httpx

from eaglefeed.consumers.generate.inference import Load
from eaglefeed.consumers.generate.inference._server_load import parse_load, read_load

SGLANG = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 60.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 4.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 7.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} NaN
sglang:num_queue_reqs_total_bogus 99
sglang:num_running_reqs_by_kind{kind="x"} 1000
"""

VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 9.0
"""


def test_sglang_counts_are_summed_over_data_parallel_ranks():
    assert parse_load(SGLANG) == Load(running=64, waiting=7)


def test_vllm_counts_are_read():
    assert parse_load(VLLM) == Load(running=3, waiting=0)


def test_a_page_without_both_counts_reports_no_load():
    assert parse_load("process_cpu_seconds_total 3.5\n") is None
    assert parse_load("vllm:num_requests_running 3\n") is None


def test_a_server_without_metrics_reports_no_load():
    async def go():
        transport = httpx.MockTransport(lambda request: httpx.Response(404, text="Not Found"))
        async with httpx.AsyncClient(transport=transport) as http:
            return await read_load(http, "http://s", timeout=1.0)

    assert asyncio.run(go()) is None


def test_the_stand_in_reports_its_load_under_sglang_names():
    from prometheus_client import generate_latest

    from eaglefeed.devtools.standin.metrics import StandinMetrics
    from eaglefeed.devtools.standin.scheduler import BatchingScheduler, StepCosts

    scheduler = BatchingScheduler(max_running=8, max_queued=None, costs=StepCosts())
    metrics = StandinMetrics.create(model_name="m", scheduler=scheduler, total_tokens=100, started_at=0.0)
    assert parse_load(generate_latest(metrics.registry).decode()) == Load(running=0, waiting=0)
