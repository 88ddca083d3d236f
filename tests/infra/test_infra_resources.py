"""What the synthesized templates contain: one test (or a few) per item of the infra issue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Duration, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match, Template
from tests.support.infra import (
    ORDERS_KEY_ARN,
    actions_by_resource,
    as_list,
    getatt,
    grant_set,
    index_arn,
    invoked_arn,
    invoked_qualifier,
    logical_id,
    props,
    resources,
    role_statements,
)
from leasefence import schema
from leasefence.payloads import KEY_PREFIX as PAYLOAD_KEY_PREFIX
from leasefence_infra import LeaseFenceService
from leasefence_infra.bundling import LAYER_REQUIREMENTS
from leasefence_infra.function import POWERTOOLS_LAYER_PARAMETER
from leasefence_infra.monitoring import APP_METRICS, WORKER_METRICS

# The public contract, section 2, written out again on purpose: if ROUTES in the construct
# drifts from the contract, this table (not the construct's) decides.
CONTRACT_ROUTES = {
    "GET /v1/health": None,
    "POST /v1/operations": "leasefence/produce",
    "GET /v1/operations/{id}": "leasefence/produce",
    "POST /v1/claims": "leasefence/work",
    "POST /v1/operations/{id}/heartbeat": "leasefence/work",
    "POST /v1/operations/{id}/complete": "leasefence/work",
    "POST /v1/operations/{id}/fail": "leasefence/work",
    "POST /v1/operations/{id}/unknown": "leasefence/work",
    "POST /v1/operations/{id}/quarantine": "leasefence/work",
    "GET /v1/operations/{id}/payload": "leasefence/work",
    "GET /v1/operations": "leasefence/operate",
    "GET /v1/operations/{id}/history": "leasefence/operate",  # issue 13 (contract extension)
    "POST /v1/operations/{id}/resolve": "leasefence/operate",
    "POST /v1/operations/{id}/erase": "leasefence/operate",
    # issue 14 (contract extensions): the job-type catalogue, settings, the go/no-go report
    "GET /v1/job-types": "leasefence/operate",
    "GET /v1/job-types/{job_type}": "leasefence/operate",
    "PUT /v1/job-types/{job_type}": "leasefence/operate",
    "DELETE /v1/job-types/{job_type}": "leasefence/operate",
    "GET /v1/settings": "leasefence/operate",
    "PUT /v1/settings": "leasefence/operate",
    "GET /v1/controls": "leasefence/operate",
    # issue 14 (contract extensions): the approval gate and cancel
    "POST /v1/operations/{id}/approve": "leasefence/approve",
    "POST /v1/operations/{id}/reject": "leasefence/approve",
    "POST /v1/operations/{id}/cancel": "leasefence/produce",
    # issue 25 (contract extensions): the operator console, its reads and its files
    "GET /v1/state-counts": "leasefence/operate",
    "GET /v1/target-classes": None,
    "GET /": None,
    "GET /console": None,
    "GET /console/{asset}": None,
}
# Issue 21: an approver reads what it approves (the handler limits it to gated operations).
CONTRACT_ALSO = {
    "GET /v1/operations": ("leasefence/approve",),  # issue 25: an approver's inbox
    "GET /v1/operations/{id}": ("leasefence/approve",),
    "GET /v1/operations/{id}/payload": ("leasefence/approve",),
    "GET /v1/operations/{id}/history": ("leasefence/approve",),
}

EXPECTED_ENV = {
    "LEASEFENCE_TABLE",
    "LEASEFENCE_PAYLOAD_BUCKET",
    "LEASEFENCE_DUE_SHARDS",
    "LEASEFENCE_SWEEP_SHARDS",
    "LEASEFENCE_LOG_HASH_KEY_PARAM",
    "LEASEFENCE_IDENTITY_RETENTION_DAYS",
    "LEASEFENCE_PAYLOAD_RETENTION_DAYS",
    "LEASEFENCE_FENCE_EPOCH",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
    "POWERTOOLS_TRACER_CAPTURE_RESPONSE",
}
WORKER_ENV = {"LEASEFENCE_WORKER_HANDLERS", "LEASEFENCE_WORKER_TENANTS", "LEASEFENCE_WORKER_LEASE_SECONDS"}


@pytest.fixture(scope="module", params=["default", "full"])
def variant(request: pytest.FixtureRequest, synth) -> tuple[str, Stack, LeaseFenceService, dict[str, Any]]:
    stack = synth.stacks[request.param]
    return request.param, stack, stack.service, synth.template_json(request.param)


def _svc(synth, name: str) -> tuple[Stack, LeaseFenceService, dict[str, Any]]:
    stack = synth.stacks[name]
    return stack, stack.service, synth.template_json(name)


# ----------------------------------------------------------------------------- table


def test_table_is_the_schema_module(variant) -> None:
    _, stack, svc, tpl = variant
    table = props(tpl, logical_id(stack, svc.table))
    request = schema.create_table_request()
    assert table["KeySchema"] == request["KeySchema"]
    assert sorted(table["AttributeDefinitions"], key=lambda d: d["AttributeName"]) == sorted(
        request["AttributeDefinitions"], key=lambda d: d["AttributeName"]
    )
    assert table["GlobalSecondaryIndexes"] == request["GlobalSecondaryIndexes"]
    for gsi in table["GlobalSecondaryIndexes"]:
        expected = (
            {"ProjectionType": "KEYS_ONLY"}
            if gsi["IndexName"] in (schema.PARKED_INDEX, schema.PURGE_INDEX)
            else {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(schema.INDEX_PROJECTION)}
        )
        assert gsi["Projection"] == expected
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["TimeToLiveSpecification"] == {"AttributeName": schema.TTL_ATTRIBUTE, "Enabled": True}
    # The stream the local stack turns on too (schema.create_table_request(stream=True)).
    assert table["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert schema.create_table_request(stream=True)["StreamSpecification"] == {
        "StreamEnabled": True, **table["StreamSpecification"]}
    assert "TableName" not in table  # CloudFormation names it: two stacks never collide


def test_table_defaults_deletion_protection_and_aws_owned_key(synth) -> None:
    stack, svc, tpl = _svc(synth, "default")
    table = props(tpl, logical_id(stack, svc.table))
    assert table["DeletionProtectionEnabled"] is True
    # AWS-owned key: SSE not "enabled" (that would mean KMS).
    assert table["SSESpecification"] == {"SSEEnabled": False}
    assert tpl["Resources"][logical_id(stack, svc.table)]["DeletionPolicy"] == "Retain"
    assert not resources(tpl, "AWS::KMS::Key").keys() - {logical_id(stack, svc.monitoring.node.find_child("AlarmTopicKey"))}


def test_table_options_cmk_and_no_deletion_protection(synth) -> None:
    stack, svc, tpl = _svc(synth, "full")
    table = props(tpl, logical_id(stack, svc.table))
    key_lid = logical_id(stack, svc.encryption_key)
    assert table["DeletionProtectionEnabled"] is False
    assert table["SSESpecification"] == {
        "SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": getatt(key_lid)
    }
    assert props(tpl, key_lid)["EnableKeyRotation"] is True


# ----------------------------------------------------------------------------- bucket


def _denies_insecure_transport(policy: dict[str, Any]) -> bool:
    return any(
        st["Effect"] == "Deny"
        and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        for st in policy["PolicyDocument"]["Statement"]
    )


def test_payload_bucket(variant) -> None:
    name, stack, svc, tpl = variant
    lid = logical_id(stack, svc.payload_bucket)
    bucket = props(tpl, lid)
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True,
        "IgnorePublicAcls": True, "RestrictPublicBuckets": True,
    }
    (rule,) = bucket["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == "Enabled"
    # No age-based expiry: a payload lives as long as its operation (issue 11, case 2); the
    # sweeper deletes it payload_retention_days after the end.
    assert "ExpirationInDays" not in rule and rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert svc.props.payload_retention_days == (30 if name == "default" else 7)
    (enc,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    if name == "default":
        assert enc["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
        assert "LoggingConfiguration" not in bucket  # acknowledged in cdk-nag instead
    else:
        assert enc["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": getatt(logical_id(stack, svc.encryption_key))
        }
        assert enc["BucketKeyEnabled"] is True
        assert bucket["LoggingConfiguration"] == {
            "DestinationBucketName": "leasefence-test-access-logs",
            "LogFilePrefix": "leasefence-payloads/",
        }
    (policy,) = [p["Properties"] for p in resources(tpl, "AWS::S3::BucketPolicy").values()
                 if p["Properties"]["Bucket"] == {"Ref": lid}]
    assert _denies_insecure_transport(policy)


# ----------------------------------------------------------------------------- functions


def test_functions_runtime_tracing_env_layers(variant) -> None:
    name, stack, svc, tpl = variant
    core_layer = logical_id(stack, svc.core_layer)
    # Powertools is bundled in the core layer (the default): no layer parameter to resolve.
    assert svc.powertools_layer is None
    assert not [k for k, v in tpl.get("Parameters", {}).items() if v.get("Default") == POWERTOOLS_LAYER_PARAMETER]
    expected = {
        svc.api.function.function: ("api.handler.lambda_handler", svc.api.function.log_group, svc.api.function.role),
        svc.sweeper.function.function: ("sweeper.handler.lambda_handler", svc.sweeper.function.log_group,
                                        svc.sweeper.function.role),
        svc.worker_function: ("worker.handler.lambda_handler", svc.worker.function.log_group, svc.worker.function.role),
        svc.publisher_function: ("publisher.handler.lambda_handler", svc.publisher.function.log_group,
                                 svc.publisher.function.role),
    }
    for fn, (handler, log_group, role) in expected.items():
        f = props(tpl, logical_id(stack, fn))
        assert f["Runtime"] == "python3.12"
        assert f["Architectures"] == ["arm64"]
        assert f["Handler"] == handler
        assert f["TracingConfig"] == {"Mode": "Active"}
        layers = [{"Ref": core_layer}]
        if fn is svc.worker_function and name == "full":
            # The handler layer is merged first, so the core layer wins a clash.
            layers = [{"Ref": logical_id(stack, svc.worker_handlers_layer)}, *layers]
        assert f["Layers"] == layers
        assert f["LoggingConfig"]["LogGroup"] == {"Ref": logical_id(stack, log_group)}
        assert f["Role"] == getatt(logical_id(stack, role))
        env = f["Environment"]["Variables"]
        extra = {"LEASEFENCE_TENANT_ROLE_ARN", "LEASEFENCE_TENANT_SESSION_TAG",
                 "LEASEFENCE_IAM_TENANT", "LEASEFENCE_IAM_API_ID"} if (  # the full stack's IAM API
            name == "full" and fn is svc.api.function.function) else set()
        if fn is svc.api.function.function:
            extra |= {"LEASEFENCE_ALARM_TOPIC"}  # the go/no-go report's alert route
            assert env["LEASEFENCE_ALARM_TOPIC"] == {"Ref": logical_id(stack, svc.alarm_topic)}
            if name == "full":  # the console signs in through the user pool (issue 25)
                extra |= {f"LEASEFENCE_CONSOLE_OIDC_{k}" for k in (
                    "ISSUER", "CLIENT_ID", "SCOPES", "AUTHORIZATION_ENDPOINT", "TOKEN_ENDPOINT", "LOGOUT_ENDPOINT")}
        if fn is svc.worker_function:
            extra = WORKER_ENV | set(svc.props.worker.environment)
        if fn is svc.publisher_function:
            extra = {"LEASEFENCE_EVENT_BUS"}
        assert set(env) == EXPECTED_ENV | extra
        assert env["LEASEFENCE_TABLE"] == {"Ref": logical_id(stack, svc.table)}
        assert env["LEASEFENCE_PAYLOAD_BUCKET"] == {"Ref": logical_id(stack, svc.payload_bucket)}
        assert env["LEASEFENCE_LOG_HASH_KEY_PARAM"] == {"Ref": logical_id(stack, svc.storage.log_hash_key)}
        assert env["LEASEFENCE_DUE_SHARDS"] == str(svc.props.due_shards)
        assert env["LEASEFENCE_SWEEP_SHARDS"] == str(svc.props.sweep_shards)
        assert env["LEASEFENCE_PAYLOAD_RETENTION_DAYS"] == str(svc.props.payload_retention_days)
        assert env["LEASEFENCE_FENCE_EPOCH"] == str(svc.props.fence_epoch)
        assert env["LEASEFENCE_IDENTITY_RETENTION_DAYS"] == (
            "forever" if svc.props.identity_retention_days is None else str(svc.props.identity_retention_days))
        assert env["POWERTOOLS_SERVICE_NAME"] == "leasefence"
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == svc.metrics_namespace
        assert env["POWERTOOLS_LOG_LEVEL"] == ("INFO" if name == "default" else "DEBUG")
        assert props(tpl, logical_id(stack, log_group))["RetentionInDays"] == 30
    layer = props(tpl, core_layer)
    assert layer["CompatibleRuntimes"] == ["python3.12"]
    assert layer["CompatibleArchitectures"] == ["arm64"]


def test_log_hash_key_is_generated_secret(variant) -> None:
    _, stack, svc, tpl = variant
    secret = props(tpl, logical_id(stack, svc.storage.log_hash_key))
    assert secret["GenerateSecretString"]["PasswordLength"] == 64
    assert "SecretString" not in secret


# ----------------------------------------------------------------------------- HTTP API


def test_routes_and_scopes_match_the_contract(variant) -> None:
    _, stack, svc, tpl = variant
    authorizer = logical_id(stack, svc.http_api.node.find_child("JwtAuthorizer"))
    api = {"Ref": logical_id(stack, svc.http_api)}  # (the full stack also has the IAM API)
    routes = {r["Properties"]["RouteKey"]: r["Properties"] for r in resources(tpl, "AWS::ApiGatewayV2::Route").values()
              if r["Properties"]["ApiId"] == api}
    assert set(routes) == set(CONTRACT_ROUTES)
    for key, scope in CONTRACT_ROUTES.items():
        route = routes[key]
        if scope is None:
            assert route["AuthorizationType"] == "NONE", key
            assert "AuthorizerId" not in route and "AuthorizationScopes" not in route
        else:
            assert route["AuthorizationType"] == "JWT", key
            assert route["AuthorizerId"] == {"Ref": authorizer}, key
            assert route["AuthorizationScopes"] == [scope, *CONTRACT_ALSO.get(key, ())], key
    # One Lambda proxy integration (payload 2.0) serves every route.
    ((integration_lid, integration),) = [(lid, i) for lid, i in resources(tpl, "AWS::ApiGatewayV2::Integration").items()
                                         if i["Properties"]["ApiId"] == api]
    assert integration["Properties"]["PayloadFormatVersion"] == "2.0"
    assert integration["Properties"]["IntegrationUri"] == invoked_arn(stack, svc.api.function)
    for route in routes.values():
        assert route["Target"] == {"Fn::Join": ["", ["integrations/", {"Ref": integration_lid}]]}


def test_jwt_authorizer_external_issuer(synth) -> None:
    _, _, tpl = _svc(synth, "default")
    (authorizer,) = resources(tpl, "AWS::ApiGatewayV2::Authorizer").values()
    assert authorizer["Properties"]["AuthorizerType"] == "JWT"
    assert authorizer["Properties"]["IdentitySource"] == ["$request.header.Authorization"]
    assert authorizer["Properties"]["JwtConfiguration"] == {
        "Issuer": "https://issuer.example.com/", "Audience": ["leasefence-api"]
    }
    assert not resources(tpl, "AWS::Cognito::UserPool")


def test_jwt_authorizer_cognito_pool(synth) -> None:
    stack, svc, tpl = _svc(synth, "full")
    pool = logical_id(stack, svc.user_pool.pool)
    client = logical_id(stack, svc.user_pool.client)
    (authorizer,) = resources(tpl, "AWS::ApiGatewayV2::Authorizer").values()
    jwt = authorizer["Properties"]["JwtConfiguration"]
    # The service client's tokens, and the operator console's (issue 25: tests/console).
    console = logical_id(stack, svc.user_pool.console_client)
    assert jwt["Audience"] == [{"Ref": client}, {"Ref": console}]
    assert jwt["Issuer"] == {"Fn::Join": ["", ["https://cognito-idp.", {"Ref": "AWS::Region"}, ".",
                                               {"Ref": "AWS::URLSuffix"}, "/", {"Ref": pool}]]}
    (server,) = resources(tpl, "AWS::Cognito::UserPoolResourceServer").values()
    assert server["Properties"]["Identifier"] == "leasefence"
    assert {s["ScopeName"] for s in server["Properties"]["Scopes"]} == {"produce", "work", "operate", "approve",
                                                                        "shadow"}
    c = props(tpl, client)
    assert c["AllowedOAuthFlows"] == ["client_credentials"] and c["GenerateSecret"] is True
    # Every scope but approve: the service client enqueues, and nobody approves their own operations.
    granted = {s["Fn::Join"][1][-1] if isinstance(s, dict) else s for s in c["AllowedOAuthScopes"]}
    assert granted == {"/produce", "/work", "/operate"}, c["AllowedOAuthScopes"]
    p = props(tpl, pool)
    assert p["AdminCreateUserConfig"] == {"AllowAdminCreateUserOnly": True}
    assert p["LambdaConfig"]["PreTokenGenerationConfig"]["LambdaVersion"] == "V3_0"
    assert resources(tpl, "AWS::Cognito::UserPoolDomain")


def test_stage_throttling_and_access_logs(variant) -> None:
    _, stack, svc, tpl = variant
    p = props(tpl, logical_id(stack, svc.api.stage))
    assert p["StageName"] == "$default" and p["AutoDeploy"] is True
    assert p["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 200, "ThrottlingRateLimit": 100}
    assert p["AccessLogSettings"]["DestinationArn"] == getatt(logical_id(stack, svc.api.access_log_group))
    fmt = json.loads(p["AccessLogSettings"]["Format"])
    assert fmt["requestId"] == "$context.requestId"
    assert fmt["status"] == "$context.status"
    assert "$context.path" not in p["AccessLogSettings"]["Format"]  # ids stay out of logs
    assert props(tpl, logical_id(stack, svc.api.access_log_group))["RetentionInDays"] == 30


# ----------------------------------------------------------------------------- schedule


def test_sweeper_schedule(variant) -> None:
    name, stack, svc, tpl = variant
    schedules = resources(tpl, "AWS::Scheduler::Schedule")
    assert set(schedules) == {logical_id(stack, svc.sweeper.schedule.schedule),
                              logical_id(stack, svc.worker.schedule.schedule)}
    p = props(tpl, logical_id(stack, svc.sweeper.schedule.schedule))
    dlq = logical_id(stack, svc.sweeper.schedule.dlq)
    assert p["ScheduleExpression"] == "rate(1 minute)"
    assert p["State"] == "ENABLED"
    assert p["Target"]["Arn"] == invoked_arn(stack, svc.sweeper.function)
    assert p["Target"]["RetryPolicy"] == {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 60}
    assert p["Target"]["DeadLetterConfig"] == {"Arn": getatt(dlq)}
    queue = props(tpl, dlq)
    if name == "default":
        assert queue["SqsManagedSseEnabled"] is True
    else:
        assert queue["KmsMasterKeyId"] == getatt(logical_id(stack, svc.encryption_key))
    (qpolicy,) = [q["Properties"] for q in resources(tpl, "AWS::SQS::QueuePolicy").values()
                  if q["Properties"]["Queues"] == [{"Ref": dlq}]]
    assert _denies_insecure_transport(qpolicy)
    schedule_role = logical_id(stack, svc.sweeper.schedule.role)
    assert p["Target"]["RoleArn"] == getatt(schedule_role)
    trust = props(tpl, schedule_role)["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "scheduler.amazonaws.com"}]
    statements = role_statements(tpl, schedule_role)
    assert actions_by_resource(statements, "sqs:") == [(frozenset({"sqs:SendMessage"}), getatt(dlq))]
    kms_grants = actions_by_resource(statements, "kms:")
    if name == "default":
        assert kms_grants == []
    else:  # the DLQ (and the schedule input) use the customer-managed key
        key = getatt(logical_id(stack, svc.encryption_key))
        assert (frozenset({"kms:GenerateDataKey", "kms:Decrypt"}), key) in kms_grants


# ----------------------------------------------------------------------------- least privilege


def test_no_function_role_has_managed_policies(variant) -> None:
    _, stack, svc, tpl = variant
    for role in (svc.api.function.role, svc.sweeper.function.role, svc.sweeper.schedule.role,
                 svc.worker.function.role, svc.worker.schedule.role):
        assert "ManagedPolicyArns" not in props(tpl, logical_id(stack, role))


def test_dynamodb_permissions_are_exact(synth) -> None:
    stack, svc, tpl = _svc(synth, "default")
    table = logical_id(stack, svc.table)
    api = actions_by_resource(role_statements(tpl, logical_id(stack, svc.api.function.role)), "dynamodb:")
    sweeper = actions_by_resource(role_statements(tpl, logical_id(stack, svc.sweeper.function.role)), "dynamodb:")
    assert grant_set(api) == grant_set([
        (frozenset({"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"}),
         getatt(table)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.DUE_INDEX)),
    ])
    assert grant_set(sweeper) == grant_set([
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.SWEEP_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.PARKED_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.PURGE_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.DUE_INDEX)),
        (frozenset({"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Scan"}), getatt(table)),
    ])


def test_other_permissions_are_scoped(variant) -> None:
    _, stack, svc, tpl = variant
    bucket = logical_id(stack, svc.payload_bucket)
    api = role_statements(tpl, logical_id(stack, svc.api.function.role))
    sweeper = role_statements(tpl, logical_id(stack, svc.sweeper.function.role))
    assert grant_set(actions_by_resource(api, "s3:")) == grant_set([
        (frozenset({"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}),
         {"Fn::Join": ["", [getatt(bucket), f"/{PAYLOAD_KEY_PREFIX}*"]]}),
        (frozenset({"s3:ListBucket"}), getatt(bucket)),
    ])
    # Unconditioned: S3 only answers 404 (not 403) for a missing key to a caller that may list.
    (listing,) = [s for s in api if "s3:ListBucket" in as_list(s["Action"])]
    assert "Condition" not in listing
    # The sweeper deletes payloads that are due (retention after the end, or erasure), nothing else.
    assert actions_by_resource(sweeper, "s3:") == [
        (frozenset({"s3:DeleteObject"}), {"Fn::Join": ["", [getatt(bucket), f"/{PAYLOAD_KEY_PREFIX}*"]]})
    ]
    secret = {"Ref": logical_id(stack, svc.storage.log_hash_key)}
    for statements, log_group in ((api, svc.api.function.log_group), (sweeper, svc.sweeper.function.log_group)):
        assert actions_by_resource(statements, "secretsmanager:") == [
            (frozenset({"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}), secret)
        ]
        assert actions_by_resource(statements, "logs:") == [
            (frozenset({"logs:CreateLogStream", "logs:PutLogEvents"}), getatt(logical_id(stack, log_group)))
        ]
        # The only "*" resource is X-Ray, which has no resource-level permissions.
        star = [s for s in statements if s["Resource"] == "*"]
        assert [sorted(as_list(s["Action"])) for s in star] == [["xray:PutTelemetryRecords", "xray:PutTraceSegments"]]
        for st in statements:
            for action in as_list(st["Action"]):
                assert not action.endswith(":*"), action


def test_tenant_isolation_role(synth) -> None:
    stack, svc, tpl = _svc(synth, "full")
    assert svc.api.tenant_role is not None
    table = logical_id(stack, svc.table)
    tenant = logical_id(stack, svc.api.tenant_role)
    api_role = logical_id(stack, svc.api.function.role)
    api = role_statements(tpl, api_role)
    # With isolation on, the API function itself cannot touch the table at all ...
    assert actions_by_resource(api, "dynamodb:") == []
    # ... it can only become its caller's tenant.
    assert actions_by_resource(api, "sts:") == [
        (frozenset({"sts:AssumeRole", "sts:TagSession"}), getatt(tenant))
    ]
    (trust,) = props(tpl, tenant)["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"AWS": getatt(api_role)}
    assert sorted(as_list(trust["Action"])) == ["sts:AssumeRole", "sts:TagSession"]
    assert trust["Condition"] == {
        "StringLike": {"aws:RequestTag/tenant_id": "?*"},
        "ForAllValues:StringEquals": {"aws:TagKeys": ["tenant_id"]},
    }
    statements = {s.get("Sid"): s for s in role_statements(tpl, tenant)}
    own_items = statements["OwnTenantItems"]
    assert own_items["Resource"] == getatt(table)
    assert own_items["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["${aws:PrincipalTag/tenant_id}"]}
    }
    shards = statements["OwnTenantDueShards"]
    assert shards["Resource"] == index_arn(table, schema.DUE_INDEX)
    assert as_list(shards["Action"]) == ["dynamodb:Query"]
    # Due partitions are <tenant>#<shard>#<job type>; a session tag value holds no '#', '*', '?'.
    assert shards["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["${aws:PrincipalTag/tenant_id}#*"]}
    }
    # Every DynamoDB grant of the tenant role is conditioned on the tenant's leading keys.
    for st in role_statements(tpl, tenant):
        if any(a.startswith("dynamodb:") for a in as_list(st["Action"])):
            (condition,) = st["Condition"].values()
            assert "dynamodb:LeadingKeys" in condition
    env = props(tpl, logical_id(stack, svc.api.function.function))["Environment"]["Variables"]
    assert env["LEASEFENCE_TENANT_ROLE_ARN"] == getatt(tenant)
    assert env["LEASEFENCE_TENANT_SESSION_TAG"] == "tenant_id"
    # The sweeper stays the one, narrow, cross-tenant path.
    sweeper = actions_by_resource(role_statements(tpl, logical_id(stack, svc.sweeper.function.role)), "dynamodb:")
    assert grant_set(sweeper) == grant_set([
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.SWEEP_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.PARKED_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.PURGE_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.DUE_INDEX)),
        (frozenset({"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Scan"}), getatt(table)),
    ])


# ----------------------------------------------------------------------------- operations


def _metrics(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """An alarm's metrics as {Namespace, MetricName, Dimensions}, whichever form CDK rendered."""
    p = alarm["Properties"]
    if "MetricName" in p:
        return [{"Namespace": p["Namespace"], "MetricName": p["MetricName"],
                 "Dimensions": p.get("Dimensions", [])}]
    return [
        {**m["MetricStat"]["Metric"], "Dimensions": m["MetricStat"]["Metric"].get("Dimensions", [])}
        for m in p.get("Metrics", []) if "MetricStat" in m
    ]


