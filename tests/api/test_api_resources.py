"""One resource shape (leasefence.resources): the SDK's types, the API's answers and the OpenAPI
schemas of the operation, the claim and the history are all derived from it; and the document's
links lead from an enqueue and a claim to routes that take what they carry."""

from __future__ import annotations

import dataclasses
import json
import typing
from datetime import UTC, datetime
import pytest

from leasefence import client, model, resources
from leasefence.clock import to_rfc3339
from tests.support import ROOT

SPEC = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))
SCHEMAS = SPEC["components"]["schemas"]

# The SDK's public attribute names, as they were before the resources were defined once.
SDK_FIELDS = {
    "Operation": [
        "operation_id", "job_type", "state", "fence", "attempts", "max_attempts", "target_class", "payload_hash",
        "payload_ref", "outcome_code", "lease_owner", "lease_expires_at", "created_at", "updated_at",
        "payload_state", "erased_at", "job_type_version", "approval_expires_at", "approved_by", "enqueued_by",
        "reason", "intent", "checkpoint",
    ],
    "Claim": [
        "operation_id", "job_type", "fence", "attempts", "lease_expires_at", "payload_ref", "payload_hash",
        "target_class", "reconcile_required", "checkpoint", "intent", "claimed_at", "lease_ms", "lease_seconds",
        "payload", "traceparent", "tracestate", "claim_token",
    ],
    "HistoryEntry": [
        "sequence", "time", "transition", "previous_state", "state", "fence", "attempt", "actor", "previous_actor",
        "outcome_code", "reason", "available_at",
    ],
    "HistoryPage": ["entries", "next_cursor", "dropped", "history_expired_at"],
    "OperationPage": ["operations", "next_cursor"],
    "EnqueueResult": ["operation", "created"],
}  # fmt: skip
MODELS = {
    resources.Operation: "OperationOut",
    resources.Claim: "ClaimOut",
    resources.HistoryEntry: "HistoryEntryOut",
    resources.HistoryPage: "HistoryOut",
    resources.OperationPage: "OperationPage",
    resources.EnqueueResult: "EnqueueOut",
    resources.Intent: "Intent",
}


@pytest.mark.parametrize("name", sorted(SDK_FIELDS))
def test_the_sdk_types_are_the_resources_with_their_names_kept(name):
    cls = getattr(client, name)
    assert cls is getattr(resources, name) and name in client.__all__
    assert [f.name for f in dataclasses.fields(cls)] == SDK_FIELDS[name]


@pytest.mark.parametrize("resource", sorted(MODELS, key=lambda r: r.__name__), ids=lambda r: r.__name__)
def test_the_openapi_schema_of_a_resource_is_derived_from_it(resource):
    schema = SCHEMAS[MODELS[resource]]
    fields = resources.wire_fields(resource)
    assert list(schema["properties"]) == [f.name for f in fields]
    assert schema["required"] == [f.name for f in fields]  # the API always sends every field
    for field in fields:
        prop = schema["properties"][field.name]
        nullable = resources.optional(field.type)[1] and not field.doc.always
        assert ({"type": "null"} in prop.get("anyOf", [])) == nullable, field.name
        if field.doc.text:
            assert prop["description"] == field.doc.text
        value_schema = next((p for p in prop.get("anyOf", [prop]) if p != {"type": "null"}), prop)
        for keyword, value in (field.doc.schema or {}).items():  # an enum, a pattern: the value's own
            assert value_schema[keyword] == value, (field.name, keyword)
        base = resources.optional(field.type)[0]
        if base is datetime:
            variants = prop.get("anyOf", [prop])
            assert {"type": "string", "format": "date-time"} in [
                {k: v for k, v in p.items() if k in ("type", "format")} for p in variants
            ], field.name


def test_the_names_of_states_classes_and_transitions_are_the_engines():
    assert set(typing.get_args(resources.StateName)) == {s.value for s in model.State}
    assert set(typing.get_args(resources.TargetClassName)) == {c.value for c in model.TargetClass}
    assert set(typing.get_args(resources.TransitionName)) == {t.value for t in model.Transition}
    schema = SCHEMAS["OperationOut"]["properties"]
    assert schema["state"]["enum"] == list(typing.get_args(resources.StateName))


