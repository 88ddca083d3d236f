"""The one price table the bench uses: AWS list prices in us-east-1 and the alternatives', in USD.

Read on :data:`READ_ON` from stored copies of the vendors' pages (the ``search`` tool's ``pages``
and ``docs`` corpora, not the live web). Each price says where it was read and how well:

* ``vendor``: the figure is in the text of the vendor's own page (``source``);
* ``secondary``: the vendor's page renders its tables client-side, so its stored text has no
  figure; the figure is from the page named in ``checked_in`` (third-party, dated), and agrees
  with the figure this project used before;
* ``unverified``: no page could confirm it; the figure given in issue 16 (or elsewhere, named),
  kept and marked.

Free tiers are left out (they are per account, not per job). First pricing tiers throughout.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

REGION = "us-east-1"
READ_ON = "2026-11-30"
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
        "unverified",
        "issue 16 ('about $8 per million'); a transcription of the vendor page dated "
        "2026-09-20 (raw.githubusercontent.com/api-evangelist/aws-lambda, "
        "plans/aws-lambda-plans-pricing.yml) lists '$8.00/M' as an example rate",
        "data written and retained are charged too: no figure could be verified, not priced here",
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
}


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