def test_alarms_cover_the_operational_signals(variant) -> None:
    _, stack, svc, tpl = variant
    alarms = resources(tpl, "AWS::CloudWatch::Alarm")
    topic = {"Ref": logical_id(stack, svc.alarm_topic)}
    by_metric: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [topic]
        assert alarm["Properties"]["OKActions"] == [topic]
        for metric in _metrics(alarm):
            by_metric.setdefault(metric["MetricName"], []).append((alarm["Properties"], metric))
    app_dims = [{"Name": "service", "Value": "leasefence"}]
    for name in ("StalledClaims", "OldestUnknownAgeSeconds", "OldestDueAgeSeconds", "Quarantined",
                 "StaleFenceRejections"):
        ((_, metric),) = by_metric[name]
        assert metric["Namespace"] == svc.metrics_namespace and metric["Dimensions"] == app_dims
    assert by_metric["OldestUnknownAgeSeconds"][0][0]["Threshold"] == 3600
    assert by_metric["OldestDueAgeSeconds"][0][0]["Threshold"] == 900  # unserved job types show
    # A payload store that refuses access: its own alarm (the throttles alarm's expression is at
    # CloudWatch's 10-metric limit), on the first refusal in 5 minutes.
    ((denied, denied_metric),) = by_metric["PayloadAccessDenied"]
    assert denied_metric["Namespace"] == svc.metrics_namespace and denied_metric["Dimensions"] == app_dims
    ((stat,),) = [[m["MetricStat"] for m in denied["Metrics"]]]
    assert (denied["Threshold"], denied["EvaluationPeriods"], stat["Stat"], stat["Period"]) == (1, 1, "Sum", 300)
    assert denied["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert denied["TreatMissingData"] == "notBreaching"
    ((unknown_entered, _),) = by_metric["UnknownParked"]
    assert [a for a, _ in by_metric["SweptToUnknown"]] == [unknown_entered]
    # Takeover rate: a percentage of claims (metric math over both).
    ((takeover, _),) = by_metric["Takeovers"]
    assert [a for a, _ in by_metric["Claims"]] == [takeover]
    assert any("100 * FILL(takeovers, 0) / FILL(claims, 0)" in m.get("Expression", "")
               for m in takeover["Metrics"])
    sweeper_dims = [{"Name": "FunctionName", "Value": {"Ref": logical_id(stack, svc.sweeper.function.function)}}]
    (errors,) = [m for _, m in by_metric["Errors"] if m["Dimensions"] == sweeper_dims]
    assert errors["Namespace"] == "AWS/Lambda"
    ((_, api5xx),) = by_metric["5xx"]
    assert api5xx["Namespace"] == "AWS/ApiGateway"
    assert api5xx["Dimensions"] == [{"Name": "ApiId", "Value": {"Ref": logical_id(stack, svc.http_api)}}]
    throttle_alarms = {id(a): a for name in ("ReadThrottleEvents", "WriteThrottleEvents")
                       for a, _ in by_metric[name]}
    # One alarm for the table and one per index (two metrics each, never CloudWatch's 10 in one).
    assert len(throttle_alarms) == 1 + len(schema.global_secondary_indexes())
    indexes = {d["Value"] for name in ("ReadThrottleEvents", "WriteThrottleEvents")
               for _, m in by_metric[name] for d in m["Dimensions"]
               if d["Name"] == "GlobalSecondaryIndexName"}
    assert indexes == {schema.DUE_INDEX, schema.SWEEP_INDEX, schema.PARKED_INDEX, schema.PURGE_INDEX}
    assert "ApproximateNumberOfMessagesVisible" in by_metric  # schedule DLQ
    assert "Invocations" in by_metric  # sweeper not running


def test_alarm_topic_is_encrypted_and_cloudwatch_can_use_it(variant) -> None:
    _, stack, svc, tpl = variant
    topic = props(tpl, logical_id(stack, svc.alarm_topic))
    key_lid = topic["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key_policy = props(tpl, key_lid)["KeyPolicy"]["Statement"]
    assert any(s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
               and "kms:Decrypt" in as_list(s["Action"]) for s in key_policy)
    (topic_policy,) = resources(tpl, "AWS::SNS::TopicPolicy").values()
    statements = topic_policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and s["Condition"]["Bool"]["aws:SecureTransport"] == "false"
               for s in statements)
    assert any(s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} for s in statements)