def _operation(**changes) -> model.Operation:
    base = model.Operation(
        tenant_id="t", operation_id="op-1", job_type="charge", state=model.State.CLAIMED, fence=3, attempts=2,
        max_attempts=5, target_class=model.TargetClass.B, payload_hash="sha256:" + "ab" * 32,
        payload_ref="s3://b/k", outcome_code=None, lease_owner="w-1", lease_expires_at=1_800_000_060_001,
        created_at=1_800_000_000_000, updated_at=1_800_000_000_123, payload_inline=True, job_type_version=2,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_an_answer_is_dumped_from_the_engines_record_and_read_back_by_the_sdk():
    record = _operation()
    answer = resources.dump(resources.Operation, record)
    assert list(answer) == SDK_FIELDS["Operation"]
    assert answer["state"] == "claimed" and answer["target_class"] == "B" and answer["payload_state"] == "stored"
    assert answer["lease_expires_at"] == to_rfc3339(1_800_000_060_001) == "2027-01-15T08:01:00.001Z"
    assert answer["erased_at"] is None and answer["approved_by"] is None
    read = client.Operation.from_json(json.loads(json.dumps(answer)))
    assert read.lease_expires_at == datetime(2027, 1, 15, 8, 1, 0, 1000, tzinfo=UTC)
    assert (read.fence, read.job_type_version, read.payload_state) == (3, 2, "stored")
    assert resources.dump(resources.Operation, read) == answer  # the SDK's own value dumps alike


def test_the_sdk_reads_an_older_servers_answer_without_the_newer_fields():
    answer = resources.dump(resources.Operation, _operation())
    older = {k: v for k, v in answer.items() if k in SDK_FIELDS["Operation"][:14]}
    del older["payload_ref"]  # nullable: missing reads as None
    read = client.Operation.from_json(older)
    assert (read.payload_ref, read.payload_state, read.approved_by) == (None, None, None)
    with pytest.raises(KeyError):
        client.Operation.from_json({k: v for k, v in older.items() if k != "fence"})


def test_a_claim_and_a_history_page_round_trip():
    grant = model.Claim(
        tenant_id="t", operation_id="op-1", job_type="charge", fence=4, attempts=2,
        lease_expires_at=1_800_000_030_000, lease_ms=30_000, payload_ref=None, payload_hash="sha256:" + "cd" * 32,
        target_class=model.TargetClass.D, reconcile_required=True, checkpoint={"step": 2}, takeover=True,
        worker_id="w-2", intent={"fence": 3, "what": "charge"}, claimed_at=1_800_000_000_000,
    )  # fmt: skip
    answer = resources.dump(resources.Claim, grant, lease_seconds=30)
    assert "claim_token" not in answer and answer["intent"] == {"fence": 3, "what": "charge"}
    claim = client.Claim.from_json(answer, claim_token="tok")
    assert (claim.claim_token, claim.lease_ms, claim.lease_seconds) == ("tok", 30_000, 30)
    assert claim.checkpoint == {"step": 2}
    assert claim.claimed_at == datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
    entry = {"seq": 2, "at": 1_800_000_000_000, "transition": "claim", "previous_state": "queued", "state": "claimed",
             "fence": 1, "attempt": 1, "actor": "w-1"}  # fmt: skip
    wire = resources.dump(resources.HistoryEntry, entry, sequence=entry["seq"], time=entry["at"])
    page = resources.from_json(client.HistoryPage, {"entries": [wire], "next_cursor": "2"})
    assert page.dropped == 0 and page.entries[0] == client.HistoryEntry(
        sequence=2, time=datetime(2027, 1, 15, 8, 0, tzinfo=UTC), transition="claim", previous_state="queued",
        state="claimed", fence=1, attempt=1, actor="w-1",
    )  # fmt: skip


# ---------------------------------------------------------------------------------- links


def _operations():
    for path, methods in SPEC["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def _resolve(schema):
    while "$ref" in schema:
        schema = SCHEMAS[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _points_at(schema, pointer: str) -> bool:
    for part in pointer.strip("/").split("/"):
        schema = _resolve(schema)
        if "anyOf" in schema:
            schema = next(_resolve(s) for s in schema["anyOf"] if s != {"type": "null"})
        if part not in schema.get("properties", {}):
            return False
        schema = schema["properties"][part]
    return True


def test_links_lead_from_an_enqueue_and_a_claim_to_the_operation_routes():
    by_id = {op["operationId"]: (path, method, op) for path, method, op in _operations()}
    linked: dict[str, set[str]] = {}
    for _path, _method, source in _operations():
        for status, response in source["responses"].items():
            for name, link in response.get("links", {}).items():
                linked.setdefault(source["operationId"], set()).add(link["operationId"])
                target_path, _target_method, target = by_id[link["operationId"]]
                response_schema = response["content"]["application/json"]["schema"]
                request_body = (source.get("requestBody") or {}).get("content", {}).get("application/json", {})
                for where, expression in [*link.get("parameters", {}).items(), *link.get("requestBody", {}).items()]:
                    for value in expression if isinstance(expression, list) else [expression]:
                        if value.startswith("$response.body#"):
                            assert _points_at(response_schema, value.split("#", 1)[1]), (name, value)
                        elif value.startswith("$request.body#"):
                            assert _points_at(request_body["schema"], value.split("#", 1)[1]), (name, value)
                    if where.startswith("path."):
                        assert "{" + where[5:] + "}" in target_path, (name, where)
                    elif where.startswith("query."):
                        assert where[6:] in {p["name"] for p in target.get("parameters", [])}, (name, where)
                    else:
                        body = _resolve(target["requestBody"]["content"]["application/json"]["schema"])
                        assert where in body["properties"], (name, where)
                assert status.startswith("2")
    assert linked["enqueueOperation"] >= {"getOperation", "getHistory", "claimOperation", "cancelOperation"}
    assert linked["claimOperation"] == {
        "heartbeat", "completeOperation", "failOperation", "parkUnknown", "quarantineOperation"
    }
