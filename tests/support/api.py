"""Raw-HTTP helpers for the API tests (exact bodies, headers and tokens; no SDK in between)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text) if self.text else None

    @property
    def error_code(self) -> str | None:
        body = self.json
        return body.get("error", {}).get("code") if isinstance(body, dict) else None


class Api:
    """Raw HTTP against the stack: exact bodies, headers and tokens, no SDK in between."""

    def __init__(self, base_url: str, token: str | None) -> None:
        self.base_url = base_url
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | str | None = None,
        token: str | None | bool = True,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        data = raw.encode() if isinstance(raw, str) else raw
        if data is None and body is not None:
            data = json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        bearer = self.token if token is True else (token or None)
        if bearer:
            request.add_header("Authorization", f"Bearer {bearer}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return Reply(response.status, dict(response.headers.items()), response.read().decode())
        except urllib.error.HTTPError as error:
            with error:
                return Reply(error.code, dict(error.headers.items()), error.read().decode())

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.call("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Reply:
        return self.call("POST", path, body, **kwargs)


def new_tenant() -> str:
    return f"tenant-{uuid.uuid4().hex[:10]}"


def enqueue(api: Api, operation_id: str, payload: Any = None, **fields: Any) -> Reply:
    body = {"operation_id": operation_id, "job_type": fields.pop("job_type", "job"), **fields}
    if "payload_ref" not in fields:
        body["payload"] = {"n": operation_id} if payload is None else payload
    reply = api.post("/v1/operations", body)
    assert reply.status in (200, 201), reply.text
    return reply


def claim(api: Api, worker: str = "worker-1", **fields: Any) -> Reply:
    return api.post("/v1/claims", {"worker_id": worker, **fields})


def claimed(api: Api, operation_id: str, worker: str = "worker-1", **fields: Any) -> dict[str, Any]:
    """Claim one named operation (it must be claimable); the claim's JSON."""
    reply = claim(api, worker, operation_id=operation_id, **fields)
    assert reply.status == 200, reply.text
    return reply.json["claim"]


def op_path(operation_id: str, action: str = "") -> str:
    return f"/v1/operations/{quote(operation_id, safe='')}" + (f"/{action}" if action else "")