def test_dashboard_shows_every_app_metric(variant) -> None:
    _, stack, svc, tpl = variant
    (dashboard,) = resources(tpl, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for name in APP_METRICS:
        assert f'\\"{name}\\"' in body, name
    assert f'\\"{svc.metrics_namespace}\\"' in body and '\\"service\\",\\"leasefence\\"' in body


def test_example_stack_outputs(synth) -> None:
    stack, svc, tpl = _svc(synth, "default")
    outputs = tpl["Outputs"]
    assert outputs["ApiUrl"]["Value"] == getatt(logical_id(stack, svc.http_api), "ApiEndpoint")
    assert outputs["TableName"]["Value"] == {"Ref": logical_id(stack, svc.table)}
    assert outputs["PayloadBucketName"]["Value"] == {"Ref": logical_id(stack, svc.payload_bucket)}
    assert outputs["AlarmTopicArn"]["Value"] == {"Ref": logical_id(stack, svc.alarm_topic)}
    assert outputs["DashboardName"]["Value"] == {"Ref": logical_id(stack, svc.dashboard)}
    assert outputs["WorkerFunctionName"]["Value"] == {"Ref": logical_id(stack, svc.worker_function)}
    assert outputs["EventBusName"]["Value"] == {"Ref": logical_id(stack, svc.event_bus)}
    # The construct itself adds no outputs to a consumer's stack.
    assert "Outputs" not in synth.template_json("full")


def test_cognito_token_url(synth) -> None:
    _, svc, _ = _svc(synth, "full")
    assert svc.token_url is not None and svc.token_url.endswith("/oauth2/token")
    assert _svc(synth, "default")[1].token_url is None


# ----------------------------------------------------------------------------- worker

#: (stack, expected values) of the worker in each test stack: the example app's defaults, and
#: every option set (see conftest.FullStack).
WORKER_EXPECTED = {
    "default": {"handlers": "worker.demo_handlers:HANDLERS", "tenants": "demo", "lease": "60",
                "timeout": 300, "memory": 512, "rate": "rate(1 minute)", "lost_ownership": 5},
    "full": {"handlers": "acme_jobs.jobs:HANDLERS", "tenants": "acme,globex", "lease": "120",
             "timeout": 600, "memory": 1024, "rate": "rate(2 minutes)", "lost_ownership": 3},
}


def _imported_table_arn(name: str) -> dict[str, Any]:
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":dynamodb:", {"Ref": "AWS::Region"},
                              ":", {"Ref": "AWS::AccountId"}, f":table/{name}"]]}


