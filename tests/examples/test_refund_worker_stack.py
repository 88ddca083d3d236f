"""examples/refund_worker's CDK stack, synthesized once (offline, with a pre-built core layer, no
cdk-nag: the construct's own tests run it): the worker runs the example's handlers with the
refunds table's name, may write that table and nothing else of it, and the catalogue declares
``refund`` as class B."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.examples import example_on_path
from tests.support.infra import actions_by_resource, resources, role_statements
from tests.support.layer import prebuilt_layer

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

example_on_path("refund_worker")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> dict:
    from aws_cdk import App
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk.assertions import Template
    from refund_worker_stack import RefundWorkerStack

    layer = prebuilt_layer(tmp_path_factory.mktemp("core-layer"))
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = RefundWorkerStack(
        app,
        "RefundWorker",
        jwt_issuer="https://idp.example.com/",
        jwt_audience=["leasefence"],
        core_layer=lambda_.Code.from_asset(str(layer)),
    )
    return Template.from_stack(stack).to_json()


def _worker(template: dict) -> tuple[str, dict]:
    functions = resources(template, "AWS::Lambda::Function")
    found = [
        (lid, fn)
        for lid, fn in functions.items()
        if "LEASEFENCE_WORKER_HANDLERS" in fn["Properties"]["Environment"]["Variables"]
    ]
    assert len(found) == 1
    return found[0]


def test_the_worker_runs_the_example_handlers_against_the_refunds_table(template):
    _, worker = _worker(template)
    variables = worker["Properties"]["Environment"]["Variables"]
    assert variables["LEASEFENCE_WORKER_HANDLERS"] == "refund_worker.jobs:HANDLERS"
    assert variables["LEASEFENCE_WORKER_TENANTS"] == "acme"
    (refunds_lid,) = [
        lid
        for lid, table in resources(template, "AWS::DynamoDB::GlobalTable").items()
        if table["Properties"]["KeySchema"] == [{"AttributeName": "account", "KeyType": "HASH"}]
    ]
    assert variables["REFUNDS_TABLE"] == {"Ref": refunds_lid}


def test_the_worker_may_update_and_read_the_refunds_table_only(template):
    _, worker = _worker(template)
    role = worker["Properties"]["Role"]["Fn::GetAtt"][0]
    on_refunds = {
        action
        for actions, resource in actions_by_resource(role_statements(template, role), "dynamodb:")
        if "Refunds" in json.dumps(resource)
        for action in actions
    }
    assert on_refunds == {"dynamodb:UpdateItem", "dynamodb:GetItem"}


def test_the_catalogue_declares_refund_as_class_b(template):
    catalogues = [
        json.dumps(props["Properties"])
        for props in template["Resources"].values()
        if props["Type"].startswith("Custom::") and "refund" in json.dumps(props["Properties"])
    ]
    assert len(catalogues) == 1
    declared = json.loads(json.loads(catalogues[0])["Catalogues"])
    assert declared == {"acme": {"job_types": {"refund": {"max_attempts": 3, "target_class": "B"}}}}
