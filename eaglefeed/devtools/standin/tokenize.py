"""SGLang's ``POST /tokenize`` (and ``/v1/tokenize``): a prompt's ids under the served tokenizer.

The contract of SGLang 0.5.23 (``entrypoints/openai/protocol.py`` ``TokenizeRequest`` and
``serving_tokenize.py``): the body holds exactly one of ``prompt`` (a string, or a list of them)
and ``messages``; ``add_special_tokens`` defaults to true. The answer is ``{"tokens", "count",
"max_model_len"}``, with lists of lists and of counts for a list prompt. The stand-in renders no
chat template, so ``messages`` is refused with SGLang's 400 envelope.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from eaglefeed.devtools.standin.generate import ENGINE_KEY
from eaglefeed.devtools.standin.responses import envelope_response, json_response


async def handle_tokenize(request: web.Request) -> web.Response:
    """Encode ``prompt`` with the served tokenizer, as SGLang's ``/tokenize`` does."""
    engine = request.app[ENGINE_KEY]
    try:
        body: Any = json.loads(await request.read())
    except ValueError as exc:
        return envelope_response(f"Invalid JSON: {exc}", 400, "BadRequestError")
    if not isinstance(body, dict):
        return envelope_response("The request body must be a JSON object.", 400, "BadRequestError")
    prompt, messages = body.get("prompt"), body.get("messages")
    if (prompt is None) == (messages is None):
        return envelope_response("Exactly one of 'prompt' or 'messages' must be provided.", 400,
                                 "BadRequestError")
    if messages is not None:
        return envelope_response("Chat template tokenization requires a template manager.", 400,
                                 "BadRequestError")
    add_special = body.get("add_special_tokens", True)
    if not isinstance(add_special, bool):
        return envelope_response("add_special_tokens must be a boolean.", 400, "BadRequestError")
    tokenizer = engine.vocab.tokenizer
    max_model_len = engine.config.context_length
    if isinstance(prompt, str):
        ids = list(tokenizer.encode(prompt, add_special_tokens=add_special).ids)
        return json_response({"tokens": ids, "count": len(ids), "max_model_len": max_model_len})
    if isinstance(prompt, list) and all(isinstance(text, str) for text in prompt):
        batch = [list(tokenizer.encode(text, add_special_tokens=add_special).ids) for text in prompt]
        return json_response({"tokens": batch, "count": [len(ids) for ids in batch],
                              "max_model_len": max_model_len})
    return envelope_response(f"Invalid prompt type: {type(prompt)}. Expected str or List[str].", 400,
                             "BadRequestError")