def test_worker_function(variant) -> None:
    name, stack, svc, tpl = variant
    want = WORKER_EXPECTED[name]
    Template.from_json(tpl).has_resource_properties("AWS::Lambda::Function", {
        "Handler": "worker.handler.lambda_handler",
        "Runtime": "python3.12",
        "Architectures": ["arm64"],
        "TracingConfig": {"Mode": "Active"},
        "Timeout": want["timeout"],
        "MemorySize": want["memory"],
        "LoggingConfig": Match.object_like({"LogFormat": "JSON",
                                            "LogGroup": {"Ref": logical_id(stack, svc.worker.function.log_group)}}),
        "Role": getatt(logical_id(stack, svc.worker.function.role)),
        "Environment": {"Variables": Match.object_like({
            "LEASEFENCE_WORKER_HANDLERS": want["handlers"],
            "LEASEFENCE_WORKER_TENANTS": want["tenants"],
            "LEASEFENCE_WORKER_LEASE_SECONDS": want["lease"],
            "LEASEFENCE_TABLE": {"Ref": logical_id(stack, svc.table)},
            "LEASEFENCE_PAYLOAD_BUCKET": {"Ref": logical_id(stack, svc.payload_bucket)},
            "LEASEFENCE_LOG_HASH_KEY_PARAM": {"Ref": logical_id(stack, svc.storage.log_hash_key)},
            "LEASEFENCE_DUE_SHARDS": str(svc.props.due_shards),
        })},
    })
    env = props(tpl, logical_id(stack, svc.worker_function))["Environment"]["Variables"]
    # The worker uses the function's own role for every tenant: no tenant role, even when the
    # API has one.
    assert "LEASEFENCE_TENANT_ROLE_ARN" not in env
    if name == "full":
        assert env["ACME_ORDERS_TABLE"] == "acme-orders" and env["ACME_LEDGER_TABLE"] == "acme-ledger"
    assert props(tpl, logical_id(stack, svc.worker.function.log_group))["RetentionInDays"] == 30
    # A failed drain is not retried by Lambda (the next tick drains again).
    Template.from_json(tpl).has_resource_properties("AWS::Lambda::EventInvokeConfig", {
        "FunctionName": {"Ref": logical_id(stack, svc.worker_function)},
        "MaximumRetryAttempts": 0,
        "MaximumEventAgeInSeconds": 60,
        "Qualifier": invoked_qualifier(stack, svc.worker.function),
    })


