"""The tenant-isolation role's ``dynamodb:LeadingKeys`` conditions, read from the synthesized
template and evaluated as IAM does (``ForAllValues:StringLike``/``StringEquals`` on the session
tag): a tenant's token reaches its bare partition, every one of its write shards and its due
partitions, and none of another tenant's keys, whatever characters the other tenant's id holds."""

from __future__ import annotations

import re

import pytest

from leasefence import keys, schema
from leasefence.errors import InvalidInput
from leasefence.validation import validate_id
from tests.support.infra import getatt, index_arn, logical_id, role_statements, service_of

TAG = "${aws:PrincipalTag/tenant_id}"
# Session tag values (the tenants a token can name): letters, digits, spaces and _.:/=+-@.
TOKEN_TENANTS = ["a", "ab", "a.b", "a:1", "a-1", "a 1", "a@x", "A", "acme"]
# Tenants of the table that no token of tenant "a" may reach, '#' and '\\' included (ids the
# engine accepts; tenant isolation cannot name them, but they may share the table).
OTHER_TENANTS = ["ab", "a.b", "a#1", "a#", "a\\", "a*", "a?", "b", " a", "A", "a:1"]


def _iam_like(pattern: str, value: str) -> bool:
    """IAM's StringLike: ``*`` any run of characters, ``?`` one, everything else literal."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def _allows(statement: dict, tenant: str, leading_keys: list[str]) -> bool:
    """Whether the statement's LeadingKeys condition admits every key of the request for a
    session tagged with ``tenant``."""
    ((operator, condition),) = statement["Condition"].items()
    patterns = [p.replace(TAG, tenant) for p in condition["dynamodb:LeadingKeys"]]
    assert operator in ("ForAllValues:StringLike", "ForAllValues:StringEquals")
    like = operator.endswith("StringLike")
    return all(
        any(_iam_like(p, key) if like else p == key for p in patterns) for key in leading_keys
    )


@pytest.fixture(scope="module")
def tenant_statements(synth):
    stack, svc, tpl = service_of(synth, "full")
    table = logical_id(stack, svc.table)
    statements = {
        s.get("Sid"): s for s in role_statements(tpl, logical_id(stack, svc.api.tenant_role))
    }
    assert statements["OwnTenantItems"]["Resource"] == getatt(table)
    assert statements["OwnTenantDueShards"]["Resource"] == index_arn(table, schema.DUE_INDEX)
    return statements["OwnTenantItems"], statements["OwnTenantDueShards"]


def _table_keys(tenant: str) -> list[str]:
    """Every partition key of the tenant's items: its bare id and every write shard."""
    return keys.tenant_partitions(tenant, (schema.MAX_OPERATION_SHARDS,))


def test_a_token_reaches_its_own_bare_partition_and_every_write_shard(tenant_statements):
    table, due = tenant_statements
    for tenant in TOKEN_TENANTS:
        own = _table_keys(tenant)
        assert own[0] == tenant and len(own) == schema.MAX_OPERATION_SHARDS
        assert _allows(table, tenant, own)
        # ... and one key at a time (a GetItem of one operation, a Query of one shard).
        assert all(_allows(table, tenant, [k]) for k in own)
        assert _allows(due, tenant, [keys.due_partition(tenant, s, "refund") for s in range(64)])


def test_a_token_reaches_no_key_of_another_tenant(tenant_statements):
    table, due = tenant_statements
    for tenant in TOKEN_TENANTS:
        for other in OTHER_TENANTS:
            if other == tenant:
                continue
            validate_id("tenant_id", other)  # a tenant the engine accepts
            for key in _table_keys(other):
                assert not _allows(table, tenant, [key]), (tenant, other, key)
                assert not _allows(table, tenant, [tenant, key]), (tenant, other, key)
            for shard in (0, 3):
                assert not _allows(due, tenant, [keys.due_partition(other, shard, "refund")])


def test_a_write_shard_key_is_never_an_id_a_tenant_can_have():
    for tenant in TOKEN_TENANTS + OTHER_TENANTS:
        for key in _table_keys(tenant)[1:]:
            assert keys.SHARD_MARK in key
            with pytest.raises(InvalidInput):
                validate_id("tenant_id", key)


def test_the_write_count_reaches_every_engine_function_only_when_set():
    from leasefence.settings import Settings
    from leasefence_infra.environment import RESERVED_ENV, shared_environment

    def env(counts):
        return shared_environment(
            table_name="t",
            bucket_name="b",
            due_shards=4,
            sweep_shards=4,
            log_hash_secret_arn="arn",
            identity_retention_days=400,
            payload_retention_days=30,
            fence_epoch=0,
            metrics_namespace="n",
            powertools_log_level="INFO",
            operation_shards=counts,
        )

    # Not set (the default): no variable, and each tenant's counts are recorded by the engine.
    assert "LEASEFENCE_OPERATION_SHARDS" not in env(None)
    assert Settings.from_env(env(None)).table_spec.operation_shards is None
    assert env((1,))["LEASEFENCE_OPERATION_SHARDS"] == "1"  # set: every tenant one write shard
    assert Settings.from_env(env((1,))).table_spec.operation_shards == (1,)
    grown = env((16, 1))
    assert grown["LEASEFENCE_OPERATION_SHARDS"] == "16,1"
    assert Settings.from_env(grown).table_spec.operation_shards == (16, 1)
    assert "LEASEFENCE_OPERATION_SHARDS" in RESERVED_ENV  # a worker's own env cannot change it


def test_packing_is_the_engines_default_and_turned_off_only_where_the_props_say_so():
    from leasefence.settings import Settings
    from leasefence_infra.environment import RESERVED_ENV, shared_environment

    def env(pack):
        return shared_environment(
            table_name="t", bucket_name="b", due_shards=4, sweep_shards=4,
            log_hash_secret_arn="arn", identity_retention_days=400, payload_retention_days=30,
            fence_epoch=0, metrics_namespace="n", powertools_log_level="INFO", pack_payloads=pack,
        )  # fmt: skip

    assert "LEASEFENCE_PACK_PAYLOADS" not in env(True)  # a default stack's template: unchanged
    assert Settings.from_env(env(True)).engine_options["pack_payloads"] is True
    assert env(False)["LEASEFENCE_PACK_PAYLOADS"] == "false"
    assert Settings.from_env(env(False)).engine_options["pack_payloads"] is False
    assert "LEASEFENCE_PACK_PAYLOADS" in RESERVED_ENV
    with pytest.raises(ValueError, match="LEASEFENCE_PACK_PAYLOADS"):
        Settings.from_env({"LEASEFENCE_PACK_PAYLOADS": "off"})
    # The app's context: -c packPayloads=false reaches the props (on by default).
    from leasefence_infra import service_props_from_context

    base = {"allowPlaceholderIssuer": "true"}
    assert service_props_from_context(base)["pack_payloads"] is True
    assert service_props_from_context({**base, "packPayloads": "false"})["pack_payloads"] is False
