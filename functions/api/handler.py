"""The API function: every route of the HTTP API (API Gateway HTTP API, payload format 2.0).

Thin on purpose: the entry is ``leasefence.api.app`` and the routes ``leasefence.api.routes`` (the
core layer; the routes are imported on the first request that needs them). This module only
adds the Powertools wiring: structured logs with the request id as correlation id (never the
event: it holds ids and payloads), a trace segment without the response, and one EMF flush per
invocation.
"""

from aws_lambda_powertools.logging import correlation_paths

from leasefence.api.app import handle
from leasefence.observability import logger, metrics, tracer
from leasefence.settings import runtime


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, log_event=False, clear_state=True
)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(raise_on_empty_metrics=False)
def lambda_handler(event, context):
    runtime().prepare()
    return handle(event, context)
