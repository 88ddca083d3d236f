"""``LeaseFenceServiceProps``: validated defaults, clear refusals, keyword and object forms, and the
README's props table generated from its field docstrings."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from leasefence_infra import LeaseFenceService, LeaseFenceServiceProps, WorkerProps
from leasefence_infra.props_doc import BEGIN, END, field_docs, replace_table
from leasefence_infra.worker_props import WorkerProps

ROOT = Path(__file__).resolve().parents[2]
ISSUER = {"jwt_issuer": "https://idp.example.com/", "jwt_audience": ["leasefence"]}


def test_defaults_are_valid_and_documented() -> None:
    props = LeaseFenceServiceProps(**ISSUER)
    assert props.jwt_audience == ("leasefence",)  # normalized, the caller's list is not kept
    assert props.log_level == "WARNING" and props.removal_policy == RemovalPolicy.RETAIN
    # Cost-aware observability (issue 24): no INFO lines, no platform lines, no traces.
    assert props.system_log_level is None and props.tracing is False
    assert props.deletion_protection is True and props.table is None and props.worker is None
    assert props.log_retention == logs.RetentionDays.ONE_MONTH
    assert props.oldest_unknown_alarm_age.to_seconds() == 3600
    assert props.tags == {} and props.client_tenants == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        props.log_level = "DEBUG"  # type: ignore[misc]


def test_log_level_is_normalized() -> None:
    assert LeaseFenceServiceProps(**ISSUER, log_level="debug").log_level == "DEBUG"
    assert LeaseFenceServiceProps(**ISSUER, system_log_level="warn").system_log_level == "WARN"


ISSUER_KW: dict[str, Any] = dict(ISSUER)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({}, ValueError, "exactly one of jwt_issuer .* got none"),
        ({"jwt_issuer": "https://x/"}, ValueError, "jwt_issuer needs jwt_audience"),
        ({"jwt_issuer": "http://x/", "jwt_audience": ["a"]}, ValueError, "https:// URL"),
        ({"jwt_issuer": "https://x/", "jwt_audience": "a"}, TypeError, "list of audiences"),
        ({"create_user_pool": True}, ValueError, "user_pool_domain_prefix"),
        ({"create_user_pool": True, "user_pool_domain_prefix": "Bad_Prefix"}, ValueError, "lowercase"),
        ({"create_user_pool": True, "user_pool_domain_prefix": "p", **ISSUER_KW}, ValueError,
         "got jwt_issuer, create_user_pool"),
        ({**ISSUER_KW, "user_pool_domain_prefix": "p"}, ValueError, "needs create_user_pool"),
        ({**ISSUER_KW, "client_tenants": {"c": "t"}}, ValueError, "client_tenants"),
        ({**ISSUER_KW, "due_shards": 0}, ValueError, "due_shards must be a whole number from 1 to 100"),
        ({**ISSUER_KW, "sweep_shards": 101}, ValueError, "sweep_shards"),
        ({**ISSUER_KW, "due_shards": True}, ValueError, "due_shards"),
        ({**ISSUER_KW, "operation_shards": ()}, ValueError, "operation_shards must be a tuple"),
        ({**ISSUER_KW, "operation_shards": (16, 16)}, ValueError, "operation_shards"),
        ({**ISSUER_KW, "operation_shards": (257,)}, ValueError, "from 1 to 256"),
        ({**ISSUER_KW, "operation_shards": 16}, ValueError, "operation_shards"),
        ({**ISSUER_KW, "payload_retention_days": -1}, ValueError, "payload_retention_days"),
        ({**ISSUER_KW, "fence_epoch": -1}, ValueError, "fence_epoch"),
        ({**ISSUER_KW, "fence_epoch": 9_007_199}, ValueError, "fence_epoch"),
        ({**ISSUER_KW, "identity_retention_days": 10}, ValueError, "at least payload_retention_days"),
        ({**ISSUER_KW, "log_level": "LOUD"}, ValueError, "log_level must be one of"),
        ({**ISSUER_KW, "system_log_level": "WARNING"}, ValueError, "system_log_level must be one of"),
        ({**ISSUER_KW, "system_log_level": 3}, TypeError, "system_log_level must be a string"),
        ({**ISSUER_KW, "tracing": "yes"}, TypeError, "tracing must be True or False"),
        ({**ISSUER_KW, "log_retention": 30}, TypeError, "RetentionDays"),
        ({**ISSUER_KW, "metrics_namespace": "AWS/Lambda"}, ValueError, "namespace"),
        ({**ISSUER_KW, "metrics_namespace": "a$b"}, ValueError, "namespace"),
        ({**ISSUER_KW, "api_memory_mb": 64}, ValueError, "api_memory_mb"),
        ({**ISSUER_KW, "throttling_rate_limit": 0}, ValueError, "throttling_rate_limit"),
        ({**ISSUER_KW, "takeover_alarm_percent": 150}, ValueError, "takeover_alarm_percent"),
        ({**ISSUER_KW, "oldest_due_alarm_age": Duration.seconds(10)}, ValueError, "at least one minute"),
        ({**ISSUER_KW, "quarantine_alarm_threshold": 0}, ValueError, "quarantine_alarm_threshold"),
        ({**ISSUER_KW, "removal_policy": "destroy"}, TypeError, "RemovalPolicy"),
        ({**ISSUER_KW, "table": "leasefence-operations"}, TypeError, "table must be an aws_dynamodb.ITable"),
        ({**ISSUER_KW, "payload_bucket": "my-bucket"}, TypeError, "payload_bucket must be an aws_s3.IBucket"),
        ({**ISSUER_KW, "alarm_topic": "arn:aws:sns:::t"}, TypeError, "alarm_topic must be an aws_sns.ITopic"),
        ({**ISSUER_KW, "authorizer": "jwt"}, ValueError, "exactly one of"),
        ({**ISSUER_KW, "tags": {"aws:owner": "x"}}, ValueError, "may not start with aws:"),
        ({**ISSUER_KW, "tags": {"team": "a#b"}}, ValueError, "tag 'team'"),
        ({**ISSUER_KW, "worker": WorkerProps(handlers="worker.demo_handlers:HANDLERS", tenants=[])},
         ValueError, "at least one tenant"),
    ],
)
def test_invalid_props_are_refused_with_a_clear_message(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        LeaseFenceServiceProps(**kwargs)


def _stack() -> Stack:
    return Stack(App(), "Props")


def test_brought_in_resources_refuse_the_options_of_created_ones() -> None:
    stack = _stack()
    table = dynamodb.Table.from_table_attributes(
        stack, "T", table_name="ops",
        table_stream_arn="arn:aws:dynamodb:eu-west-1:111122223333:table/ops/stream/2026-01-01T00:00:00.000")
    from aws_cdk import aws_s3 as s3

    bucket = s3.Bucket.from_bucket_name(stack, "B", "payloads")
    with pytest.raises(ValueError, match="set them on the table you bring"):
        LeaseFenceServiceProps(**ISSUER, table=table, table_name="x")
    with pytest.raises(ValueError, match="set them on the table you bring"):
        LeaseFenceServiceProps(**ISSUER, table=table, deletion_protection=False)
    with pytest.raises(ValueError, match="bucket you bring"):
        LeaseFenceServiceProps(**ISSUER, payload_bucket=bucket, server_access_logs_bucket=bucket)
    props = LeaseFenceServiceProps(**ISSUER, table=table, payload_bucket=bucket)
    assert props.table is table and props.payload_bucket is bucket


def test_service_takes_keywords_a_props_object_or_both(prebuilt_layer: Path) -> None:
    layer = lambda_.Code.from_asset(str(prebuilt_layer))
    base = LeaseFenceServiceProps(**ISSUER, log_level="DEBUG", core_layer=layer)
    stack = _stack()
    by_object = LeaseFenceService(stack, "A", base)
    assert by_object.props is base
    both = LeaseFenceService(stack, "B", base, log_level="ERROR", due_shards=8)
    assert both.props.log_level == "ERROR" and both.props.due_shards == 8
    assert both.props.jwt_issuer == ISSUER["jwt_issuer"] and base.log_level == "DEBUG"
    by_keywords = LeaseFenceService(stack, "C", **ISSUER, core_layer=layer)
    assert by_keywords.props == LeaseFenceServiceProps(**ISSUER, core_layer=layer)


def test_unknown_keyword_is_a_type_error_that_names_it() -> None:
    stack = _stack()
    with pytest.raises(TypeError, match=r"unknown keyword argument\(s\) 'log_levle' \(did you mean 'log_level'\?\)"):
        LeaseFenceService(stack, "Jobs", **ISSUER, log_levle="DEBUG")
    with pytest.raises(TypeError, match="'frobnicate'"):
        LeaseFenceService(stack, "Jobs2", **ISSUER, frobnicate=True)
    with pytest.raises(TypeError, match="props must be a LeaseFenceServiceProps"):
        LeaseFenceService(stack, "Jobs3", {"jwt_issuer": "https://x/"})  # type: ignore[arg-type]
    assert stack.node.try_find_child("Jobs") is None  # refused before anything was added


# ----------------------------------------------------------------------------- README props table


@pytest.mark.parametrize("cls", [LeaseFenceServiceProps, WorkerProps])
def test_every_field_has_a_docstring(cls: type) -> None:
    docs = field_docs(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    assert [n for n in names if len(docs.get(n, "")) < 20] == []
    assert set(docs) == set(names)


def test_readme_props_table_is_generated_from_the_dataclass() -> None:
    """The docs site's construct props page holds exactly the table props_doc generates
    (regenerate it with LEASEFENCE_UPDATE_DOCS=1, or make docs, after changing a field)."""
    readme = ROOT / "docs" / "reference" / "construct-props.md"
    text = readme.read_text()
    import os

    if os.environ.get("LEASEFENCE_UPDATE_DOCS") == "1":
        readme.write_text(replace_table(text))
        text = readme.read_text()
    assert replace_table(text) == text, f"{readme}'s props table drifted: run with LEASEFENCE_UPDATE_DOCS=1"
    table = text.split(BEGIN)[1].split(END)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    names = [f.name for f in dataclasses.fields(LeaseFenceServiceProps)]
    assert [re.match(r"\| `(\w+)`", r).group(1) for r in rows] == names
    assert "| `log_level` | `str` | `'WARNING'` |" in table
    assert "| `tracing` | `bool` | `False` |" in table
    assert "| `removal_policy` | `RemovalPolicy` | `RemovalPolicy.RETAIN` |" in table

