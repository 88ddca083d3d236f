"""Fixtures for the CDK tests: one synthesized app (two stacks), built once per session.

* ``default`` stack: the example app's composition with ``-c worker=demo``: the construct with
  its defaults (external JWT issuer, AWS-owned table encryption, S3-managed bucket encryption, no
  tenant role, log level INFO, namespace ``LeaseFence/LeaseFenceDefault/LeaseFence``) plus the worker with
  its defaults (demo handlers from ``functions/``, tenant ``demo``).
* ``full`` stack: every option on (Cognito user pool + pre-token trigger, customer-managed KMS
  key, tenant isolation role, server access logs, no deletion protection, 3 due shards, log
  level DEBUG, tags, a 2-minute stream iterator age alarm; a worker
  with its own handler layer, two tenants, a business table under its own KMS key, a fenced
  target table, its own lease, timeout, schedule, memory and environment, and its own stream
  batch size, parallelization and reserved concurrency, two stream readers (its own mapping
  and the publisher's) and the ``invoke`` dispatch mode; SnapStart, so its functions are invoked
  through their ``live`` alias; an initial job-type catalogue for two tenants; the IAM API for
  tenant ``acme``, a caller role granted produce and work on it, an operators' role granted
  tenant erasure).

Both use a pre-built core layer (``LocalLayerBundler`` without pip: the repo's
``layers/leasefence`` minus its dev-only parts, plus the ``rfc8785`` installed in this venv, which
is pure Python) so the session needs no network; ``test_infra_app.py`` runs the real
``infra/app.py`` once, with the real local (pip) bundling.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
if str(INFRA) not in sys.path:
    sys.path.insert(0, str(INFRA))

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")

from aws_cdk import App, Aspects, Duration, RemovalPolicy, Stack  # noqa: E402
from aws_cdk import aws_dynamodb as dynamodb  # noqa: E402
from aws_cdk import aws_iam as iam  # noqa: E402
from aws_cdk import aws_kms as kms  # noqa: E402
from aws_cdk import aws_lambda as lambda_  # noqa: E402
from aws_cdk import aws_s3 as s3  # noqa: E402
from aws_cdk import aws_scheduler as scheduler  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402
from constructs import Construct  # noqa: E402
from leasefence_infra import LeaseFenceService, WorkerProps, package_layer_code  # noqa: E402
from leasefence_infra.stack import DEMO_WORKER_HANDLERS, LeaseFenceStack  # noqa: E402
from tests.support.infra import ORDERS_KEY_ARN  # noqa: E402
from tests.support.layer import prebuilt_layer as build_prebuilt_layer  # noqa: E402

DEFAULT_PROPS = {
    "jwt_issuer": "https://issuer.example.com/",
    "jwt_audience": ["leasefence-api"],
}
#: The example app's worker with ``-c worker=demo`` (``service_props_from_context``).
DEFAULT_WORKER = WorkerProps(handlers=DEMO_WORKER_HANDLERS, tenants=["demo"])
FULL_WORKER_TENANTS = ["acme", "globex"]
FULL_PROPS_BASE = {
    "create_user_pool": True,
    "user_pool_domain_prefix": "leasefence-test",
    "create_encryption_key": True,
    "tenant_isolation": True,
    "deletion_protection": False,
    "removal_policy": RemovalPolicy.DESTROY,
    "payload_retention_days": 7,
    "identity_retention_days": None,
    "due_shards": 3,
    "sweep_shards": 2,
    "log_level": "DEBUG",
    "tracing": True,
    "tags": {"team": "payments", "cost-center": "42"},
    "stream_iterator_age_alarm_age": Duration.minutes(2),
    "job_types": {
        "acme": {
            "strict_job_types": True,
            "job_types": {
                "refund": {"target_class": "B", "max_attempts": 3, "owner": "payments",
                           "runbook_url": "https://runbooks.example/refund"},
            },
        },
        "globex": {"job_types": {"email": {"target_class": "C"}}},
    },
    "snap_start": True,
    "iam_tenant": "acme",
    "events": True,
    "dashboard": True,
}


def cdk_json_context() -> dict:
    return dict(json.loads((ROOT / "cdk.json").read_text())["context"])


class FullStack(Stack):
    """Every option of the construct on, with stand-ins for what a consuming app would own."""

    def __init__(self, scope: Construct, construct_id: str, *, core_layer: lambda_.Code,
                 worker_package: Path) -> None:
        super().__init__(scope, construct_id)
        access_logs = s3.Bucket.from_bucket_name(self, "AccessLogs", "leasefence-test-access-logs")
        tenant_claims = lambda_.Function.from_function_attributes(
            self,
            "TenantClaimsTrigger",
            function_arn=f"arn:{self.partition}:lambda:{self.region}:{self.account}:function:tenant-claims",
            same_environment=True,
        )
        # A consumer's class A table (under its own key) and class B target table.
        self.orders_table = dynamodb.Table.from_table_attributes(
            self, "Orders", table_name="acme-orders",
            encryption_key=kms.Key.from_key_arn(self, "OrdersKey", ORDERS_KEY_ARN),
        )
        self.ledger_table = dynamodb.Table.from_table_name(self, "Ledger", "acme-ledger")
        self.worker = WorkerProps(
            handlers="acme_jobs.jobs:HANDLERS",
            tenants=FULL_WORKER_TENANTS,
            code=package_layer_code(worker_package),
            lease_seconds=120,
            timeout=Duration.minutes(10),
            schedule=scheduler.ScheduleExpression.rate(Duration.minutes(2)),
            business_tables=[self.orders_table],
            fenced_tables=[self.ledger_table],
            environment={"ACME_ORDERS_TABLE": "acme-orders", "ACME_LEDGER_TABLE": "acme-ledger"},
            memory_mb=1024,
            lost_ownership_alarm_threshold=3,
            stream_batch_size=25,
            stream_parallelization=5,
            max_concurrency=50,
            # The worker's and the publisher's mappings side by side, jobs handed to invocations.
            stream_readers=2,
            stream_dispatch="invoke",
        )
        self.service = LeaseFenceService(
            self,
            "LeaseFence",
            **FULL_PROPS_BASE,
            server_access_logs_bucket=access_logs,
            pre_token_generation=tenant_claims,
            core_layer=core_layer,
            worker=self.worker,
        )
        # Callers inside AWS: a billing service that enqueues and works over the IAM API, and the
        # operators' role that may erase a tenant.
        self.billing_role = iam.Role(self, "BillingService", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        self.service.grant_enqueue(self.billing_role)
        self.service.grant_work(self.billing_role)
        self.operator_role = iam.Role(self, "Operators", assumed_by=iam.AccountRootPrincipal())
        self.service.grant_erase_tenant(self.operator_role)


@dataclass
class Synth:
    app: App
    stacks: dict[str, Stack]
    templates: dict[str, Template]
    outdir: Path

    def template_json(self, name: str) -> dict:
        return self.templates[name].to_json()

    def template_path(self, name: str) -> Path:
        return self.outdir / self.stacks[name].template_file


@pytest.fixture(scope="session")
def prebuilt_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The core layer tree without pip: the real bundler's copy of the package (same exclusions),
    plus the venv's rfc8785 where pip would have put the wheel."""
    return build_prebuilt_layer(tmp_path_factory.mktemp("core-layer"))


