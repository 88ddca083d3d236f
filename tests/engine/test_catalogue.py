"""The job-type catalogue in-process: versioned entries, file apply, enqueue under an entry."""

from __future__ import annotations

import re
import time

import pytest

from leasefence import Engine, keys
from leasefence.catalogue import CACHE_MS, JobTypeSpec, UnknownJobType, VersionConflict
from leasefence.errors import InvalidInput, NotFound
from leasefence.model import State, TargetClass

H = "sha256:" + "ab" * 32
REFUND = {
    "target_class": "B",
    "max_attempts": 3,
    "lease_seconds": 30,
    "max_lease_seconds": 120,
    "owner": "payments-oncall",
    "runbook_url": "https://runbooks.example/refund",
}


def test_put_versions_and_is_idempotent(engine):
    cat = engine.catalogue
    entry, changed = cat.put("t1", "refund", REFUND, actor="alice")
    assert (entry.version, changed, entry.updated_by) == (1, True, "alice")
    again, changed = cat.put("t1", "refund", dict(REFUND))
    assert (again.version, changed) == (1, False)
    newer, changed = cat.put("t1", "refund", {**REFUND, "max_attempts": 4}, expected_version=1)
    assert (newer.version, changed, newer.spec.max_attempts) == (2, True, 4)
    with pytest.raises(VersionConflict):
        cat.put("t1", "refund", {**REFUND, "max_attempts": 5}, expected_version=1)
    assert cat.get("t1", "refund").spec.max_attempts == 4
    # Deleting is a tombstone: gone from reads, and the version keeps rising.
    assert cat.delete("t1", "refund").version == 3
    with pytest.raises(NotFound):
        cat.get("t1", "refund")
    with pytest.raises(NotFound):
        cat.delete("t1", "refund")
    assert cat.list("t1") == []
    back, _ = cat.put("t1", "refund", REFUND)
    assert back.version == 4
    # Another tenant sees none of it; operation listings never meet catalogue items.
    assert cat.list("t2") == []
    assert engine.list("t1").operations == []


def test_invalid_entries_are_refused(engine):
    for bad in (
        {"max_attempts": 3},  # no class
        {"target_class": "D", "max_attempts": 2},
        {**REFUND, "lease_seconds": 600},  # above max_lease_seconds
        {**REFUND, "runbook_url": "ftp://x"},
        {**REFUND, "approval_valid_seconds": 600},  # without approval_required
        {**REFUND, "payload_schema": {"type": "nonsense"}},
        {**REFUND, "payload_schema": {"$ref": "https://example.com/s.json"}},
        {**REFUND, "colour": "red"},
    ):
        with pytest.raises(InvalidInput):
            engine.catalogue.put("t1", "refund", bad)
    assert engine.catalogue.list("t1") == []


def test_enqueue_takes_class_and_budget_from_the_entry(engine, clock):
    engine.catalogue.put("t1", "refund", REFUND)
    op = engine.enqueue("t1", "op-1", "refund", H, payload_ref="ref").operation
    assert (op.target_class.value, op.max_attempts, op.job_type_version) == ("B", 3, 1)
    # Agreeing explicitly is fine; contradicting is refused and writes nothing.
    engine.enqueue("t1", "op-2", "refund", H, payload_ref="r", target_class="B", max_attempts=3)
    for contradiction in ({"target_class": "C"}, {"max_attempts": 5}):
        with pytest.raises(InvalidInput, match="contradicts"):
            engine.enqueue("t1", "op-3", "refund", H, payload_ref="r", **contradiction)
    with pytest.raises(NotFound):
        engine.get("t1", "op-3")
    # Claims without a lease get the entry's default; a longer one is cut to its maximum.
    grant = engine.claim("t1", "op-1", "w1")
    assert grant is not None and grant.lease_ms == 30_000
    grant = engine.claim("t1", "op-2", "w1", lease_ms=600_000)
    assert grant is not None and grant.lease_ms == 120_000
    with pytest.raises(InvalidInput, match="maximum lease"):
        engine.heartbeat("t1", "op-2", grant.fence, "w1", lease_ms=300_000)
    # A new version applies to later enqueues (after the cache's time); the old op keeps its own.
    engine.catalogue.put("t1", "refund", {**REFUND, "max_attempts": 2})
    clock.advance(CACHE_MS)
    later = engine.enqueue("t1", "op-4", "refund", H, payload_ref="r").operation
    assert (later.max_attempts, later.job_type_version) == (2, 2)
    assert engine.get("t1", "op-1").job_type_version == 1