def test_worker_handler_layer(synth) -> None:
    stack, svc, tpl = _svc(synth, "full")
    layer = props(tpl, logical_id(stack, svc.worker_handlers_layer))
    assert layer["CompatibleRuntimes"] == ["python3.12"]
    assert layer["CompatibleArchitectures"] == ["arm64"]
    # package_layer_code put the consumer's package under python/, where Lambda imports it from.
    asset = synth.outdir / f"asset.{layer['Content']['S3Key'].removesuffix('.zip')}"
    assert (asset / "python" / "acme_jobs" / "jobs.py").is_file()
    assert _svc(synth, "default")[1].worker_handlers_layer is None  # demo module: functions/ asset


def test_worker_schedule_retries_and_dlq(variant) -> None:
    name, stack, svc, tpl = variant
    dlq = logical_id(stack, svc.worker.schedule.dlq)
    schedule_role = logical_id(stack, svc.worker.schedule.role)
    Template.from_json(tpl).has_resource_properties("AWS::Scheduler::Schedule", {
        "ScheduleExpression": WORKER_EXPECTED[name]["rate"],
        "State": "ENABLED",
        "Target": Match.object_like({
            "Arn": invoked_arn(stack, svc.worker.function),
            "RoleArn": getatt(schedule_role),
            "RetryPolicy": {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 60},
            "DeadLetterConfig": {"Arn": getatt(dlq)},
        }),
    })
    assert dlq != logical_id(stack, svc.sweeper.schedule.dlq)  # its own DLQ, its own alarm
    queue = props(tpl, dlq)
    if name == "default":
        assert queue["SqsManagedSseEnabled"] is True
    else:
        assert queue["KmsMasterKeyId"] == getatt(logical_id(stack, svc.encryption_key))
    (qpolicy,) = [q["Properties"] for q in resources(tpl, "AWS::SQS::QueuePolicy").values()
                  if q["Properties"]["Queues"] == [{"Ref": dlq}]]
    assert _denies_insecure_transport(qpolicy)
    trust = props(tpl, schedule_role)["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "scheduler.amazonaws.com"}]
    statements = role_statements(tpl, schedule_role)
    fn = invoked_arn(stack, svc.worker.function)
    if svc.worker.function.alias is not None:  # SnapStart: the alias, nothing else
        assert actions_by_resource(statements, "lambda:") == [(frozenset({"lambda:InvokeFunction"}), fn)]
    else:
        assert actions_by_resource(statements, "lambda:") == [
            (frozenset({"lambda:InvokeFunction"}), fn),
            (frozenset({"lambda:InvokeFunction"}), {"Fn::Join": ["", [fn, ":*"]]}),
        ]
    assert actions_by_resource(statements, "sqs:") == [(frozenset({"sqs:SendMessage"}), getatt(dlq))]
    assert {a for acts, _ in actions_by_resource(statements, "") for a in acts} <= {
        "lambda:InvokeFunction", "sqs:SendMessage", "kms:GenerateDataKey", "kms:Decrypt"}


def test_worker_role_is_exact(variant) -> None:
    """Every action and resource of the worker's role, nothing else."""
    name, stack, svc, tpl = variant
    table = logical_id(stack, svc.table)
    bucket = logical_id(stack, svc.payload_bucket)
    statements = role_statements(tpl, logical_id(stack, svc.worker.function.role))
    expected_dynamodb = [
        (frozenset({"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"}), getatt(table)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.DUE_INDEX)),
        # Stream dispatch: its table's stream, and ListStreams (no resource-level permissions).
        (frozenset({"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}),
         getatt(table, "StreamArn")),
        (frozenset({"dynamodb:ListStreams"}), "*"),
    ]
    if name == "full":
        expected_dynamodb += [
            (frozenset({"dynamodb:ConditionCheckItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
                        "dynamodb:DeleteItem"}), _imported_table_arn("acme-orders")),
            (frozenset({"dynamodb:UpdateItem", "dynamodb:GetItem"}), _imported_table_arn("acme-ledger")),
        ]
    assert grant_set(actions_by_resource(statements, "dynamodb:")) == grant_set(expected_dynamodb)
    assert grant_set(actions_by_resource(statements, "s3:")) == grant_set([
        (frozenset({"s3:GetObject"}), {"Fn::Join": ["", [getatt(bucket), f"/{PAYLOAD_KEY_PREFIX}*"]]}),
        # A missing object is then 404 (payload_missing), never 403 (a refused access).
        (frozenset({"s3:ListBucket"}), getatt(bucket)),
    ])
    (listing,) = [s for s in statements if "s3:ListBucket" in as_list(s["Action"])]
    assert "Condition" not in listing
    # Its failed invocations and the stream records it could not claim go to their on-failure
    # queues (Lambda sends them with this role).
    send = frozenset({"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"})
    assert grant_set(actions_by_resource(statements, "sqs:")) == grant_set([
        (send, getatt(logical_id(stack, svc.worker.failure_queue))),
        (send, getatt(logical_id(stack, svc.dispatch.failure_queue))),
    ])
    assert actions_by_resource(statements, "secretsmanager:") == [
        (frozenset({"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}),
         {"Ref": logical_id(stack, svc.storage.log_hash_key)})
    ]
    assert actions_by_resource(statements, "logs:") == [
        (frozenset({"logs:CreateLogStream", "logs:PutLogEvents"}), getatt(logical_id(stack, svc.worker.function.log_group)))
    ]
    assert actions_by_resource(statements, "xray:") == [
        (frozenset({"xray:PutTelemetryRecords", "xray:PutTraceSegments"}), "*")
    ]
    kms_grants = actions_by_resource(statements, "kms:")
    if name == "default":
        assert kms_grants == []
    else:  # the service key (table, bucket; the stream read) and the business table's own key
        data = frozenset({"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"})
        service_key = getatt(logical_id(stack, svc.encryption_key))
        assert grant_set(kms_grants) == grant_set([
            (data, service_key), (data, ORDERS_KEY_ARN),
            (frozenset({"kms:Decrypt", "kms:DescribeKey"}), service_key),
        ])
    # Nothing else: no other service, no wildcard action, no condition widening anything.
    services = {a.split(":")[0] for st in statements for a in as_list(st["Action"])}
    assert services == {"dynamodb", "s3", "secretsmanager", "logs", "xray", "sqs"} | (
        {"kms"} if name == "full" else set())
    for st in statements:
        assert st["Effect"] == "Allow" and "Condition" not in st
        for action in as_list(st["Action"]):
            assert "*" not in action.split(":")[1] or action in {"kms:GenerateDataKey*", "kms:ReEncrypt*"}, action


def test_worker_never_reaches_the_sweep_index_or_lists(variant) -> None:
    _, stack, svc, tpl = variant
    table = logical_id(stack, svc.table)
    statements = role_statements(tpl, logical_id(stack, svc.worker.function.role))
    rendered = json.dumps(statements)
    assert f"/index/{schema.SWEEP_INDEX}" not in rendered
    assert "/index/*" not in rendered
    for actions, resource in actions_by_resource(statements, "dynamodb:"):
        assert not actions & {"dynamodb:Scan", "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"}
        if resource == getatt(table):  # its own table: no Query (no listing), no Put/Delete
            assert not actions & {"dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem"}
        if "dynamodb:Query" in actions:
            assert resource == index_arn(table, schema.DUE_INDEX)
    assert svc.worker.function.role not in (svc.api.function.role, svc.sweeper.function.role)


def test_worker_alarms_and_dashboard(variant) -> None:
    name, stack, svc, tpl = variant
    topic = {"Ref": logical_id(stack, svc.alarm_topic)}
    fn_dims = [{"Name": "FunctionName", "Value": {"Ref": logical_id(stack, svc.worker_function)}}]
    template = Template.from_json(tpl)
    for metric, threshold, comparison, periods in (
        ("Errors", 1, "GreaterThanOrEqualToThreshold", 2),
        ("Invocations", 1, "LessThanThreshold", 1),
    ):
        template.has_resource_properties("AWS::CloudWatch::Alarm", {
            "Namespace": "AWS/Lambda", "MetricName": metric, "Dimensions": fn_dims,
            "Threshold": threshold, "ComparisonOperator": comparison, "EvaluationPeriods": periods,
            "AlarmActions": [topic], "OKActions": [topic],
        })
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "AWS/Lambda", "MetricName": "Invocations", "Dimensions": fn_dims,
        "TreatMissingData": "breaching",
    })
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Metrics": [Match.object_like({"MetricStat": {
            "Metric": {"Namespace": svc.metrics_namespace, "MetricName": "LostOwnership",
                       "Dimensions": [{"Name": "service", "Value": "leasefence"}]},
            "Period": 900, "Stat": "Sum"}})],
        "Threshold": WORKER_EXPECTED[name]["lost_ownership"],
        "AlarmActions": [topic], "OKActions": [topic],
    })
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible",
        "Dimensions": [{"Name": "QueueName",
                        "Value": getatt(logical_id(stack, svc.worker.schedule.dlq), "QueueName")}],
        "Threshold": 1,
    })
    (dashboard,) = resources(tpl, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in WORKER_METRICS:
        assert f'\\"{metric}\\"' in body, metric
    assert logical_id(stack, svc.worker_function) in body


def test_no_worker_no_worker_resources(prebuilt_layer) -> None:
    """worker=None (the construct's default) adds nothing of the worker."""
    from aws_cdk import App

    stack = Stack(App(), "Minimal")  # (the stack name is in the metrics namespace)
    svc = LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://x/", jwt_audience=["a"],
                            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    assert svc.worker is None and svc.worker_function is None
    template = Template.from_stack(stack)
    assert svc.dispatch is None
    template.resource_count_is("AWS::Lambda::Function", 3)  # API, sweeper, publisher
    template.resource_count_is("AWS::Scheduler::Schedule", 1)
    template.resource_count_is("AWS::SQS::Queue", 2)  # sweep schedule DLQ, sweeper failures
    template.resource_count_is("AWS::S3::Bucket", 2)  # payloads, the publisher's failed batches
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 1)  # the publisher's
    template.resource_count_is("AWS::Lambda::EventInvokeConfig", 1)  # the sweeper's
    body = json.dumps(template.to_json())
    assert "Worker" not in body and "LostOwnership" not in body
    # Nor the worker runtime's alarms: nothing without the in-process worker emits their metrics.
    for metric in ("StalledClaims", "PayloadMissing"):  # as an alarm's or a widget's metric name
        assert f'"{metric}"' not in body and f'\\"{metric}\\"' not in body, metric
    assert set(svc.monitoring.alarms).isdisjoint({"StalledClaimsAlarm", "WorkerPayloadMissingAlarm"})


