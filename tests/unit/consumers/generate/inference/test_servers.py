"""The server pool says why a server left rotation, and keeps saying so while none is available."""

import asyncio
import logging

import httpx
import pytest

from eaglefeed.consumers.generate.inference import ServerPool, describe
from eaglefeed.consumers.generate.inference.engines import post
from eaglefeed.core.errors import RetryableInferenceError


@pytest.mark.parametrize("exc, cause", [
    (httpx.ConnectError("[Errno 111] Connection refused"), "connection refused"),
    (httpx.ConnectTimeout("Cannot connect to host h:1 ssl:default [Connect call failed ('h', 1)]"),
     "connection refused"),
    (httpx.ConnectTimeout("Cannot connect to host x.invalid:80 ssl:default [Name or service not known]"),
     "DNS: host not found"),
    (httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"), "TLS"),
    (httpx.ReadTimeout(""), "timed out waiting for the response"),
])
def test_the_cause_of_a_failed_request_is_named(exc, cause):
    assert describe(exc).startswith(cause)


@pytest.mark.parametrize("exc, said", [
    # aiohttp's ServerDisconnectedError, as the aiohttp transport reports a killed server
    (httpx.ConnectTimeout("Server disconnected"), "the server closed the connection (Server disconnected)"),
    (httpx.RemoteProtocolError("Server disconnected without sending a response."),
     "the server closed the connection (Server disconnected without sending a response.)"),
    (httpx.ReadError("[Errno 104] Connection reset by peer"),
     "the server closed the connection ([Errno 104] Connection reset by peer)"),
    (httpx.ReadError(""), "the server closed the connection"),
    (httpx.ConnectError("[Errno 111] Connection refused"),
     "connection refused ([Errno 111] Connection refused)"),
    (httpx.ConnectTimeout(""), "timed out connecting"),
    (httpx.ConnectTimeout("timed out"), "timed out connecting (timed out)"),
    (httpx.ReadTimeout(""), "timed out waiting for the response"),
    (httpx.PoolTimeout(""), "timeout"),
    (ValueError("odd"), "ValueError (ValueError: odd)"),  # not a transport error: its class is what happened
])
def test_a_transport_error_is_described_by_what_happened_not_by_the_transports_class(exc, said):
    assert describe(exc) == said


def test_a_refused_connection_is_not_called_a_timeout_over_tls():
    aiohttp_says = "Cannot connect to host h:1 ssl:default [Connect call failed ('h', 1)]"
    said = describe(httpx.ConnectTimeout(aiohttp_says))
    assert said == "connection refused (Cannot connect to host h:1 [Connect call failed ('h', 1)])"


def test_an_unreachable_server_is_ejected_with_its_cause_and_the_outage_is_repeated(caplog):
    caplog.set_level(logging.INFO, logger="eaglefeed.consumers.generate.inference.servers")

    def refuse(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as http:
            pool = ServerPool(client=http, urls=["http://gpu:30000"], eject_after=2, probe_interval=0.02,
                              report_interval=0.1)
            for _ in range(2):
                server = await pool.acquire()
                with pytest.raises(RetryableInferenceError, match="connection refused"):
                    await post(client=http, server=server, path="/generate", body={})
                pool.release(server, failed=True)
            await asyncio.sleep(0.35)
            await pool.close()

    asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records]
    ejected = [line for line in lines if "out of rotation" in line]
    assert len(ejected) == 1 and "http://gpu:30000" in ejected[0] and "connection refused" in ejected[0]
    outage = [line for line in lines if line.startswith("no server available for")]
    assert len(outage) >= 2 and all("connection refused" in line for line in outage)


def test_an_http_error_status_is_the_cause(caplog):
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(503))) as http:
            pool = ServerPool(client=http, urls=["http://s"], eject_after=1, probe_interval=5.0)
            server = await pool.acquire()
            assert (await post(client=http, server=server, path="/generate", body={})).status_code == 503
            pool.release(server, failed=True)
            await pool.close()

    asyncio.run(go())
    assert any("HTTP 503" in r.getMessage() and "out of rotation" in r.getMessage() for r in caplog.records)


def test_a_request_waits_for_room_when_every_server_is_at_its_limit():
    """Requests that waited out an outage (or slots sized to a limit since cut) must not all land at
    once above the server's limit: the third request waits until one of the two ends."""

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as http:
            pool = ServerPool(client=http, urls=["http://gpu:30000"], eject_after=2, probe_interval=0.02)
            server = pool.servers[0]
            server.limit = 2
            first, _second = await pool.acquire(), await pool.acquire()
            third = asyncio.create_task(pool.acquire())
            await asyncio.sleep(0.05)
            waited = not third.done()
            before = server.sequences
            pool.release(first, failed=False)
            await asyncio.wait_for(third, 1.0)
            after = server.sequences
            await pool.close()
            return waited, before, after

    waited, before, after = asyncio.run(go())
    assert waited and before == 2 and after == 2


def test_a_raised_limit_lets_a_waiting_request_go_and_an_oversized_one_goes_to_an_idle_server():
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as http:
            pool = ServerPool(client=http, urls=["http://gpu:30000"], eject_after=2, probe_interval=0.02)
            server = pool.servers[0]
            server.limit = 1
            big = await asyncio.wait_for(pool.acquire(weight=4), 1.0)  # idle: more than any limit, goes
            pool.release(big, failed=False, weight=4)
            await pool.acquire()
            waiting = asyncio.create_task(pool.acquire())
            await asyncio.sleep(0.05)
            waited = not waiting.done()
            server.limit = 2
            pool.limits_changed()
            await asyncio.wait_for(waiting, 1.0)
            await pool.close()
            return waited, server.sequences

    waited, sequences = asyncio.run(go())
    assert waited and sequences == 2