def test_uncatalogued_types_enqueue_as_before_unless_strict(engine, clock, ddb, spec):
    op = engine.enqueue("t1", "op-1", "misc", H, payload_ref="r").operation
    assert (op.target_class.value, op.max_attempts, op.job_type_version) == ("C", 5, None)
    item = ddb.get_item(
        TableName=spec.table_name, Key={"tenant_id": {"S": "t1"}, "operation_id": {"S": "op-1"}}
    )["Item"]
    assert not {"job_type_version", "lease_default_ms", "lease_max_ms"} & set(item)
    grant = engine.claim("t1", "op-1", "w1")
    assert grant is not None and grant.lease_ms == 60_000
    engine.catalogue.set_strict("t1", True)
    with pytest.raises(UnknownJobType) as refused:
        engine.enqueue("t1", "op-2", "misc", H, payload_ref="r")
    assert (refused.value.code, refused.value.status) == ("unknown_job_type", 422)
    with pytest.raises(NotFound):
        engine.get("t1", "op-2")
    engine.catalogue.put("t1", "misc", {"target_class": "C"})
    assert engine.enqueue("t1", "op-2", "misc", H, payload_ref="r").created
    # Another engine (another API container) sees a switch once its cache time has passed.
    other = Engine(client=ddb, spec=spec, clock=clock)
    with pytest.raises(UnknownJobType):
        other.enqueue("t1", "op-3", "other", H, payload_ref="r")
    engine.catalogue.set_strict("t1", False)
    with pytest.raises(UnknownJobType):
        other.enqueue("t1", "op-3", "other", H, payload_ref="r")
    clock.advance(CACHE_MS)
    assert other.enqueue("t1", "op-3", "other", H, payload_ref="r").created


def test_a_replay_stays_a_replay_when_the_catalogue_changed_since(engine, ddb, spec):
    """A producer retrying after a lost answer gets its replay (nothing written), even though its
    request now contradicts the entry or the tenant turned strict; a new identity is refused."""
    engine.catalogue.put("t1", "refund", REFUND)
    first = engine.enqueue("t1", "op-1", "refund", H, payload_ref="r", max_attempts=3).operation
    engine.enqueue("t1", "op-2", "misc", H, payload_ref="r")
    engine.catalogue.put("t1", "refund", {**REFUND, "max_attempts": 4})
    engine.catalogue.set_strict("t1", True)
    before = ddb.scan(TableName=spec.table_name)["Items"]
    again = engine.enqueue("t1", "op-1", "refund", H, payload_ref="r", max_attempts=3)
    assert (again.created, again.operation) == (False, first)
    assert engine.enqueue("t1", "op-2", "misc", H, payload_ref="r").created is False
    assert ddb.scan(TableName=spec.table_name)["Items"] == before
    # Not a replay: another payload for the same id, or a new id, is still refused.
    other = "sha256:" + "cd" * 32
    with pytest.raises(InvalidInput, match="contradicts"):
        engine.enqueue("t1", "op-1", "refund", other, payload_ref="r", max_attempts=3)
    with pytest.raises(UnknownJobType):
        engine.enqueue("t1", "op-3", "misc", H, payload_ref="r")


def test_payload_schema(engine):
    schema = {
        "type": "object",
        "required": ["amount"],
        "properties": {"amount": {"type": "integer"}},
    }
    engine.catalogue.put("t1", "refund", {**REFUND, "payload_schema": schema})
    ok = engine.catalogue.admit("t1", "refund", payload={"amount": 3}, payload_given=True)
    assert ok.job_type_version == 1
    with pytest.raises(InvalidInput, match="schema"):
        engine.catalogue.admit("t1", "refund", payload={"amount": "3"}, payload_given=True)
    # By reference, leasefence cannot check the payload: refused.
    with pytest.raises(InvalidInput, match="inline"):
        engine.enqueue("t1", "op-1", "refund", H, payload_ref="r")
    op = engine.enqueue("t1", "op-1", "refund", H, payload_ref="r", admission=ok).operation
    assert op.job_type_version == 1


def test_catalogue_items_are_not_operations(engine):
    engine.catalogue.put("t1", "refund", REFUND)
    engine.catalogue.set_strict("t1", True)
    assert keys.catalogue_id("s") != keys.DIRECTORY_ID  # "\x00job-type:s" vs "\x00job-types"
    assert engine.list("t1").operations == []
    assert engine.claim_next("t1", "w1") is None


def test_apply_a_file_is_idempotent_and_shows_the_diff(engine):
    document = {
        "strict_job_types": True,
        "job_types": {"refund": REFUND, "email": {"target_class": "C", "max_attempts": 5}},
    }
    changes, strict = engine.catalogue.apply("t1", document, dry_run=True)
    assert [(c.kind, c.job_type) for c in changes] == [("added", "email"), ("added", "refund")]
    assert strict is True and engine.catalogue.list("t1") == []  # a dry run writes nothing
    engine.catalogue.apply("t1", document)
    assert engine.catalogue.strict("t1") is True
    assert engine.catalogue.apply("t1", document) == ([], None)  # nothing left to change
    edited = {"job_types": {"refund": {**REFUND, "max_attempts": 4, "owner": None}}}
    changes, strict = engine.catalogue.apply("t1", edited)
    assert strict is None
    assert [(c.kind, c.job_type) for c in changes] == [("removed", "email"), ("changed", "refund")]
    assert changes[1].fields == {"max_attempts": (3, 4), "owner": ("payments-oncall", None)}
    assert "    max_attempts: 3 -> 4" in changes[1].describe()
    assert [e.job_type for e in engine.catalogue.list("t1")] == ["refund"]
    assert engine.catalogue.get("t1", "refund").version == 2


