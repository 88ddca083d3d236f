"""Monitoring (``monitoring/``): alarms that can fire and cannot break the deploy (each reads
metrics the code emits, and every emitted metric is alarmed or explained; each exists only where
its metric can be emitted, never reads more metrics than CloudWatch allows, waits for its
schedule), a dashboard that graphs every emitted metric (opt in: ``dashboard``, on in the full
stack), the encrypted alarm topic, one metrics namespace per service, and no alarm, topic or
dashboard with ``alarms=False``."""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk.assertions import Template
from tests.support.infra import as_list, logical_id, props, resources, service_of
from leasefence import schema
from leasefence.metrics import Metric
from leasefence_infra import LeaseFenceService, WorkerProps
from leasefence_infra.monitoring import (
    APP_ALARMS,
    APP_METRICS,
    MAX_ALARM_METRICS,
    METRICS,
    PUBLISHER,
    UNALARMED_METRICS,
    WORKER,
    not_running_window,
    schedule_interval_seconds,
)
from leasefence_infra.stack import DEMO_WORKER_HANDLERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "leasefence"
#: Metric sinks: ``events("X", n)`` / ``_events`` (engine, worker runtime, targets), ``self.count``
#: (stream publisher and dispatch), ``add_metric(name="X")`` (Powertools), ``event="X"`` keywords
#: handed to the engine's closing writes.
_SINK_ATTRIBUTES = {"events", "_events", "record_event"}


def _shipped_sources() -> Iterator[Path]:
    """The code that runs in Lambda: the core layer (the runtime package as it is) and the
    handlers."""
    yield from sorted(PACKAGE.rglob("*.py"))
    yield from sorted((ROOT / "functions").rglob("*.py"))


def emitted_metrics() -> dict[str, set[str]]:
    """Every metric name the shipped code emits, with the files that emit it (read from the code,
    not from a list: a renamed metric shows up here and its alarm's test fails)."""
    found: dict[str, set[str]] = {}
    trees = {path: ast.parse(path.read_text(), filename=str(path)) for path in _shipped_sources()}
    # Module-level string constants (``ACCESS_DENIED_EVENT = "PayloadAccessDenied"``), so a sink
    # called with a constant's name counts too.
    constants = {
        target.id: node.value.value
        for tree in trees.values() for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets if isinstance(target, ast.Name)
    }
    for path, tree in trees.items():
        for node in ast.walk(tree):
            # A member of the metric-name enum, wherever the code names one (``ctx.count(Metric.X)``,
            # ``event=Metric.X``, ``ACCESS_DENIED_EVENT = Metric.X``): every emission names one.
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "Metric"):
                found.setdefault(Metric[node.attr].value, set()).add(str(path.relative_to(ROOT)))
            if not isinstance(node, ast.Call):
                continue
            names: list[Any] = []
            func = node.func
            attribute = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if attribute in _SINK_ATTRIBUTES and node.args:
                names.append(node.args[0])
            if (attribute == "count" and isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name) and func.value.id == "self" and node.args):
                names.append(node.args[0])
            for keyword in node.keywords:
                if (attribute == "add_metric" and keyword.arg == "name") or keyword.arg == "event":
                    names.append(keyword.value)
            for name in names:
                value = constants.get(name.id) if isinstance(name, ast.Name) else getattr(name, "value", None)
                if isinstance(value, str):
                    found.setdefault(value, set()).add(str(path.relative_to(ROOT)))
    return found


EMITTED = emitted_metrics()
#: TakeoverRate (a ratio, not a row of APP_ALARMS) reads these two.
RATIO_ALARMED = {"Claims", "Takeovers"}


