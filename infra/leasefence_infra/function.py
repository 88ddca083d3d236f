"""One function of the service: its log group, its own least-privilege role, the function.

Every function runs Python 3.12 on arm64 with JSON logs in its own log group, one log level that
drives both Powertools and Lambda's log filtering (:data:`LOG_LEVELS`), and active X-Ray tracing
when ``FunctionRuntime.tracing`` (off by default: each recorded trace is billed). With SnapStart
(``FunctionRuntime.snap_start``) a function that runs the core layer publishes a version on each
deploy that changes its code, its configuration or any of its layers (:func:`layers_fingerprint`,
whatever the app's feature flags) and the alias :data:`LIVE_ALIAS` points at it; everything that
invokes it (the API integration, the stream mappings, the schedules) invokes
:attr:`ServiceFunction.target`, the alias, and its asynchronous settings (retries, on-failure
queue) are the alias's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Annotations, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from leasefence import observability_defaults

from .nag import acknowledge
from .versions import powertools_layer_parameter

#: Public SSM parameter naming the AWS-managed Powertools layer (arm64, py3.12) of the locked
#: aws-lambda-powertools version (``versions.py``; ``powertools_layer_parameter("3.x.y")`` for another),
#: used with ``powertools_layer="managed"`` only (:mod:`.powertools`).
POWERTOOLS_LAYER_PARAMETER = powertools_layer_parameter()

_APPLICATION = {
    "DEBUG": lambda_.ApplicationLogLevel.DEBUG,
    "INFO": lambda_.ApplicationLogLevel.INFO,
}
_SYSTEM = {
    "DEBUG": lambda_.SystemLogLevel.DEBUG,
    "INFO": lambda_.SystemLogLevel.INFO,
    "WARN": lambda_.SystemLogLevel.WARN,
}

#: ``log_level`` drives Powertools (POWERTOOLS_LOG_LEVEL) and Lambda's JSON log filtering:
#: name -> (Powertools, application, system) (:mod:`leasefence.observability_defaults`: the
#: application level never goes above INFO, where the metrics' EMF lines are filed; the system
#: level follows unless ``system_log_level`` says otherwise).
LOG_LEVELS: dict[str, tuple[str, lambda_.ApplicationLogLevel, lambda_.SystemLogLevel]] = {
    name: (
        observability_defaults.powertools_log_level(name),
        _APPLICATION[observability_defaults.application_log_level(name)],
        _SYSTEM[observability_defaults.system_log_level(name)],
    )
    for name in observability_defaults.LOG_LEVELS
}

#: The alias every invoker targets when SnapStart is on (SnapStart applies to published versions
#: only: ``$LATEST`` would start cold).
LIVE_ALIAS = "live"

_PINNED_RUNTIME_REASON = (
    "Pinned to python3.12 on purpose: the core layer (with Powertools and pydantic) is built "
    f"for cp312, and so is the AWS-managed Powertools layer of {POWERTOOLS_LAYER_PARAMETER} when "
    "chosen; moving runtimes is a deliberate change of both."
)


@dataclass(frozen=True)
class FunctionRuntime:
    """What every function of one service shares: the handlers' code asset, the layers (core,
    with Powertools unless it comes from its own layer), the log level, and the retention and
    removal policy of its log group."""

    code: lambda_.Code
    layers: tuple[lambda_.ILayerVersion, ...]
    log_level: str
    log_retention: logs.RetentionDays
    removal_policy: RemovalPolicy
    #: Lambda SnapStart on published versions for the functions that run the core layer.
    snap_start: bool = False
    #: Active X-Ray tracing on the functions that run the core layer.
    tracing: bool = observability_defaults.DEFAULT_TRACING
    #: Lambda's system log level (None: as ``log_level`` implies).
    system_log_level: str | None = None

    def powertools_log_level(self) -> str:
        return LOG_LEVELS[self.log_level][0]


def layers_fingerprint(layers: Sequence[lambda_.ILayerVersion]) -> str:
    """A digest of what the layers are: the content (asset hash), runtimes and description of
    each layer built in this app, the ARN (or the token naming it) of each imported one."""
    described = []
    for layer in layers:
        cfn = layer.node.default_child
        stack = Stack.of(layer)
        if isinstance(cfn, lambda_.CfnLayerVersion):
            described.append(
                stack.resolve(
                    {
                        "content": cfn.content,
                        "runtimes": cfn.compatible_runtimes,
                        "architectures": cfn.compatible_architectures,
                        "description": cfn.description,
                    }
                )
            )
        else:
            described.append(stack.resolve(layer.layer_version_arn))
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


class ServiceFunction(Construct):
    """A function with its own log group (``Logs``) and role (``Role``, no managed policy: only
    its log group, X-Ray, and what its concern grants it).

    ``layers=()`` gives a function that uses the standard library only (the Cognito trigger),
    never traced (and without SnapStart: it has nothing worth a snapshot).

    :attr:`target` is what invokers must call: the ``Live`` alias (:data:`LIVE_ALIAS`) with
    SnapStart, the function itself otherwise.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: FunctionRuntime,
        handler: str,
        description: str,
        environment: Mapping[str, str],
        memory_mb: int,
        timeout: Duration,
        layers: Sequence[lambda_.ILayerVersion] | None = None,
        retry_attempts: int | None = None,
        max_event_age: Duration | None = None,
        on_failure: sqs.IQueue | None = None,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        layers = list(runtime.layers if layers is None else layers)
        core = bool(layers)
        traced = core and runtime.tracing
        snap_start = runtime.snap_start and core
        asynchronous: dict[str, object] = {
            "retry_attempts": retry_attempts,
            "max_event_age": max_event_age,
            "on_failure": destinations.SqsDestination(on_failure)
            if on_failure is not None
            else None,
        }
        self.log_group = logs.LogGroup(
            self, "Logs", retention=runtime.log_retention, removal_policy=runtime.removal_policy
        )
        # Own role instead of the default one: no AWSLambdaBasicExecutionRole (logs:* on every
        # log group), only this function's log group.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{description}: least privilege",
        )
        self.log_group.grant_write(self.role)
        _, application_level, _ = LOG_LEVELS[runtime.log_level]
        system_level = _SYSTEM[
            observability_defaults.system_log_level(runtime.log_level, runtime.system_log_level)
        ]
        self.function = lambda_.Function(
            self,
            "Function",
            description=description,
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.ARM_64,
            code=runtime.code,
            handler=handler,
            role=self.role,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            # Lambda drops JSON log lines below it: POWERTOOLS_LOG_LEVEL, but at most INFO (the
            # EMF metric lines carry no level, and Lambda files them as INFO).
            application_log_level_v2=application_level,
            system_log_level_v2=system_level,
            # Without active tracing Powertools imports no X-Ray SDK and sends nothing.
            environment={
                **environment,
                **({"POWERTOOLS_TRACE_DISABLED": "false" if traced else "true"} if core else {}),
            },
            layers=layers or None,
            memory_size=memory_mb,
            timeout=timeout,
            tracing=lambda_.Tracing.ACTIVE if traced else None,
            reserved_concurrent_executions=reserved_concurrency,
            snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if snap_start else None,
            # Asynchronous invocations (the schedules) reach the alias under SnapStart: its
            # settings are the ones that apply then.
            **({} if snap_start else asynchronous),
        )
        self.alias: lambda_.Alias | None = None
        if snap_start:
            # A new version whenever a layer changes, whatever the app's feature flags: without
            # @aws-cdk/aws-lambda:recognizeLayerVersion CDK hashes only the function's own
            # properties, whose Layers (a Ref to the layer's logical id) do not change with the
            # layer's content, so a new core layer would publish no version and `live` would keep
            # the old engine.
            self.function.invalidate_version_based_on(layers_fingerprint(layers))
            # CDK warns on every SnapStart function that $LATEST is not snapshotted; this one
            # publishes its version and is only invoked through the alias.
            Annotations.of(self.function).acknowledge_warning(
                "@aws-cdk/aws-lambda:snapStartRequirePublish",
                "the function publishes a version on each deploy and is invoked through its alias",
            )
            self.alias = lambda_.Alias(
                self,
                "Live",
                alias_name=LIVE_ALIAS,
                version=self.function.current_version,
                **asynchronous,
            )
        #: What the API integration, the stream mappings and the schedules invoke.
        self.target: lambda_.IFunction = self.alias or self.function
        if traced:
            acknowledge(
                self.role,
                "AwsSolutions-IAM5",
                "X-Ray PutTraceSegments/PutTelemetryRecords (active tracing) support no "
                "resource-level permissions; AWS documents Resource '*' for them.",
                applies_to=["Resource::*"],
            )
        acknowledge(
            self.function.node.default_child,  # not its EventInvokeConfig child
            "AwsSolutions-L1",
            _PINNED_RUNTIME_REASON
            if core
            else (
                "Pinned to python3.12 like the service's other functions (one runtime to move "
                "deliberately); this function uses the standard library only."
            ),
            children=False,
        )
