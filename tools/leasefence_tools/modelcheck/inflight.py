"""An engine call in flight, advanced one store request per step, so that other actors' steps
(a resend of the same request above all) run between its requests.

A paused Python call cannot be copied into a snapshot, so a call in flight is kept as what it
has seen: the answers its requests got so far (plain text, part of the actors' local state and
of the state's digest). A step runs the call again from its start on a fresh engine at the
call's own start time: the requests it made before are answered from that record without
touching the table (the engine is deterministic: the same answers give the same requests, which
is checked), the next one goes to the table for real, its answer is recorded, and the call stops
there (:class:`Paused`). The step in which the call makes no further request is the one in which
it returns. This is replay-based state saving, as stateless model checkers do it.

Simplification: the call's clock stays at its start for all its requests.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from leasefence_tools.modelcheck.direct_client import DirectClient


class Paused(BaseException):
    """Raised inside the engine right after the one request a step lets through (a
    ``BaseException``, so that no ``except Exception`` of the engine or the store stops it)."""


class ReplayMismatch(RuntimeError):
    """The call sent another request than the one recorded: the engine is not deterministic
    for this call, and the replay would not be the same call."""


def stepping_client(client: DirectClient, record: dict[str, Any]) -> DirectClient:
    """``client`` for one step of the call ``record`` describes (``answers``: ``[action,
    status, body]`` per request made so far)."""
    clone = copy.copy(client)
    clone.send = functools.partial(_send_or_replay, client.send, record, [0])  # type: ignore[method-assign]
    return clone


def _send_or_replay(
    send: Any, record: dict[str, Any], sent: list[int], operation: Any, body: bytes
) -> tuple[int, bytes]:
    answers = record["answers"]
    if sent[0] < len(answers):
        action, status, answer = answers[sent[0]]
        if action != operation.name:
            raise ReplayMismatch(f"request {sent[0] + 1}: {operation.name}, recorded {action}")
        sent[0] += 1
        return status, answer.encode()
    status, raw = send(operation, body)
    answers.append([operation.name, status, raw.decode()])
    raise Paused


def advance(call: Any) -> tuple[bool, Any]:
    """Run ``call`` (a function of no argument that builds its engine on a
    :func:`stepping_client`) to its next request: ``(False, None)`` when it paused after sending
    it, ``(True, result)`` when it returned (an engine error is returned as the result)."""
    try:
        return True, call()
    except Paused:
        return False, None
