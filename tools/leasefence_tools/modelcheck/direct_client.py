"""A boto3 DynamoDB client for the model check that hands each item request to moto's DynamoDB
handler in this process: no HTTP stub, no signing, no endpoint resolution, no event hooks.

The engine cannot tell: it calls the same methods with the same arguments and gets the same
answers and the same exceptions. The request is serialized by botocore's own JSON serializer and
parsed by moto's own request parser (what moto's HTTP path does); moto's handler method runs as
it would (its validation, condition expressions and update expressions, its item size limit);
its answer or its error body is parsed by botocore's own response parser, modeled error fields
(the refused item, the cancellation reasons) included, and an error is raised as the client's
own exception class. What is skipped: botocore's retries (moto in process never throttles) and
parameter validation (the engine's requests are well formed; a malformed one still fails in
moto's parser or handler). Any other method (``create_table``, ``describe_table``...) goes to the
real boto3 client.
"""

from __future__ import annotations

import functools
from typing import Any

from botocore.parsers import create_parser
from botocore.serialize import create_serializer

#: The item-level actions served in process (boto3 method name -> DynamoDB action).
ACTIONS = {
    "get_item": "GetItem",
    "put_item": "PutItem",
    "update_item": "UpdateItem",
    "delete_item": "DeleteItem",
    "query": "Query",
    "scan": "Scan",
    "transact_write_items": "TransactWriteItems",
    "transact_get_items": "TransactGetItems",
    "batch_get_item": "BatchGetItem",
    "batch_write_item": "BatchWriteItem",
}
_JSON = "application/x-amz-json-1.0"


class DirectClient:
    """Wraps a boto3 DynamoDB client made under ``mock_aws`` (region and account as moto's
    default backend); the item actions bypass it, the rest is delegated to it."""

    def __init__(self, client: Any, account: str, region: str) -> None:
        self._client = client
        self._account, self._region = account, region
        self.meta = client.meta
        self.exceptions = client.exceptions
        self._service = client.meta.service_model
        self._serializer = create_serializer(self._service.protocol, include_validation=False)
        self._parser = create_parser(self._service.protocol)
        self.requests = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        action = ACTIONS.get(name)
        if action is None:
            return getattr(self._client, name)
        return functools.partial(self._call, action)

    def _call(self, action: str, **params: Any) -> dict[str, Any]:
        self.requests += 1
        operation = self._service.operation_model(action)
        body = self._serializer.serialize_to_request(params, operation)["body"]
        status, answer = self.send(operation, body)
        return self._answer(operation, status, answer)

    def send(self, operation: Any, body: bytes) -> tuple[int, bytes]:
        """moto's answer to one request: its HTTP status and its body."""
        from moto.core.parse import PROTOCOL_PARSERS
        from moto.dynamodb.responses import DynamoHandler
        from werkzeug.datastructures import Headers, MultiDict
        from werkzeug.exceptions import HTTPException

        action = operation.name
        handler = DynamoHandler()
        handler.current_account, handler.region = self._account, self._region
        handler.querystring = {}
        handler.headers = {"X-Amz-Target": f"DynamoDB_20120810.{action}", "Content-Type": _JSON}
        handler.response_headers = {}
        parser = PROTOCOL_PARSERS[self._service.protocol](operation, map_type=dict)
        handler.params = parser.parse(
            {
                "method": "POST",
                "values": MultiDict(),
                "headers": Headers(),
                "body": body,
                "url_path": "/",
                "url_params": {},
            }
        )
        handler.body = handler.params
        try:
            status, _, answer = handler.serialized(getattr(handler, _snake(action))())
        except HTTPException as error:  # moto's DynamoDB errors (JsonRESTError)
            status, answer = error.code or 400, error.get_body()
        return status, answer.encode() if isinstance(answer, str) else answer

    def _answer(self, operation: Any, status: int, answer: bytes) -> dict[str, Any]:
        raw = {"status_code": status, "headers": {"content-type": _JSON}, "body": answer}
        parsed: dict[str, Any] = self._parser.parse(raw, operation.output_shape)
        if status < 300:
            return parsed
        code = parsed.get("Error", {}).get("Code")
        shape = self._service.shape_for_error_code(code) if code else None
        if shape is not None:
            parsed.update(self._parser.parse(raw, shape))
        raise self.exceptions.from_code(code)(parsed, operation.name)


@functools.cache
def _snake(action: str) -> str:
    from moto.core.utils import camelcase_to_underscores

    return camelcase_to_underscores(action)