@pytest.fixture(scope="session")
def worker_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A consumer's handler package (``acme_jobs``), shipped by the full stack's worker."""
    pkg = tmp_path_factory.mktemp("acme-src") / "acme_jobs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "jobs.py").write_text("HANDLERS = {}\n")
    return pkg


@pytest.fixture(scope="module", params=["default", "full"])
def variant(request: pytest.FixtureRequest, synth: Synth) -> tuple[str, Stack, LeaseFenceService, dict]:
    """Each test stack in turn: (name, stack, its service, its template)."""
    stack = synth.stacks[request.param]
    return request.param, stack, stack.service, synth.template_json(request.param)


@pytest.fixture(scope="session")
def synth(prebuilt_layer: Path, worker_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(outdir=str(outdir), context=cdk_json_context())
    default = LeaseFenceStack(
        app,
        "LeaseFenceDefault",
        service_props={**DEFAULT_PROPS, "worker": DEFAULT_WORKER,
                       "core_layer": lambda_.Code.from_asset(str(prebuilt_layer))},
    )
    full = FullStack(app, "LeaseFenceFull", core_layer=lambda_.Code.from_asset(str(prebuilt_layer)),
                     worker_package=worker_package)
    stacks = {"default": default, "full": full}
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    templates = {name: Template.from_stack(stack) for name, stack in stacks.items()}
    return Synth(app=app, stacks=stacks, templates=templates, outdir=outdir)