def test_the_emitted_metrics_are_found_in_the_code() -> None:
    """The reader of the code finds what the engine, the sweeper, the runtime and the stream
    functions are known to emit (so an empty or partial scan cannot pass the tests below)."""
    for name, where in {
        "Claims": "layers/leasefence/engine/_claim.py",
        "UnknownParked": "layers/leasefence/engine/_fenced.py",
        "ApprovalsExpired": "layers/leasefence/engine/_housekeeping.py",
        "OldestDueAgeSeconds": "functions/sweeper/handler.py",
        "StalledClaims": "layers/leasefence/worker/_runtime.py",
        "PayloadMissing": "layers/leasefence/worker/_runtime.py",
        "HistoryEntries": "layers/leasefence/streams/publisher.py",
        "StreamDispatched": "layers/leasefence/worker/dispatch.py",
        "ClaimLatency": "layers/leasefence/observability.py",
        "PayloadAccessDenied": "layers/leasefence/payloads.py",  # through a constant
    }.items():
        assert where in EMITTED.get(name, set()), (name, EMITTED.get(name))


def test_every_alarmed_metric_is_emitted_somewhere() -> None:
    for spec in APP_ALARMS:
        for name in spec.metrics:
            assert name in EMITTED, f"{spec.key} alarms on {name}, which no shipped code emits"


def test_every_emitted_metric_is_alarmed_or_explained() -> None:
    alarmed = {name for spec in APP_ALARMS for name in spec.metrics} | RATIO_ALARMED
    unexplained = sorted(set(EMITTED) - alarmed - set(UNALARMED_METRICS))
    assert unexplained == [], "alarm these metrics (APP_ALARMS) or say why not (UNALARMED_METRICS)"
    assert sorted(set(UNALARMED_METRICS) - set(EMITTED)) == []  # no stale explanation
    assert sorted((alarmed - RATIO_ALARMED) & set(UNALARMED_METRICS)) == []


@pytest.mark.parametrize("spec", APP_ALARMS, ids=lambda s: s.key)
def test_each_alarm_is_scoped_to_where_its_metric_is_emitted(spec) -> None:
    """A worker-runtime metric (the in-process worker) is alarmed only with the worker function;
    any other is emitted by an always-deployed function (engine, sweeper)."""
    runtime_only = all(
        where.startswith("layers/leasefence/worker/") for name in spec.metrics for where in EMITTED[name]
    )
    assert (spec.emitted_by == WORKER) == runtime_only, (spec.key, {n: EMITTED[n] for n in spec.metrics})


def test_every_emitted_metric_has_one_row_in_the_metric_table() -> None:
    """The metric factory's table (unit, statistic, emitter) is the list of names the code
    emits: no metric without a row, no row for a metric nothing emits."""
    assert sorted(set(EMITTED) - set(METRICS)) == []
    assert sorted(set(METRICS) - set(EMITTED)) == []


@pytest.mark.parametrize("name", sorted(METRICS))
def test_each_metric_row_names_who_emits_it(name: str) -> None:
    """A worker row is emitted only by the worker runtime or the targets its handlers use, a
    publisher row only by the publisher, and a service row by code that always runs (so its
    widget belongs on every dashboard)."""
    places = EMITTED[name]
    worker_only = all(p.startswith(("layers/leasefence/worker/", "layers/leasefence/targets/"))
                      for p in places)
    publisher_only = places == {"layers/leasefence/streams/publisher.py"}
    expected = WORKER if worker_only else PUBLISHER if publisher_only else "service"
    assert METRICS[name].emitted_by == expected, (name, places)


def _dashboard_body(template: dict[str, Any]) -> str:
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    return json.dumps(dashboard["Properties"]["DashboardBody"])


def test_the_dashboard_graphs_every_emitted_metric(synth) -> None:
    """The full stack has the worker and the dashboard: every metric the code emits has a graph."""
    body = _dashboard_body(synth.template_json("full"))
    missing = sorted(m for m in EMITTED if f'\\"{m}\\"' not in body)
    assert missing == []


def test_the_dashboard_is_opt_in_and_the_alarms_are_on_by_default(synth) -> None:
    stack, tpl = synth.stacks["default"], synth.template_json("default")
    assert stack.service.dashboard is None and resources(tpl, "AWS::CloudWatch::Dashboard") == {}
    assert "DashboardName" not in tpl["Outputs"]
    assert len(resources(tpl, "AWS::CloudWatch::Alarm")) == len(stack.service.monitoring.alarms) > 20
    assert "AlarmTopicArn" in tpl["Outputs"]


