"""The refund worker's CDK stack: leasefence (``LeaseFenceService``) with its worker function
running ``refund_worker.jobs:HANDLERS``, and the refunds table the handlers write (class B: the
worker's role may ``UpdateItem``/``GetItem`` it and nothing else).

The job type ``refund`` is declared in tenant ``acme``'s catalogue as class B with 3 attempts,
so a producer enqueues it without naming the class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from leasefence_infra import LeaseFenceService, WorkerProps, package_layer_code

#: The handler package the worker ships (its layer: ``python/refund_worker``).
PACKAGE = Path(__file__).resolve().parent / "refund_worker"
TENANT = "acme"
CATALOGUE = {
    TENANT: {"job_types": {"refund": {"target_class": "B", "max_attempts": 3}}},
}


class RefundWorkerStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        jwt_issuer: str,
        jwt_audience: list[str],
        core_layer: lambda_.Code | None = None,
        **stack_kwargs: Any,
    ) -> None:
        """``core_layer``: a pre-built core layer (default: built at synth, as ``make synth``
        builds it)."""
        super().__init__(scope, construct_id, **stack_kwargs)
        self.refunds = dynamodb.TableV2(
            self,
            "Refunds",
            partition_key=dynamodb.Attribute(name="account", type=dynamodb.AttributeType.STRING),
            billing=dynamodb.Billing.on_demand(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.service = LeaseFenceService(
            self,
            "LeaseFence",
            jwt_issuer=jwt_issuer,
            jwt_audience=jwt_audience,
            job_types=CATALOGUE,
            core_layer=core_layer,
            worker=WorkerProps(
                handlers="refund_worker.jobs:HANDLERS",
                tenants=[TENANT],
                code=package_layer_code(PACKAGE),
                fenced_tables=[self.refunds],
                environment={"REFUNDS_TABLE": self.refunds.table_name},
            ),
        )
        CfnOutput(self, "ApiUrl", value=self.service.api_url)
        CfnOutput(self, "RefundsTable", value=self.refunds.table_name)
