"""The initial job-type catalogue prop: its custom resource, its function's narrow permissions,
synth-time checks, and the function's handler against the engine."""

from __future__ import annotations

import json
import random

import pytest
from infra_helpers import getatt, logical_id, props, resources, role_statements

from leasefence import Engine
from leasefence.clock import ManualClock
from leasefence.local.server import LambdaContext, load_function
from leasefence_infra import LeaseFenceServiceProps
from leasefence_infra.catalogue import CATALOGUE_TABLE_ACTIONS, RESOURCE_TYPE

BASE = {"jwt_issuer": "https://issuer.example.com/", "jwt_audience": ["a"]}


def test_the_prop_is_one_custom_resource_with_narrow_permissions(synth) -> None:
    stack = synth.stacks["full"]
    svc, tpl = stack.service, synth.template_json("full")
    ((_, resource),) = resources(tpl, RESOURCE_TYPE).items()
    function = logical_id(stack, svc.catalogue.function.function)
    alias = svc.catalogue.function.alias  # the full stack has SnapStart: invoked through its alias
    assert resource["Properties"]["ServiceToken"] == (
        {"Ref": logical_id(stack, alias)} if alias is not None else getatt(function)
    )
    assert json.loads(resource["Properties"]["Catalogues"]) == svc.props.job_types
    assert props(tpl, function)["Handler"] == "catalogue.handler.lambda_handler"
    statements = role_statements(tpl, logical_id(stack, svc.catalogue.function.role))
    dynamodb = [s for s in statements if any(str(a).startswith("dynamodb:") for a in s["Action"])]
    assert dynamodb == [
        {
            "Action": sorted(CATALOGUE_TABLE_ACTIONS),
            "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["acme", "globex"]}},
            "Effect": "Allow",
            "Resource": getatt(logical_id(stack, svc.table)),
            "Sid": "ListedTenantsCatalogue",
        }
    ]
    assert not any(str(a).startswith(("s3:", "secretsmanager:")) for s in statements for a in s["Action"])
    # Without the prop there is nothing of it.
    assert resources(synth.template_json("default"), RESOURCE_TYPE) == {}
    assert synth.stacks["default"].service.catalogue is None


@pytest.mark.parametrize(
    "catalogue",
    [
        {"acme": {"job_types": {"refund": {"target_class": "Z"}}}},
        {"acme": {"job_types": {"refund": {"target_class": "D", "max_attempts": 3}}}},
        {"acme": {"jobtypes": {}}},
        {"": {"job_types": {}}},
    ],
)
def test_a_bad_catalogue_is_refused_at_synth(catalogue) -> None:
    with pytest.raises(ValueError, match="job_types"):
        LeaseFenceServiceProps(**BASE, job_types=catalogue)


def test_the_handler_declares_the_listed_entries_idempotently(aws, spec, monkeypatch) -> None:
    handler = load_function("catalogue")
    engine = Engine(client=aws.client(), spec=spec, clock=ManualClock(), rng=random.Random(1))
    engine.catalogue.put("acme", "kept", {"target_class": "C"})  # not listed: left alone
    catalogues = {
        "acme": {"strict_job_types": True, "job_types": {"refund": {"target_class": "B", "owner": "payments"}}},
        "globex": {"job_types": {"email": {"target_class": "C"}}},
    }
    answers = []
    monkeypatch.setattr(handler, "_respond", lambda _event, status, _reason, data: answers.append((status, data)))
    monkeypatch.setattr(handler, "runtime", lambda: type("R", (), {"engine": engine})())
    event = {
        "RequestType": "Create",
        "ResourceProperties": {"Catalogues": json.dumps(catalogues)},
        "StackId": "s", "RequestId": "r", "LogicalResourceId": "l", "ResponseURL": "https://example.invalid/",
    }
    context = LambdaContext("catalogue", 60_000)
    handler.lambda_handler(event, context)
    handler.lambda_handler({**event, "RequestType": "Update", "PhysicalResourceId": handler.PHYSICAL_ID}, context)
    assert answers == [("SUCCESS", {"Changed": 3, "Tenants": 2}), ("SUCCESS", {"Changed": 0, "Tenants": 2})]
    assert [e.job_type for e in engine.catalogue.list("acme")] == ["kept", "refund"]
    assert engine.catalogue.get("acme", "refund").updated_by == "cloudformation"
    assert engine.catalogue.strict("acme") is True
    handler.lambda_handler({**event, "RequestType": "Delete"}, context)  # removes nothing
    assert len(engine.catalogue.list("acme")) == 2
    bad = {"acme": {"job_types": {"refund": {"target_class": "Z"}}}}
    handler.lambda_handler({**event, "ResourceProperties": {"Catalogues": json.dumps(bad)}}, context)
    assert answers[-1][0] == "FAILED"