def test_without_alarms_there_is_no_alarm_topic_or_dashboard(prebuilt_layer: Path) -> None:
    """``alarms=False``: nothing of monitoring is deployed, and the API function has no alert
    route to name (the go/no-go report says so)."""
    stack = Stack(App(), "NoAlarms")
    svc = LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://issuer.example.com/", jwt_audience=["a"],
                            alarms=False, core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    tpl = Template.from_stack(stack).to_json()
    for kind in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm", "AWS::CloudWatch::Dashboard",
                 "AWS::SNS::Topic"):
        assert resources(tpl, kind) == {}, kind
    assert svc.monitoring is None and svc.alarm_topic is None and svc.dashboard is None
    assert svc.attributes()["alarm_topic_arn"] is None
    assert "LEASEFENCE_ALARM_TOPIC" not in json.dumps(tpl)


@pytest.mark.parametrize("overrides, message", [
    ({"alarms": False, "dashboard": True}, "dashboard needs alarms=True"),
    ({"alarms": "no"}, "alarms must be True or False"),
])
def test_monitoring_options_that_contradict_are_refused(overrides, message) -> None:
    stack = Stack(App(), "Contradiction")
    with pytest.raises((ValueError, TypeError), match=message):
        LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://issuer.example.com/", jwt_audience=["a"],
                          core_layer=lambda_.Code.from_inline("x"), **overrides)


def test_without_the_worker_the_dashboard_graphs_no_worker_metric(prebuilt_layer: Path) -> None:
    stack = Stack(App(), "NoWorker")
    LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://issuer.example.com/", jwt_audience=["a"],
                      dashboard=True, core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    body = _dashboard_body(Template.from_stack(stack).to_json())
    shown = {m for m in METRICS if f'\\"{m}\\"' in body}
    assert shown == {m for m, spec in METRICS.items() if spec.emitted_by != WORKER}


def _alarm_metrics(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    p = alarm["Properties"]
    if "MetricName" in p:
        return [{k: p.get(k) for k in ("Namespace", "MetricName", "Dimensions")}]
    return [m["MetricStat"]["Metric"] for m in p.get("Metrics", []) if "MetricStat" in m]


@pytest.mark.parametrize("name", ["default", "full"])
def test_every_alarm_in_the_templates_reads_emitted_metrics_of_its_own_namespace(synth, name) -> None:
    stack = synth.stacks[name]
    template = synth.template_json(name)
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    own = set()
    for alarm in alarms.values():
        metrics = _alarm_metrics(alarm)
        assert 1 <= len(metrics) <= MAX_ALARM_METRICS
        for metric in metrics:
            if not str(metric["Namespace"]).startswith("AWS/"):
                assert metric["Namespace"] == stack.service.metrics_namespace
                assert metric["MetricName"] in EMITTED, metric["MetricName"]
                own.add(metric["MetricName"])
    expected = {n for spec in APP_ALARMS for n in spec.metrics} | RATIO_ALARMED
    assert own == expected  # both stacks have the worker: every row of the table is there


# ----------------------------------------------------------------------------- a stack that grows


@pytest.fixture(scope="module")
def grown(prebuilt_layer: Path) -> tuple[Stack, LeaseFenceService, dict[str, Any]]:
    """Two more indexes than today (six: CloudWatch's 10 metrics would be 14 in one sum) and a
    worker on a 30-minute schedule."""
    extra = []
    for gsi in schema.global_secondary_indexes()[:2]:
        more = copy.deepcopy(gsi)
        more["IndexName"] = gsi["IndexName"] + "-more"
        extra.append(more)
    original = schema.global_secondary_indexes
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "global_secondary_indexes", lambda: [*original(), *copy.deepcopy(extra)])
        app = App()
        stack = Stack(app, "Grown")
        svc = LeaseFenceService(
            stack, "LeaseFence", jwt_issuer="https://issuer.example.com/", jwt_audience=["a"],
            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)),
            worker=WorkerProps(handlers=DEMO_WORKER_HANDLERS, tenants=["demo"],
                               schedule=scheduler.ScheduleExpression.rate(Duration.minutes(30))),
        )
        template = Template.from_stack(stack).to_json()
    return stack, svc, template