def _worker_props(**overrides: Any):
    from leasefence_infra import WorkerProps

    base: dict[str, Any] = {"handlers": "worker.demo_handlers:HANDLERS", "tenants": ["demo"]}
    return WorkerProps(**{**base, **overrides})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"tenants": []}, "at least one tenant"),
        ({"tenants": "demo"}, "at least one tenant"),
        ({"tenants": ["a,b"]}, "comma"),
        ({"tenants": ["a", "a"]}, "twice"),
        ({"tenants": [" a"]}, "whitespace"),
        ({"tenants": [""]}, "not a tenant id"),
        ({"tenants": ["x" * 257]}, "not a tenant id"),
        ({"tenants": [f"tenant-{i:04d}" for i in range(200)]}, "split the tenants"),
        ({"handlers": "worker.demo_handlers"}, "package.module:ATTRIBUTE"),
        ({"handlers": "worker/demo:HANDLERS"}, "package.module:ATTRIBUTE"),
        ({"handlers": "acme.jobs:HANDLERS"}, "not in"),  # no code: must be in functions/
        ({"handlers": "worker.jobs:HANDLERS", "code": lambda_.Code.from_inline("x")}, "shadowed"),
        ({"handlers": "leasefence.jobs:HANDLERS", "code": lambda_.Code.from_inline("x")}, "core layer"),
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"timeout": Duration.seconds(65)}, "must exceed one lease"),
        ({"lease_seconds": 300, "timeout": Duration.minutes(5)}, "must exceed one lease"),
        ({"timeout": Duration.minutes(16)}, "at most 900"),
        ({"memory_mb": 64}, "memory_mb"),
        ({"environment": {"LEASEFENCE_TABLE": "x"}}, "may not replace"),
        ({"environment": {"LEASEFENCE_WORKER_TENANTS": "x"}}, "may not replace"),
        ({"lost_ownership_alarm_threshold": 0}, "lost_ownership_alarm_threshold"),
    ],
)
def test_invalid_worker_props_are_refused(overrides: dict[str, Any], message: str) -> None:
    from aws_cdk import App

    stack = Stack(App(), "InvalidWorker")
    with pytest.raises(ValueError, match=message):
        LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://x/", jwt_audience=["a"],
                          core_layer=lambda_.Code.from_inline("x"), worker=_worker_props(**overrides))


