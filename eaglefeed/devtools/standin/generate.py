"""The ``POST /generate`` handler: parse, inject faults, admit, then answer as JSON or SSE."""

from __future__ import annotations

import socket
import struct
from typing import Any

from aiohttp import web

from eaglefeed.devtools.standin.contract import contract_error
from eaglefeed.devtools.standin.engine import SHUTDOWN_MESSAGE, Engine, Job
from eaglefeed.devtools.standin.hidden_states import captured_layers
from eaglefeed.devtools.standin.parsing import BadRequestError, load_body, parse_generate
from eaglefeed.devtools.standin.responses import (
    QUEUE_FULL_MESSAGE,
    SSE_DONE,
    HiddenCapture,
    dumps,
    envelope_response,
    error_response,
    json_response,
    output_element,
    sse_chunk,
)
from eaglefeed.devtools.standin.sampling import SamplingParams, UnknownSamplingParamError
from eaglefeed.devtools.standin.scheduler import QueueFullError

ENGINE_KEY = web.AppKey("engine", Engine)
INJECTED_500_MESSAGE = "Internal server error (injected by the eaglefeed stand-in)."
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


async def handle_generate(request: web.Request) -> web.StreamResponse:
    """Answer ``/generate`` the way SGLang's ``generate_request`` does."""
    engine = request.app[ENGINE_KEY]
    try:
        obj = load_body(await request.read())
        problem = contract_error(obj)  # SGLang 0.5.23's schema gate runs first
        if problem is not None:
            return json_response({"error": problem}, status=400)
        wants_stream = obj.get("stream") is True
        parsed = parse_generate(obj, vocab=engine.vocab, context_length=engine.config.context_length,
                                preferred=engine.config.preferred_sampling_params, capture=engine.config)
    except BadRequestError as exc:
        return envelope_response(str(exc), 400, "Bad Request")
    except UnknownSamplingParamError as exc:
        return envelope_response(f"TypeError: {exc}", 500)
    except ValueError as exc:
        return await _value_error(request, str(exc), wants_stream)
    if engine.stopping:
        return envelope_response(SHUTDOWN_MESSAGE, 503)
    fault = engine.faults.next_fault()
    if fault is not None:
        engine.metrics.faults[fault].inc()
    if fault == "503":
        return envelope_response(QUEUE_FULL_MESSAGE, 503)
    if fault == "500":
        return envelope_response(INJECTED_500_MESSAGE, 500)
    try:
        job = engine.admit(parsed, abort_fault=fault == "abort")
    except ValueError as exc:
        return await _value_error(request, str(exc), parsed.stream)
    except QueueFullError:
        if parsed.stream:
            return await _queue_full_stream(request, parsed.items[0].rid)
        return envelope_response(QUEUE_FULL_MESSAGE, 503)
    try:
        if fault == "hang":
            await engine.hang(engine.config.faults.hang_seconds)
        contaminated = fault == "contaminate"
        if parsed.stream and fault != "reset":
            return await _stream(request, engine, job, contaminated)
        await engine.wait(job)
        elements = [_element(engine, job, index, contaminated) for index in range(len(job.seqs))]
        payload = elements[0] if parsed.is_single else elements
        if fault == "reset":
            return _reset_connection(request, payload)
        return json_response(payload)
    finally:
        engine.release(job)


def _element(engine: Engine, job: Job, index: int, contaminated: bool, **chunk: Any) -> dict[str, Any]:
    first = None if job.hidden_first is None else job.hidden_first[index]
    capture = None
    if first is not None:
        config = engine.config
        capture = HiddenCapture(first=first, layers=captured_layers(config), width=config.hidden_size)
    return output_element(
        job.seqs[index],
        vocab=engine.vocab,
        params=job.params[index],
        input_ids=job.prompts[index],
        weight_version=engine.config.weight_version,
        contaminated=contaminated,
        return_prompt_token_ids=job.request.return_prompt_token_ids,
        hidden=capture,
        **chunk,
    )


async def _stream(request: web.Request, engine: Engine, job: Job, contaminated: bool) -> web.StreamResponse:
    """Send a chunk every ``stream_interval`` tokens per sequence, then ``data: [DONE]``."""
    response = web.StreamResponse(headers=_SSE_HEADERS)
    await response.prepare(request)
    incremental = engine.config.incremental_streaming_output
    batch = not job.request.is_single
    sent = [0] * len(job.seqs)
    done = [False] * len(job.seqs)
    while True:
        if job.notify is not None:
            job.notify.clear()
        for index, seq in enumerate(job.seqs):
            if done[index]:
                continue
            for count in _chunk_counts(sent[index], seq.emitted, seq.finished, job.params[index]):
                since = sent[index] if incremental else 0
                chunk = _element(engine, job, index, contaminated, count=count, since=since)
                if batch:
                    chunk["index"] = index
                await response.write(sse_chunk(chunk))
                sent[index] = count
            done[index] = seq.finished
        if all(done):
            break
        if job.notify is not None:
            await job.notify.wait()
    await response.write(SSE_DONE)
    await response.write_eof()
    return response


def _chunk_counts(sent: int, emitted: int, finished: bool, params: SamplingParams) -> list[int]:
    """Token counts at which to send chunks: multiples of the interval, plus the finish."""
    interval = params.stream_interval or 1
    first = (sent // interval + 1) * interval
    counts = list(range(first, emitted + 1, interval))
    if finished and (not counts or counts[-1] != emitted):
        counts.append(emitted)
    return counts


async def _value_error(request: web.Request, message: str, stream: bool) -> web.StreamResponse:
    """SGLang answers a ValueError with 400, or inside a 200 event stream when streaming."""
    if not stream:
        return error_response(message)
    return await _sse_once(request, {"error": {"message": message}})


async def _queue_full_stream(request: web.Request, rid: str) -> web.StreamResponse:
    finish = {"type": "abort", "message": QUEUE_FULL_MESSAGE, "status_code": 503, "err_type": None}
    meta = {
        "id": rid,
        "finish_reason": finish,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
    }
    return await _sse_once(request, {"text": "", "output_ids": [], "meta_info": meta})


async def _sse_once(request: web.Request, obj: dict[str, Any]) -> web.StreamResponse:
    response = web.StreamResponse(headers=_SSE_HEADERS)
    await response.prepare(request)
    await response.write(sse_chunk(obj))
    await response.write(SSE_DONE)
    await response.write_eof()
    return response


def _reset_connection(request: web.Request, payload: Any) -> web.Response:
    """Send the headers and half the body, then reset the TCP connection (RST)."""
    body = dumps(payload).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    transport = request.transport
    if transport is not None:
        transport.write(head + body[: len(body) // 2])
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response()  # aiohttp drops it silently: the transport is already closed