def test_an_entry_that_requires_approval_gates_its_operations(engine, clock):
    engine.catalogue.put(
        "t1", "payout", {"target_class": "D", "approval_required": True, "approval_valid_seconds": 600}
    )
    # A caller cannot lift the entry's requirement.
    op = engine.enqueue(
        "t1", "p-1", "payout", H, payload_ref="r", payload_inline=True, actor="alice", approval_required=False
    ).operation
    assert (op.state, op.approval_expires_at, op.job_type_version) == (
        State.AWAITING_APPROVAL,
        clock() + 600_000,
        1,
    )
    assert engine.claim_next("t1", "w1") is None


def test_schema_patterns_are_checked_when_declared(engine):
    """An invalid pattern, or one an automaton cannot decide in linear time, is refused at the
    PUT (naming where it is), never accepted to fail at enqueue."""
    cat = engine.catalogue
    for schema, where in (
        ({"properties": {"code": {"type": "string", "pattern": "("}}}, "#/properties/code/pattern"),
        ({"patternProperties": {"(": {}}}, "#/patternProperties/("),
        ({"items": {"pattern": "(a)\\1"}}, "backreferences"),
        ({"propertyNames": {"pattern": "(?<!x)y"}}, "lookahead or lookbehind"),
        ({"definitions": {"d": {"pattern": "(?i)x"}}, "$ref": "#/definitions/d"}, "inline flags"),
        # A reference may only reach a subschema the check visited (not a const's value).
        ({"const": {"pattern": "(a)\\1"}, "$ref": "#/const"}, "must point to a subschema"),
        ({"properties": {"p": {"$id": "x", "pattern": "a"}}}, "$id below the root"),
    ):
        with pytest.raises(InvalidInput, match=re.escape(where)):
            cat.put("t1", "refund", {**REFUND, "payload_schema": schema})
    with pytest.raises(NotFound):
        cat.get("t1", "refund")  # nothing was written


def test_a_catastrophic_schema_pattern_costs_microseconds(engine):
    """^(a+)+$ took Python's re 1.7-3.3 s per enqueue on 25 characters (in the API function
    every tenant shares): as a property's pattern, a property name pattern or a referenced one."""
    schema = {
        "type": "object",
        "definitions": {"bad": {"type": "string", "pattern": "^(a+)+$"}},
        "properties": {"code": {"$ref": "#/definitions/bad"}},
        "patternProperties": {"^(b+)+$": {"type": "integer"}},
    }
    engine.catalogue.put("t1", "refund", {**REFUND, "payload_schema": schema})
    admit = engine.catalogue.admit
    started = time.perf_counter()
    with pytest.raises(InvalidInput, match=re.escape("must match pattern ^(a+)+$")):
        admit("t1", "refund", payload={"code": "a" * 25 + "!"}, payload_given=True)
    with pytest.raises(InvalidInput, match="must be integer"):
        admit("t1", "refund", payload={"b" * 25: "x"}, payload_given=True)
    assert admit("t1", "refund", payload={"code": "a" * 25, "b" * 24 + "!": "x"}, payload_given=True)
    assert time.perf_counter() - started < 0.5


def test_a_long_string_under_the_email_format_costs_milliseconds(engine):
    """The email format's own expression backtracks quadratically (40,000 characters: seconds)."""
    schema = {"type": "object", "properties": {"to": {"type": "string", "format": "email"}}}
    engine.catalogue.put("t1", "mail", {**REFUND, "payload_schema": schema})
    admit = engine.catalogue.admit
    started = time.perf_counter()
    with pytest.raises(InvalidInput, match="must be email"):
        admit("t1", "mail", payload={"to": "a" + "." * 40_000}, payload_given=True)
    assert time.perf_counter() - started < 0.5
    assert admit("t1", "mail", payload={"to": "ops@b.example"}, payload_given=True)
    with pytest.raises(InvalidInput, match="must be email"):
        admit("t1", "mail", payload={"to": "o..ps@b.example"}, payload_given=True)


def test_a_schema_never_answers_an_enqueue_with_an_error_of_its_own(engine):
    """Whatever the tenant's schema or the payload, an admission either passes or is
    InvalidInput (422): a payload deeper than Python's recursion under a recursive schema, and an
    entry stored before patterns were checked (a backreference), included."""
    node = {"type": "array", "items": {"$ref": "#/definitions/n"}}
    recursive = {"$ref": "#/definitions/n", "definitions": {"n": node}}
    engine.catalogue.put("t1", "tree", {**REFUND, "payload_schema": recursive})
    deep: list = []
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(InvalidInput, match="could not be checked"):
        engine.catalogue.admit("t1", "tree", payload=deep, payload_given=True)
    legacy = JobTypeSpec(target_class=TargetClass.C, max_attempts=3, payload_schema={"pattern": "^(a)\\1$"})
    engine.catalogue.put("t1", "legacy", legacy)  # a spec object skips the checks, as old code did
    with pytest.raises(InvalidInput, match="backreferences"):
        engine.catalogue.admit("t1", "legacy", payload="aa", payload_given=True)