def test_worker_timeout_just_above_one_lease_is_accepted() -> None:
    from leasefence_infra.worker_props import WORKER_MARGIN_SECONDS, validate_worker

    validate_worker(_worker_props(lease_seconds=60, timeout=Duration.seconds(60 + WORKER_MARGIN_SECONDS + 1)),
                    reserved_env=[])


def test_worker_settings_match_the_handler() -> None:
    """The construct's idea of the handler (entry point, margin, variables) is the handler's."""
    import ast

    from leasefence_infra.assets import functions_dir
    from leasefence_infra.environment import WORKER_ENV
    from leasefence_infra.worker_props import WORKER_HANDLER, WORKER_MARGIN_SECONDS

    module, _, function = WORKER_HANDLER.rpartition(".")
    source = (functions_dir() / Path(*module.split("."))).with_suffix(".py").read_text()
    tree = ast.parse(source)
    assert any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body)
    (margin,) = [n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["MARGIN_MS"]]
    assert margin == WORKER_MARGIN_SECONDS * 1000
    read = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.startswith("LEASEFENCE_WORKER_")}
    assert set(WORKER_ENV) <= read


def test_layer_requirements_are_pinned() -> None:
    assert LAYER_REQUIREMENTS and all("==" in r for r in LAYER_REQUIREMENTS)


def test_gateway_routes_match_the_handler_route_table() -> None:
    """The HTTP API and the API function's own scope gate must agree route by route."""
    from leasefence.api import security
    from leasefence_infra import ROUTES

    from leasefence_infra.contract import ALSO_SCOPES

    handler = {r.key: r.scope for r in security.ROUTES}
    gateway = {f"{method} {path}": scope for method, path, scope in ROUTES}
    assert gateway == handler == CONTRACT_ROUTES
    handler_also = {r.key: r.also for r in security.ROUTES if r.also}
    assert {f"{m} {p}": also for (m, p), also in ALSO_SCOPES.items()} == handler_also == CONTRACT_ALSO


def test_case9_api_timeout_covers_a_claims_retry_budget(synth) -> None:
    """Issue 11, case 9: the API function was cut off (15 s) before a claim's own retries ended."""
    from leasefence.engine import CLAIM_RETRY_BUDGET_MS
    from leasefence.settings import STORE_CALL_WORST_S

    stack, svc, tpl = _svc(synth, "default")
    timeout = props(tpl, logical_id(stack, svc.api.function.function))["Timeout"]
    assert CLAIM_RETRY_BUDGET_MS / 1000 + STORE_CALL_WORST_S <= timeout < 30  # API Gateway's limit is 30 s


def test_the_deployed_routes_are_the_handlers_routes() -> None:
    """The construct's route table and the API handler's cannot drift apart (a route the handler
    serves but API Gateway does not route would be unreachable once deployed)."""
    from leasefence.api.security import ROUTES as HANDLER_ROUTES

    from leasefence_infra.contract import ROUTES as DEPLOYED_ROUTES

    assert {(m, p, s) for m, p, s in DEPLOYED_ROUTES} == {(r.method, r.template, r.scope) for r in HANDLER_ROUTES}


