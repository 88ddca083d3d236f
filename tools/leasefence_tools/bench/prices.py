"""The one price table the bench uses: AWS list prices in us-east-1 and the alternatives', in USD.

Read on :data:`READ_ON` from stored copies of the vendors' pages (the ``search`` tool's ``pages``
and ``docs`` corpora, not the live web). Each price says where it was read and how well:

* ``vendor``: the figure is in the text of the vendor's own page (``source``);
* ``secondary``: the vendor's page renders its tables client-side, so its stored text has no
  figure; the figure is from the page named in ``checked_in`` (third-party, dated), and agrees
  with the figure this project used before;
* ``unverified``: no page could confirm it; the figure given in issue 16 (or elsewhere, named),
  kept and marked; or a widely published list price that no stored page here states.

Free tiers are left out (they are per account, not per job). First pricing tiers throughout.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

REGION = "us-east-1"
READ_ON = "2026-11-30"
#: The prices added for the all-in model (issue 24) were read on this day.
ALL_IN_READ_ON = "2026-12-01"
#: Bytes per GB as AWS bills storage (GiB).
GB = 2**30
#: Days per month as AWS prorates storage (730 hours).
DAYS_PER_MONTH = 730 / 24


@dataclass(frozen=True)
class Price:
    usd: float
    """Dollars per ``per``."""
    per: str
    source: str
    status: str
    """``vendor``, ``secondary`` or ``unverified`` (see the module docstring)."""
    checked_in: str = ""
    note: str = ""
    read_on: str = READ_ON
    """The day the figure was read (from the stored copies named above)."""

    @property
    def per_unit(self) -> float:
        """Dollars for one unit (a price per million or per 1,000 divided out)."""
        for prefix, count in (("million ", 1e6), ("1,000 ", 1e3)):
            if self.per.startswith(prefix):
                return self.usd / count
        return self.usd


_DDB = "https://aws.amazon.com/dynamodb/pricing/on-demand/"
_LAMBDA = "https://aws.amazon.com/lambda/pricing/"
_S3 = "https://aws.amazon.com/s3/pricing/"

PRICES: dict[str, Price] = {
    # ---------------------------------------------------------------- what leasefence uses
    "dynamodb_write_request_unit": Price(
        0.625,
        "million write request units",
        _DDB,
        "secondary",
        "https://airbyte.com/data-engineering-resources/dynamodb-pricing (July 2025: $0.625 "
        "after the 50% on-demand cut of November 2024)",
        "on-demand, Standard table class",
    ),
    "dynamodb_read_request_unit": Price(
        0.125,
        "million read request units",
        _DDB,
        "secondary",
        "https://airbyte.com/data-engineering-resources/dynamodb-pricing (July 2025)",
        "one eventually consistent read of up to 4 KB is half a unit",
    ),
    "dynamodb_storage_gb_month": Price(
        0.25,
        "GB-month",
        "https://aws.amazon.com/dynamodb/pricing/",
        "vendor",
        note="'first 25 GB consumed per month is free, and prices start from $0.25 per GB-month'",
    ),
    "dynamodb_streams_read_by_lambda": Price(
        0.0,
        "stream read request",
        "https://aws.amazon.com/dynamodb/pricing/",
        "unverified",
        note="GetRecords made by a Lambda trigger is not billed (the project's earlier reading; "
        "not re-read)",
    ),
    "api_gateway_http_request": Price(
        1.00,
        "million requests",
        "https://aws.amazon.com/api-gateway/pricing/",
        "secondary",
        "https://www.learnaws.org/2021/01/10/api-gateway-pricing/ (first 300 million a month; "
        "also https://awsforengineers.com/blog/aws-api-gateway-pricing-explained, May 2025)",
        "HTTP API, metered in 512 KB increments",
    ),
    "lambda_request": Price(
        0.20,
        "million requests",
        _LAMBDA,
        "secondary",
        "https://cloudchipr.com/blog/aws-lambda-pricing (2024; the vendor page's Managed "
        "Instances section states the same $0.20 per million requests)",
    ),
    "lambda_gb_second_arm64": Price(
        0.0000133334,
        "GB-second",
        _LAMBDA,
        "secondary",
        "https://cloudchipr.com/blog/aws-lambda-pricing ('First 7.5 Billion GB-seconds per "
        "month: $0.0000133334', Arm)",
        "billed per 1 ms of duration",
    ),
    "s3_put_request": Price(
        0.005,
        "1,000 requests",
        _S3,
        "secondary",
        "https://c3x.dev/blog/s3-request-fees-explained (PUT, COPY, POST, LIST, S3 Standard)",
    ),
    "s3_get_request": Price(
        0.0004,
        "1,000 requests",
        _S3,
        "secondary",
        "https://c3x.dev/blog/s3-request-fees-explained (GET, HEAD, SELECT, S3 Standard)",
    ),
    "s3_storage_gb_month": Price(
        0.023,
        "GB-month",
        _S3,
        "secondary",
        "https://deepeshsoni.com/archives/256 (S3 Standard, first 50 TB)",
    ),
    "eventbridge_custom_event": Price(
        1.00,
        "million events",
        "https://aws.amazon.com/eventbridge/pricing/",
        "secondary",
        "https://cloudburn.io/blog/amazon-eventbridge-pricing (March 2026; per 64 KB chunk)",
    ),
    # ---------------------------------------------------------------- the alternatives
    "sqs_standard_request": Price(
        0.40,
        "million requests",
        "https://aws.amazon.com/sqs/pricing/",
        "secondary",
        "https://cloudburn.io/blog/amazon-sqs-pricing (March 2026: standard queue, first 100 "
        "billion a month; per 64 KB chunk)",
    ),
    "step_functions_standard_transition": Price(
        0.025,
        "1,000 state transitions",
        "https://aws.amazon.com/step-functions/pricing/",
        "vendor",
        note="'US East (N. Virginia) $0.0250' per 1,000; each retry is another transition",
    ),
    "lambda_durable_operation": Price(
        8.00,
        "million durable operations",
        _LAMBDA,
        "secondary",
        "a research note quoting the vendor page ('$8.00 per million durable operations (start "
        "execution, step completion, wait)'); a transcription of the vendor page dated "
        "2026-09-20 (raw.githubusercontent.com/api-evangelist/aws-lambda) lists '$8.00/M'",
        "starting an execution is an operation, and so is each step; data written and retained "
        "are priced separately (lambda_durable_data_*)",
        read_on=ALL_IN_READ_ON,
    ),
    "temporal_cloud_action": Price(
        50.00,
        "million actions",
        "https://docs.temporal.io/cloud/pricing",
        "vendor",
        "github.com/temporalio/documentation docs/evaluate/cloud/pricing.mdx",
        "pay-as-you-go, first 5M actions a month; $25 (issue 16's figure) is the 100M-200M tier; "
        "every activity retry is an action",
    ),
    "temporal_cloud_plan_share": Price(
        0.10,
        "dollar of usage",
        "https://docs.temporal.io/cloud/pricing",
        "vendor",
        note="Developer plan: the greater of $0 or 10% of usage spend",
    ),
    # ---------------------------------------------------------------- the all-in lines (issue 24)
    "dynamodb_pitr_gb_month": Price(
        0.20,
        "GB-month",
        "https://aws.amazon.com/dynamodb/pricing/on-demand/",
        "secondary",
        "https://finops.com.py/services/dynamodb/backups ('Charged based on table size: $0.20 per "
        "GB-month'); AWS's PITR page: the price follows the size of the table and its local "
        "secondary indexes (not its global ones)",
        "continuous backups (point-in-time recovery), on the table's size",
        read_on=ALL_IN_READ_ON,
    ),
    "dynamodb_provisioned_wcu_hour": Price(
        0.00065,
        "WCU-hour",
        "https://aws.amazon.com/dynamodb/pricing/provisioned/",
        "unverified",
        note="the widely published us-east-1 figure; the vendor page renders it client-side and no "
        "stored page states it unambiguously",
        read_on=ALL_IN_READ_ON,
    ),
    "dynamodb_provisioned_rcu_hour": Price(
        0.00013,
        "RCU-hour",
        "https://aws.amazon.com/dynamodb/pricing/provisioned/",
        "unverified",
        note="as dynamodb_provisioned_wcu_hour",
        read_on=ALL_IN_READ_ON,
    ),
    "cloudwatch_logs_ingestion_gb": Price(
        0.50,
        "GB",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "secondary",
        "https://c3x.dev/blog/cloudwatch-logs-cost-optimization ('us-east-1, June 2026: "
        "Ingestion: $0.50 per GB', Standard log class); also hykell.com",
        "Standard log class; Lambda's platform lines, EMF metric lines and API access logs alike",
        read_on=ALL_IN_READ_ON,
    ),
    "cloudwatch_logs_storage_gb_month": Price(
        0.03,
        "GB-month",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "secondary",
        "https://c3x.dev/blog/cloudwatch-logs-cost-optimization ('Storage: $0.03 per GB-month')",
        "billed on compressed size; charged here on raw size (an upper bound)",
        read_on=ALL_IN_READ_ON,
    ),
    "cloudwatch_custom_metric_month": Price(
        0.30,
        "metric-month",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "secondary",
        "https://cal53.calculator.city/cloudwatch-custom-metrics-calculator/ ('$0.30 per metric per "
        "month for the first 10,000 metrics')",
        "one per metric name and dimension set (EMF metrics included)",
        read_on=ALL_IN_READ_ON,
    ),
    "cloudwatch_alarm_month": Price(
        0.10,
        "alarm-month",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "unverified",
        note="standard-resolution metric alarm; the widely published figure",
        read_on=ALL_IN_READ_ON,
    ),
    "cloudwatch_dashboard_month": Price(
        3.00,
        "dashboard-month",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "unverified",
        note="the widely published figure (beyond the free 3 dashboards)",
        read_on=ALL_IN_READ_ON,
    ),
    "xray_trace_recorded": Price(
        5.00,
        "million traces",
        "https://aws.amazon.com/xray/pricing/",
        "vendor",
        note="'$5 per million traces recorded' (the stored German and Vietnamese copies of the "
        "page: 0,000005 USD per trace); retrieval and scans ($0.50 per million) not counted",
        read_on=ALL_IN_READ_ON,
    ),
    "secretsmanager_secret_month": Price(
        0.40,
        "secret-month",
        "https://aws.amazon.com/secrets-manager/pricing/",
        "unverified",
        note="the widely published figure; the log hash key is one secret",
        read_on=ALL_IN_READ_ON,
    ),
    "kms_key_month": Price(
        1.00,
        "key-month",
        "https://aws.amazon.com/kms/pricing/",
        "unverified",
        note="the widely published figure for a customer managed key",
        read_on=ALL_IN_READ_ON,
    ),
    "eventbridge_scheduler_invocation": Price(
        1.00,
        "million invocations",
        "https://aws.amazon.com/eventbridge/pricing/",
        "unverified",
        note="EventBridge Scheduler; the first 14 million a month are free (not counted: free "
        "tiers are left out everywhere)",
        read_on=ALL_IN_READ_ON,
    ),
    "lambda_durable_data_written_gb": Price(
        0.25,
        "GB",
        _LAMBDA,
        "secondary",
        "a research note quoting the vendor page ('$0.25/GB of data written; $0.15/GB-month of "
        "data retained'; 'AWS's example: 1M executions x 4 operations = $32/month')",
        read_on=ALL_IN_READ_ON,
    ),
    "lambda_durable_data_retained_gb_month": Price(
        0.15,
        "GB-month",
        _LAMBDA,
        "secondary",
        "as lambda_durable_data_written_gb",
        read_on=ALL_IN_READ_ON,
    ),
    "temporal_cloud_active_storage_gb_hour": Price(
        0.042,
        "GB-hour",
        "https://docs.temporal.io/cloud/pricing",
        "vendor",
        "github.com/temporalio/documentation docs/evaluate/temporal-cloud/pricing.mdx",
        "history of open workflows",
        read_on=ALL_IN_READ_ON,
    ),
    "temporal_cloud_retained_storage_gb_hour": Price(
        0.00105,
        "GB-hour",
        "https://docs.temporal.io/cloud/pricing",
        "vendor",
        "github.com/temporalio/documentation docs/evaluate/temporal-cloud/pricing.mdx",
        "history of closed workflows, for the namespace's retention",
        read_on=ALL_IN_READ_ON,
    ),
    "temporal_cloud_essentials_plan_month": Price(
        100.00,
        "month",
        "https://docs.temporal.io/cloud/pricing",
        "vendor",
        "github.com/temporalio/documentation docs/evaluate/temporal-cloud/pricing.mdx",
        "Essentials: the greater of $100 a month or 5% of usage; includes 1M actions, 1 GB "
        "active and 40 GB retained storage",
        read_on=ALL_IN_READ_ON,
    ),
}

#: Temporal Cloud's pay-as-you-go action tiers (first 5M at $50 per million, ...): (up to this
#: many actions a month, dollars per million). Same page as ``temporal_cloud_action``.
TEMPORAL_ACTION_TIERS: tuple[tuple[float, float], ...] = (
    (5e6, 50.0),
    (10e6, 45.0),
    (20e6, 40.0),
    (50e6, 35.0),
    (100e6, 30.0),
    (200e6, 25.0),
    (float("inf"), 25.0),  # "over 200M: contact sales": priced at the last published tier
)
#: What the Essentials plan includes, and its share of usage.
TEMPORAL_ESSENTIALS = {"actions": 1e6, "active_gb": 1.0, "retained_gb": 40.0, "share": 0.05}


def usd(name: str) -> float:
    """Dollars for one unit of ``name`` (one request, one GB-second, one GB-month...)."""
    return PRICES[name].per_unit


def table() -> dict[str, Any]:
    """The table as the report carries it."""
    return {
        "region": REGION,
        "read_on": READ_ON,
        "prices": {name: asdict(price) for name, price in PRICES.items()},
    }
