"""The deployment's initial job-type catalogue (``LeaseFenceServiceProps.job_types``): a custom
resource backed by a small function that declares the listed entries with the engine's own code
(:func:`functions.catalogue.handler.apply_catalogues`, ``Catalogue.apply`` without pruning).

The function may only read and conditionally update items of the listed tenants
(``dynamodb:LeadingKeys``): their catalogue entries and settings. No index, no delete, no other
tenant. CloudFormation invokes it with the deploying role's credentials (no resource policy).

CloudFormation always gets an answer: the handler imports ``leasefence`` inside its ``try`` and
answers FAILED before its own timeout (``functions/catalogue/handler.py``), and the custom
resource's ``ServiceTimeout`` (:data:`SERVICE_TIMEOUT`, not CloudFormation's default hour) fails
the deploy when the function never answers at all (never started, throttled, its code missing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from aws_cdk import CustomResource, Duration
from aws_cdk import aws_iam as iam
from constructs import Construct

from .function import FunctionRuntime, ServiceFunction
from .storage import Storage

CATALOGUE_HANDLER = "catalogue.handler.lambda_handler"
#: Read an entry, declare it (one conditional update), list a tenant's entries (a Query of its
#: partition), read and set its strict mode.
CATALOGUE_TABLE_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query")
RESOURCE_TYPE = "Custom::LeaseFenceJobTypes"
#: The function's timeout; its handler answers FAILED 35 s before it when the work hangs.
FUNCTION_TIMEOUT = Duration.minutes(2)
#: How long CloudFormation waits for an answer (default: one hour): two attempts of the function
#: (Lambda retries a failed asynchronous invocation once a minute or so) and a margin.
SERVICE_TIMEOUT = Duration.minutes(6)


class InitialCatalogue(Construct):
    """``Function`` and the custom resource ``JobTypes`` that runs it on every change of the prop."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        catalogues: Mapping[str, Mapping[str, Any]],
        runtime: FunctionRuntime,
        storage: Storage,
        environment: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.function = ServiceFunction(
            self,
            "Function",
            # Runs only during deploys: nothing to gain from SnapStart, so no version or alias.
            runtime=replace(runtime, snap_start=False),
            handler=CATALOGUE_HANDLER,
            description="leasefence initial job-type catalogue (custom resource)",
            environment=environment,
            memory_mb=256,
            timeout=FUNCTION_TIMEOUT,
        )
        self.function.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListedTenantsCatalogue",
                actions=list(CATALOGUE_TABLE_ACTIONS),
                resources=[storage.table.table_arn],
                conditions={
                    "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": sorted(catalogues)}
                },
            )
        )
        storage.grant_table_key(self.function.role)
        self.resource = CustomResource(
            self,
            "JobTypes",
            service_token=self.function.target.function_arn,
            resource_type=RESOURCE_TYPE,
            service_timeout=SERVICE_TIMEOUT,
            # A change of the prop is a change of this property: CloudFormation sends an Update.
            properties={
                "Catalogues": json.dumps(catalogues, sort_keys=True, separators=(",", ":"))
            },
        )
