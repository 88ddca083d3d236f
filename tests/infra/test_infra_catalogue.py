"""The initial job-type catalogue prop: its custom resource, its function's narrow permissions,
synth-time checks, and the function's handler against the engine."""

from __future__ import annotations

import http.server
import importlib.util
import json
import random
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.support.infra import getatt, logical_id, props, resources, role_statements

from leasefence import Engine
from leasefence.clock import ManualClock
from leasefence_tools.local.server import LambdaContext, load_function
from leasefence_infra import LeaseFenceServiceProps
from leasefence_infra.catalogue import (
    CATALOGUE_TABLE_ACTIONS,
    FUNCTION_TIMEOUT,
    RESOURCE_TYPE,
    SERVICE_TIMEOUT,
)

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


# ----------------------------------------------------------------------------- always an answer

HANDLER_FILE = Path(__file__).resolve().parents[2] / "functions" / "catalogue" / "handler.py"


class _Answers(http.server.BaseHTTPRequestHandler):
    """CloudFormation's presigned response URL: records every PUT body."""

    received: list[dict] = []

    def do_PUT(self) -> None:  # noqa: N802 - the http.server name
        length = int(self.headers.get("Content-Length") or 0)
        type(self).received.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_args) -> None:
        return


@pytest.fixture
def response_url():
    """A local stand-in for the presigned S3 URL; yields (url, answers received)."""
    received: list[dict] = []
    handler = type("Answers", (_Answers,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/answer", received
    finally:
        server.shutdown()
        server.server_close()


def _fresh_handler():
    """The handler module loaded from its file as Lambda would (a new module object each time)."""
    spec = importlib.util.spec_from_file_location(f"catalogue_handler_{time.monotonic_ns()}", HANDLER_FILE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _event(url: str, request_type: str = "Create") -> dict:
    return {
        "RequestType": request_type, "ResponseURL": url, "StackId": "stack", "RequestId": "req",
        "LogicalResourceId": "JobTypes",
        "ResourceProperties": {"Catalogues": json.dumps({"acme": {"job_types": {"x": {"target_class": "C"}}}})},
    }


def test_an_import_failure_answers_failed_instead_of_hanging_the_deploy(response_url, monkeypatch) -> None:
    """A broken core layer (leasefence not importable) still answers CloudFormation: FAILED, with
    the reason, rather than a function that dies before its handler runs (an hour's wait)."""
    url, received = response_url
    monkeypatch.setitem(sys.modules, "leasefence.settings", None)  # import of it now fails
    monkeypatch.setitem(sys.modules, "leasefence.observability", None)
    handler = _fresh_handler()
    handler.lambda_handler(_event(url), LambdaContext("catalogue", 120_000))
    ((answer,),) = [received]
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("ModuleNotFoundError") or answer["Reason"].startswith("ImportError")
    assert answer["PhysicalResourceId"] == handler.PHYSICAL_ID
    assert (answer["StackId"], answer["RequestId"], answer["LogicalResourceId"]) == ("stack", "req", "JobTypes")


def test_work_that_hangs_answers_failed_before_the_function_times_out(response_url, monkeypatch) -> None:
    url, received = response_url
    handler = _fresh_handler()
    release = threading.Event()

    def stuck_runtime():
        release.wait(8)  # a table that never answers (released at the end of the test)
        raise RuntimeError("released")

    monkeypatch.setattr(handler, "runtime", stuck_runtime)
    # 1.5 s of the invocation left once the answer's margin is kept.
    context = LambdaContext("catalogue", handler.ANSWER_MARGIN_MS + 1_500)
    started = time.monotonic()
    try:
        handler.lambda_handler(_event(url, "Update"), context)
    finally:
        release.set()
    elapsed = time.monotonic() - started
    ((answer,),) = [received]
    assert answer["Status"] == "FAILED" and answer["Reason"].startswith("timed out"), answer
    assert elapsed < 4, elapsed  # answered within the budget, not when the work gave up


def test_delete_answers_success_without_importing_the_engine(response_url, monkeypatch) -> None:
    url, received = response_url
    monkeypatch.setitem(sys.modules, "leasefence.settings", None)
    _fresh_handler().lambda_handler(_event(url, "Delete"), LambdaContext("catalogue", 120_000))
    assert [a["Status"] for a in received] == ["SUCCESS"]  # a rollback is never blocked by the layer


def test_cloudformation_waits_minutes_not_an_hour_for_an_answer(synth) -> None:
    """ServiceTimeout: CloudFormation fails the resource itself when the function never answers
    (it could not start at all); longer than the function's attempts, far shorter than 1 h."""
    ((_, resource),) = resources(synth.template_json("full"), RESOURCE_TYPE).items()
    service_timeout = int(resource["Properties"]["ServiceTimeout"])
    assert service_timeout == SERVICE_TIMEOUT.to_seconds() <= 600
    assert service_timeout > 2 * FUNCTION_TIMEOUT.to_seconds()
    function = props(synth.template_json("full"), logical_id(synth.stacks["full"],
                                                            synth.stacks["full"].service.catalogue.function.function))
    assert function["Timeout"] == FUNCTION_TIMEOUT.to_seconds()
