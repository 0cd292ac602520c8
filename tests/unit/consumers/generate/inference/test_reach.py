"""A server that never answered stops the worker within --connect-timeout; Ctrl-C ends the wait at once."""

import asyncio
import dataclasses
import time

import httpx
import pytest

from eaglefeed.consumers.generate.inference import ServerPool, reach_servers
from eaglefeed.consumers.generate.inference import reach as reach_module
from eaglefeed.core.errors import ServerUnreachableError, StopRequestedError
from eaglefeed.core.lifecycle import StopSignal
from tests.unit.consumers.generate.loop_support import KAFKA, Server, WorkerRun, kafka_with_prompts

INFO = {"/model_info": {"model_path": "m"}, "/server_info": {"version": "0.5.23"}}


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def tls(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number", request=request)


def sglang(request: httpx.Request) -> httpx.Response:
    path = request.url.path
    return httpx.Response(200, json=INFO[path]) if path in INFO else httpx.Response(404)


def reach(handlers, *, timeout=0.5, stop=None):
    """Run reach_servers on one server per handler (``http://s0``, ``http://s1``, ...)."""

    def route(request: httpx.Request) -> httpx.Response:
        return handlers[int(request.url.host[1:])](request)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(route)) as http:
            pool = ServerPool(client=http, urls=[f"http://s{i}" for i in range(len(handlers))], eject_after=3,
                              probe_interval=1.0)
            started = time.monotonic()
            try:
                await reach_servers(pool, timeout=timeout, stop=stop or StopSignal())
                return pool, None, time.monotonic() - started
            except Exception as exc:  # noqa: BLE001
                return pool, exc, time.monotonic() - started

    return asyncio.run(go())


@pytest.mark.parametrize("handler, cause", [(refuse, "connection refused"), (tls, "TLS")])
def test_a_server_that_never_answers_stops_with_one_line_naming_it_and_the_cause(handler, cause):
    _pool, exc, took = reach([sglang, handler], timeout=0.5)
    assert isinstance(exc, ServerUnreachableError)
    message = str(exc)
    assert "http://s1" in message and cause in message and "--connect-timeout" in message
    assert "\n" not in message and "http://s0" not in message
    assert 0.5 <= took < 3


def unknown_host(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno -2] Name or service not known", request=request)


def silent(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectTimeout("timed out", request=request)


@pytest.mark.parametrize("handler, cause, fix", [
    (unknown_host, "DNS: host not found", "check the host name of --sglang-url"),
    (tls, "TLS", "check http:// or https://"),
])
def test_a_cause_waiting_does_not_cure_stops_after_a_few_tries_not_the_timeout(handler, cause, fix,
                                                                               monkeypatch):
    monkeypatch.setattr(reach_module, "PAUSE_FOR_GOOD", 0.05)
    tries = []

    def counted(request: httpx.Request) -> httpx.Response:
        tries.append(request.url.path)
        return handler(request)

    _pool, exc, took = reach([counted], timeout=60)
    assert isinstance(exc, ServerUnreachableError) and took < 5
    message = str(exc)
    assert "http://s0" in message and cause in message and fix in message, message
    assert "3 tries" in message and "waiting longer does not cure this" in message, message
    assert "--connect-timeout" not in message  # no advice to wait longer
    assert len(tries) == reach_module.TRIES_FOR_GOOD


def test_a_timeout_is_waited_out_for_the_whole_connect_timeout(monkeypatch):
    monkeypatch.setattr(reach_module, "ATTEMPT_PAUSE", 0.05)
    _pool, exc, took = reach([silent], timeout=1.5)
    assert isinstance(exc, ServerUnreachableError) and took >= 1.5
    assert "timeout" in str(exc) and "--connect-timeout" in str(exc)


def test_a_refusal_among_timeouts_does_not_count_as_for_good(monkeypatch):
    monkeypatch.setattr(reach_module, "PAUSE_FOR_GOOD", 0.05)
    monkeypatch.setattr(reach_module, "ATTEMPT_PAUSE", 0.05)
    answers = iter([refuse, refuse, silent] * 100)
    _pool, exc, took = reach([lambda request: next(answers)(request)], timeout=1.0)
    assert isinstance(exc, ServerUnreachableError) and took >= 1.0  # never 3 refusals in a row


def test_a_server_that_answers_late_is_waited_for_and_its_info_kept():
    started = time.monotonic()

    def late(request: httpx.Request) -> httpx.Response:
        return refuse(request) if time.monotonic() - started < 0.4 else sglang(request)

    pool, exc, _took = reach([late], timeout=5)
    info = pool.servers[0].info
    assert exc is None and info is not None and info.engine_version == "0.5.23"


def test_a_server_still_starting_has_answered():
    pool, exc, took = reach([lambda request: httpx.Response(503)], timeout=5)
    assert exc is None and took < 1 and pool.servers[0].info is None  # read again by the first request


def test_a_stop_while_no_server_answers_ends_the_wait_at_once():
    stop = StopSignal()

    def refuse_and_stop(request):
        if not stop.is_set():
            asyncio.get_running_loop().call_later(0.3, stop.set)
        return refuse(request)

    _pool, exc, took = reach([refuse_and_stop], timeout=60, stop=stop)
    assert isinstance(exc, StopRequestedError) and "http://s0" in str(exc)
    assert took < 2


def test_the_worker_stops_with_the_server_line_before_reading_a_prompt():
    server = Server()
    server.transport = httpx.MockTransport(refuse)
    run = WorkerRun(kafka_with_prompts(3), server, exit_when_idle=0.2,
                    kafka=dataclasses.replace(KAFKA, connect_timeout=0.5))
    with pytest.raises(ServerUnreachableError, match="http://sglang.*connection refused"):
        run.join(timeout=10)
    assert run.fake.commits == []


def test_a_stop_with_no_server_in_rotation_does_not_wait_for_the_drain():
    answered = []

    def gone_after_info(request: httpx.Request) -> httpx.Response:
        if request.url.path in INFO and len(answered) < 2:
            answered.append(request.url.path)
            return sglang(request)
        return refuse(request)  # the server answered once, then went away

    server = Server()
    server.transport = httpx.MockTransport(gone_after_info)
    run = WorkerRun(kafka_with_prompts(3), server, eject_after=1, probe_interval=0.05, drain_seconds=30)
    deadline = time.monotonic() + 5
    while not server_out(run) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server_out(run), "the server never left rotation"
    run.stop.set()
    stopped = time.monotonic()
    run.join(timeout=10)
    assert time.monotonic() - stopped < 3  # not the 30 s drain


def server_out(run: WorkerRun) -> bool:
    value = run.registry.get_sample_value("eaglefeed_worker_server_healthy", {"server": "http://sglang"})
    return value == 0