# ----------------------------------------------------------------------------- issue 12: operable defaults


def test_stalled_claims_alarm_fires_on_one_stalled_claim(variant) -> None:
    """StalledClaims is emitted once per stalled claim: the alarm counts it (Sum) over one period,
    so the first stalled claim raises it, and a quiet period (no data) is OK, not breaching."""
    _, stack, svc, tpl = variant
    alarm = props(tpl, logical_id(stack, svc.monitoring.alarms["StalledClaimsAlarm"]))
    # One metric, no math (CDK renders a labelled metric in the Metrics form).
    ((query,),) = [alarm["Metrics"]] if "Metrics" in alarm else [[{"MetricStat": {
        "Metric": {k: alarm[k] for k in ("Namespace", "MetricName", "Dimensions")},
        "Period": alarm["Period"], "Stat": alarm["Statistic"]}}]]
    stat = query["MetricStat"]
    assert stat["Metric"]["MetricName"] == "StalledClaims"
    assert stat["Metric"]["Namespace"] == svc.metrics_namespace
    assert stat["Stat"] == "Sum" and stat["Period"] == 300
    assert query.get("ReturnData", True) is True and "Expression" not in query
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["EvaluationPeriods"] == 1 and alarm.get("DatapointsToAlarm", 1) == 1
    assert alarm["TreatMissingData"] == "notBreaching"


def _app_namespaces(tpl: dict[str, Any]) -> set[str]:
    """Every non-AWS metric namespace the template's alarms and dashboard read."""
    found = {m["Namespace"] for a in resources(tpl, "AWS::CloudWatch::Alarm").values() for m in _metrics(a)}
    (dashboard,) = resources(tpl, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    candidates = ("LeaseFence", "LeaseFence/LeaseFenceDefault", "LeaseFence/LeaseFenceFull",
                  "LeaseFence/LeaseFenceDefault/LeaseFence", "LeaseFence/LeaseFenceFull/LeaseFence")
    found |= {ns for ns in candidates if f'[\\"{ns}\\",' in body}
    return {ns for ns in found if not str(ns).startswith("AWS/")}


def test_metrics_namespace_is_per_deployment(synth) -> None:
    """Two stacks in one app (one account): distinct namespaces, each shared by the functions'
    EMF (POWERTOOLS_METRICS_NAMESPACE), the alarms and the dashboard."""
    seen = {}
    for name in ("default", "full"):
        stack, svc, tpl = _svc(synth, name)
        # One per service: the stack's name and the service's path below it.
        assert svc.metrics_namespace == f"LeaseFence/{stack.stack_name}/LeaseFence"
        functions = resources(tpl, "AWS::Lambda::Function").values()
        env_namespaces = {f["Properties"]["Environment"]["Variables"].get("POWERTOOLS_METRICS_NAMESPACE")
                          for f in functions if "Environment" in f["Properties"]
                          and "LEASEFENCE_TABLE" in f["Properties"]["Environment"]["Variables"]}
        assert env_namespaces == {svc.metrics_namespace}
        assert _app_namespaces(tpl) == {svc.metrics_namespace}
        seen[name] = svc.metrics_namespace
    assert seen["default"] != seen["full"]


def test_observability_reads_the_namespace_from_the_environment() -> None:
    import subprocess
    import sys

    layers = Path(__file__).resolve().parents[2] / "layers"
    script = ("import sys; sys.path.insert(0, %r); from leasefence import observability as o; "
              "print(o.NAMESPACE, o.metrics.namespace)" % str(layers))
    import os

    env = {**os.environ, "POWERTOOLS_METRICS_NAMESPACE": "LeaseFence/Staging",
           "POWERTOOLS_TRACE_DISABLED": "true", "AWS_DEFAULT_REGION": "eu-west-1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert out == ["LeaseFence/Staging", "LeaseFence/Staging"]


def test_async_invocations_fail_to_an_alarmed_queue(variant) -> None:
    """Sweeper and worker: no Lambda retries of a failed async invocation (the next tick runs),
    events older than a minute dropped, failures to an encrypted TLS-only queue with an alarm."""
    name, stack, svc, tpl = variant
    template = Template.from_json(tpl)
    topic = {"Ref": logical_id(stack, svc.alarm_topic)}
    pairs = [(svc.sweeper.function, svc.sweeper.failure_queue), (svc.worker.function, svc.worker.failure_queue)]
    queues = {logical_id(stack, q) for _, q in pairs}
    assert len(queues) == 2 and not queues & {logical_id(stack, svc.sweeper.schedule.dlq),
                                              logical_id(stack, svc.worker.schedule.dlq)}
    for fn, queue in pairs:
        qid = logical_id(stack, queue)
        template.has_resource_properties("AWS::Lambda::EventInvokeConfig", {
            "FunctionName": {"Ref": logical_id(stack, fn.function)},
            "Qualifier": invoked_qualifier(stack, fn),
            "MaximumRetryAttempts": 0,
            "MaximumEventAgeInSeconds": 60,
            "DestinationConfig": {"OnFailure": {"Destination": getatt(qid)}},
        })
        q = props(tpl, qid)
        if name == "default":
            assert q["SqsManagedSseEnabled"] is True
        else:
            assert q["KmsMasterKeyId"] == getatt(logical_id(stack, svc.encryption_key))
        assert q["MessageRetentionPeriod"] == 14 * 24 * 3600
        (qpolicy,) = [p["Properties"] for p in resources(tpl, "AWS::SQS::QueuePolicy").values()
                      if p["Properties"]["Queues"] == [{"Ref": qid}]]
        assert _denies_insecure_transport(qpolicy)
        template.has_resource_properties("AWS::CloudWatch::Alarm", {
            "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible",
            "Dimensions": [{"Name": "QueueName", "Value": getatt(qid, "QueueName")}],
            "Statistic": "Maximum", "Threshold": 1, "EvaluationPeriods": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "AlarmActions": [topic], "OKActions": [topic],
        })
    # The API function is invoked synchronously: no async config of its own.
    configs = [c["Properties"]["FunctionName"] for c in resources(tpl, "AWS::Lambda::EventInvokeConfig").values()]
    assert {"Ref": logical_id(stack, svc.api.function.function)} not in configs and len(configs) == 2


def test_one_log_level_drives_powertools_and_lambda(variant) -> None:
    """log_level sets POWERTOOLS_LOG_LEVEL and Lambda's JSON log filtering alike, on every function."""
    name, stack, svc, tpl = variant
    level = "INFO" if name == "default" else "DEBUG"
    assert svc.log_level == level
    functions = [svc.api.function.function, svc.sweeper.function.function, svc.worker_function]
    if svc.user_pool is not None and svc.user_pool.pre_token is not None:
        functions.append(svc.user_pool.pre_token.function)
    for fn in functions:
        f = props(tpl, logical_id(stack, fn))
        assert f["LoggingConfig"]["LogFormat"] == "JSON"
        assert f["LoggingConfig"]["ApplicationLogLevel"] == level
        assert f["LoggingConfig"]["SystemLogLevel"] == level
        env = f["Environment"]["Variables"]
        if "POWERTOOLS_LOG_LEVEL" in env:
            assert env["POWERTOOLS_LOG_LEVEL"] == level
