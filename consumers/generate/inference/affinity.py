"""Conversation affinity: every turn of a regenerated conversation goes to the same server.

Turn k+1's prompt starts with turn k's prompt and output, which the server that ran turn k holds
in its prefix cache (SGLang's radix cache, vLLM's prefix caching); any other server prefills them
again. The worker does not need to know which server ran turn k: every prompt of a conversation
carries its ``conversation_id`` (in the record's ``conversation`` state), and a rendezvous
(highest-random-weight) hash of that id over the servers in rotation names the same server for
every turn, in every worker of the group, with no record field and no shared state. The key is
the conversation, not the lane: the lanes of an ``n``-sample conversation all continue turn 0's
prompt, which is cached where turn 0 ran. A server
leaving rotation moves only its own conversations (to their second choice), one joining takes
only the conversations it now wins, so a change costs each moved conversation one cold prefill.

A conversation's server is passed over while it is overloaded: it has more outstanding requests
than ``load_factor`` × the mean of the servers in rotation (+ :data:`SLACK`), the bound of
consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018). The request then
goes to the least-outstanding server, as a prompt with no conversation always does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

SLACK = 4
"""Requests a conversation's server may have above the bound before it counts as overloaded: at
low load (a few requests per server) the mean is small and hash imbalance alone would break
affinity, though no server is busy."""

_STATE_HEAD = '{"conversation_id":"'
_ID_LEN = 32  # eaglefeed.chat.conversation.ids: 32 hex digits


class _Loaded(Protocol):
    url: str
    outstanding: int


S = TypeVar("S", bound=_Loaded)


def affinity_key(prompt: dict[str, Any]) -> str | None:
    """The conversation id a PromptRecord's turns share, or None for a prompt of no conversation.

    ``ConversationState.to_json`` writes ``conversation_id`` first, so the id is read from the head
    of the JSON without parsing the state (which carries the source messages: kilobytes per
    prompt); any other layout is parsed in full.
    """
    state = prompt.get("conversation")
    if not isinstance(state, str) or not state:
        return None
    head, end = len(_STATE_HEAD), len(_STATE_HEAD) + _ID_LEN
    if state.startswith(_STATE_HEAD) and state[end:end + 1] == '"':
        return state[head:end]
    try:
        data = json.loads(state)
    except (ValueError, RecursionError):
        return None
    cid = data.get("conversation_id") if isinstance(data, dict) else None
    return cid if isinstance(cid, str) and cid else None


def rendezvous_rank(key: str, url: str) -> int:
    """The weight of ``url`` for ``key``: the highest weight wins (stable across processes and hosts)."""
    digest = hashlib.blake2b(f"{url}\n{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def home_server(key: str, servers: Sequence[S]) -> S:
    """The server ``key`` maps to among ``servers`` (rendezvous hashing; ``servers`` not empty)."""
    return max(servers, key=lambda s: rendezvous_rank(key, s.url))


def overloaded(server: _Loaded, servers: Sequence[_Loaded], *, load_factor: float) -> bool:
    """Whether one more request would put ``server`` above ``load_factor`` × the mean load + :data:`SLACK`.

    The mean counts the new request, so an idle pool never counts a server as overloaded.
    """
    mean = (sum(s.outstanding for s in servers) + 1) / len(servers)
    return server.outstanding + 1 > load_factor * mean + SLACK


def choose(servers: Sequence[S], *, key: str | None, load_factor: float) -> tuple[S, str]:
    """Pick the server for a request among ``servers`` (those in rotation, not empty), and say why.

    Returns the server and the route: ``home`` (the conversation's own server), ``overloaded``
    (its server was over the bound: least-outstanding instead) or ``least`` (no conversation, one
    server, or affinity off: ``load_factor`` 0).
    """
    if key is not None and load_factor > 0 and len(servers) > 1:
        home = home_server(key, servers)
        if not overloaded(home, servers, load_factor=load_factor):
            return home, "home"
        return min(servers, key=lambda s: s.outstanding), "overloaded"
    return min(servers, key=lambda s: s.outstanding), "least"


__all__ = ["SLACK", "affinity_key", "choose", "home_server", "overloaded", "rendezvous_rank"]