def test_no_alarm_reads_more_than_ten_metrics_as_indexes_grow(grown) -> None:
    stack, svc, template = grown
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    counts = {lid: len(_alarm_metrics(a)) for lid, a in alarms.items()}
    assert max(counts.values()) <= MAX_ALARM_METRICS, counts
    # Every index (and the table) is still watched for throttles, reads and writes.
    throttled = {
        next((d["Value"] for d in m.get("Dimensions", []) if d["Name"] == "GlobalSecondaryIndexName"), "table")
        for a in alarms.values() for m in _alarm_metrics(a)
        if m["MetricName"] in ("ReadThrottleEvents", "WriteThrottleEvents")
    }
    assert len(schema.global_secondary_indexes()) == 4  # the patch is gone
    assert throttled == {"table", *(g["IndexName"] for g in schema.global_secondary_indexes()),
                         *(g["IndexName"] + "-more" for g in schema.global_secondary_indexes()[:2])}


def test_worker_not_running_waits_for_twice_a_slow_schedule(grown, synth) -> None:
    """rate(30 minutes): no invocation for an hour, not 10 minutes (which would alarm between
    every two ticks, forever)."""
    stack, svc, template = grown
    alarm = props(template, logical_id(stack, svc.monitoring.alarms["WorkerNotRunningAlarm"]))
    assert (alarm["MetricName"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Invocations", 3600, 1)
    assert alarm["ComparisonOperator"] == "LessThanThreshold" and alarm["Threshold"] == 1
    assert alarm["TreatMissingData"] == "breaching"
    # The example app's worker ticks every minute (and the full stack's every 2): 10 minutes.
    for name in ("default", "full"):
        s = synth.stacks[name]
        for key in ("WorkerNotRunningAlarm", "SweeperNotRunningAlarm"):
            a = props(synth.template_json(name), logical_id(s, s.service.monitoring.alarms[key]))
            assert a["Period"] == 600, (name, key)


@pytest.mark.parametrize("expression, interval_s, window_s", [
    ("rate(1 minute)", 60, 600),
    ("rate(2 minutes)", 120, 600),
    ("rate(15 minutes)", 900, 1800),
    ("rate(1 hour)", 3600, 7200),
    ("rate(12 hours)", 43_200, 86_400),
    ("rate(16 hours)", 57_600, 86_400),
    ("cron(* * * * ? *)", 60, 600),
    ("cron(0/20 * * * ? *)", 1200, 2400),
    ("cron(5 * * * ? *)", 3600, 7200),
    ("cron(0 */6 * * ? *)", 21_600, 43_200),
])
def test_not_running_window_is_twice_the_interval(expression, interval_s, window_s) -> None:
    assert schedule_interval_seconds(expression) == interval_s
    interval, window = not_running_window(expression)
    assert (interval.to_seconds(), window.to_seconds()) == (interval_s, window_s)


@pytest.mark.parametrize("expression", [
    "rate(1 day)", "rate(25 hours)", "cron(0 9 ? * MON-FRI *)", "cron(0 9 1 * ? *)",
    "at(2030-01-01T00:00:00)", "cron(7,37 * * * ? *)",
])
def test_schedules_without_a_usable_window_get_no_not_running_alarm(expression) -> None:
    assert not_running_window(expression) is None


def test_an_irregular_worker_schedule_warns_instead_of_alarming_forever(prebuilt_layer: Path) -> None:
    from aws_cdk.assertions import Annotations, Match

    app = App()
    stack = Stack(app, "Weekdays")
    svc = LeaseFenceService(
        stack, "LeaseFence", jwt_issuer="https://issuer.example.com/", jwt_audience=["a"],
        core_layer=lambda_.Code.from_asset(str(prebuilt_layer)),
        worker=WorkerProps(handlers=DEMO_WORKER_HANDLERS, tenants=["demo"],
                           schedule=scheduler.ScheduleExpression.expression("cron(0 9 ? * MON-FRI *)")),
    )
    assert "WorkerNotRunningAlarm" not in svc.monitoring.alarms
    assert "SweeperNotRunningAlarm" in svc.monitoring.alarms
    found = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(".*No WorkerNotRunningAlarm.*"))
    assert len(found) == 1


# ----------------------------------------------------------------------------- one namespace per service


def test_two_services_in_one_stack_have_their_own_namespaces(prebuilt_layer: Path) -> None:
    app = App()
    stack = Stack(app, "Shared")
    layer = lambda_.Code.from_asset(str(prebuilt_layer))
    orders = LeaseFenceService(stack, "Orders", jwt_issuer="https://i.example/", jwt_audience=["a"], core_layer=layer)
    billing = LeaseFenceService(stack, "Billing", jwt_issuer="https://i.example/", jwt_audience=["a"], core_layer=layer)
    assert orders.metrics_namespace == "LeaseFence/Shared/Orders"
    assert billing.metrics_namespace == "LeaseFence/Shared/Billing"
    template = Template.from_stack(stack).to_json()
    for svc in (orders, billing):
        for alarm in svc.monitoring.alarms.values():
            for metric in _alarm_metrics({"Properties": props(template, logical_id(stack, alarm))}):
                if not str(metric["Namespace"]).startswith("AWS/"):
                    assert metric["Namespace"] == svc.metrics_namespace
        env = props(template, logical_id(stack, svc.api.function.function))["Environment"]["Variables"]
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == svc.metrics_namespace


def test_two_services_given_one_namespace_are_refused_at_synth(prebuilt_layer: Path) -> None:
    app = App()
    stack = Stack(app, "Clash")
    layer = lambda_.Code.from_asset(str(prebuilt_layer))
    for name in ("Orders", "Billing"):
        LeaseFenceService(stack, name, jwt_issuer="https://i.example/", jwt_audience=["a"], core_layer=layer,
                          metrics_namespace="Acme/Jobs")
    with pytest.raises(Exception, match="share the metrics namespace 'Acme/Jobs'"):
        app.synth()


def test_the_dashboard_reads_the_services_namespace(synth) -> None:
    svc = synth.stacks["full"].service
    (dashboard,) = resources(synth.template_json("full"), "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    assert f'[\\"{svc.metrics_namespace}\\",' in body


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


def test_dashboard_shows_every_app_metric(synth) -> None:
    svc, tpl = synth.stacks["full"].service, synth.template_json("full")
    (dashboard,) = resources(tpl, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for name in APP_METRICS:
        assert f'\\"{name}\\"' in body, name
    assert f'\\"{svc.metrics_namespace}\\"' in body and '\\"service\\",\\"leasefence\\"' in body


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
    body = json.dumps([d["Properties"]["DashboardBody"]
                       for d in resources(tpl, "AWS::CloudWatch::Dashboard").values()])
    candidates = ("LeaseFence", "LeaseFence/LeaseFenceDefault", "LeaseFence/LeaseFenceFull",
                  "LeaseFence/LeaseFenceDefault/LeaseFence", "LeaseFence/LeaseFenceFull/LeaseFence")
    found |= {ns for ns in candidates if f'[\\"{ns}\\",' in body}
    return {ns for ns in found if not str(ns).startswith("AWS/")}


def test_metrics_namespace_is_per_deployment(synth) -> None:
    """Two stacks in one app (one account): distinct namespaces, each shared by the functions'
    EMF (POWERTOOLS_METRICS_NAMESPACE), the alarms and the dashboard."""
    seen = {}
    for name in ("default", "full"):
        stack, svc, tpl = service_of(synth, name)
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
