"""Cognito pre token generation trigger (V2 and V3 events): the claims leasefence needs.

The API reads the caller's tenant from a ``tenant_id`` claim and its rights from the ``scope``
claim (``leasefence/produce``, ``leasefence/work``, ``leasefence/operate``,
``leasefence/approve``). Cognito issues neither claim on its own for users, nor ``tenant_id`` for
app clients; this trigger adds them:

* user tokens (sign-in, hosted UI, refresh): ``tenant_id`` from the user attribute
  ``custom:tenant_id`` (``LEASEFENCE_TENANT_ATTRIBUTE``), else from the one group named
  ``tenant:<id>``; each group ``leasefence-produce`` / ``-work`` / ``-operate`` / ``-approve`` /
  ``-shadow`` adds that scope to the access token;
* client-credentials tokens (V3 event, ``TokenGeneration_ClientCredentials``): the OAuth scopes
  are already in the token; ``tenant_id`` comes from ``LEASEFENCE_CLIENT_TENANTS``, a JSON
  object mapping app client ids to tenants (the event has no user, only the client id), or, for
  the pool's own app client, from ``LEASEFENCE_SERVICE_CLIENT_TENANT``. That client's id exists
  only once the pool does, and the pool names this trigger, so the construct cannot put the id
  into this function's environment (a dependency cycle): it writes it to the SSM parameter
  ``LEASEFENCE_SERVICE_CLIENT_PARAMETER``, read here (boto3, imported only then) and cached for
  :data:`SERVICE_CLIENT_CACHE_S`.

No tenant found (or two candidate tenants, or the parameter unreadable): no ``tenant_id`` is added
and the API refuses the token (fail closed). The trigger never removes anything Cognito put in the
token. Otherwise the standard library only: it needs neither the core layer nor Powertools.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

TENANT_CLAIM = "tenant_id"
TENANT_GROUP_PREFIX = "tenant:"
#: Group name -> scope it grants.
GROUP_SCOPES = {
    "leasefence-produce": "leasefence/produce",
    "leasefence-work": "leasefence/work",
    "leasefence-operate": "leasefence/operate",
    "leasefence-approve": "leasefence/approve",
    # Shadow mode: only with a tenant ``shadow:<id>`` (the API refuses such a tenant without it).
    "leasefence-shadow": "leasefence/shadow",
}
CLIENT_CREDENTIALS = "TokenGeneration_ClientCredentials"
# Copies of leasefence.validation.CONTROL_CHARACTERS and leasefence.limits.MAX_ID_LENGTH: the
# trigger is standard-library only by design (it needs neither the core layer nor Powertools).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_TENANT_LENGTH = 256
#: How long the pool's own client id read from SSM is trusted (a replaced client is recognized
#: within this; a failed read is retried after it).
SERVICE_CLIENT_CACHE_S = 300.0
_service_client: dict[str, Any] = {}
_service_client_lock = threading.Lock()


def _valid_tenant(value: object) -> str | None:
    if (
        isinstance(value, str)
        and 1 <= len(value) <= MAX_TENANT_LENGTH
        and not _CONTROL.search(value)
        and value == value.strip()
    ):
        return value
    return None


def _client_tenants() -> dict[str, str]:
    raw = os.environ.get("LEASEFENCE_CLIENT_TENANTS") or "{}"
    try:
        mapping = json.loads(raw)
    except ValueError:
        logger.error("LEASEFENCE_CLIENT_TENANTS is not JSON: no client gets a tenant")
        return {}
    return {str(k): v for k, v in mapping.items()} if isinstance(mapping, dict) else {}


def _ssm() -> Any:
    import boto3  # in the Lambda runtime; only the pool's own client needs it

    return boto3.client("ssm")


def service_client_id() -> str | None:
    """The id of the pool's own app client (``LEASEFENCE_SERVICE_CLIENT_PARAMETER``), cached;
    None when the parameter is not configured or cannot be read."""
    name = os.environ.get("LEASEFENCE_SERVICE_CLIENT_PARAMETER")
    if not name:
        return None
    now = time.monotonic()
    with _service_client_lock:
        cached = _service_client.get(name)
        if cached is not None and now - cached[1] < SERVICE_CLIENT_CACHE_S:
            return cached[0]
        try:
            value = _ssm().get_parameter(Name=name)["Parameter"]["Value"]
        except Exception as error:  # noqa: BLE001 - fail closed: no tenant, never a guess
            logger.error(
                "service client parameter unreadable", extra={"error_type": type(error).__name__}
            )
            value = None
        _service_client[name] = (value, now)
        return value


def client_tenant(client_id: object) -> str | None:
    """The tenant of an app client: ``LEASEFENCE_CLIENT_TENANTS``, else the pool's own client's
    ``LEASEFENCE_SERVICE_CLIENT_TENANT`` when ``client_id`` is that client."""
    if not isinstance(client_id, str) or not client_id:
        return None
    listed = _client_tenants().get(client_id)
    if listed is not None:
        return _valid_tenant(listed)
    tenant = os.environ.get("LEASEFENCE_SERVICE_CLIENT_TENANT")
    if tenant and client_id == service_client_id():
        return _valid_tenant(tenant)
    return None


def user_tenant(request: dict) -> str | None:
    """The tenant of a user: its tenant attribute, else its one ``tenant:<id>`` group."""
    attribute = os.environ.get("LEASEFENCE_TENANT_ATTRIBUTE") or "custom:tenant_id"
    attributes = request.get("userAttributes") or {}
    if attributes.get(attribute):
        return _valid_tenant(attributes[attribute])
    groups = (request.get("groupConfiguration") or {}).get("groupsToOverride") or []
    tenants = {
        g[len(TENANT_GROUP_PREFIX) :]
        for g in groups
        if isinstance(g, str) and g.startswith(TENANT_GROUP_PREFIX)
    }
    if len(tenants) != 1:
        return None  # none, or ambiguous: no tenant rather than a guess
    return _valid_tenant(tenants.pop())


def claims_for(event: dict) -> tuple[str | None, list[str]]:
    """(tenant, scopes to add) for a pre token generation event."""
    request = event.get("request") or {}
    if event.get("triggerSource") == CLIENT_CREDENTIALS:
        return client_tenant((event.get("callerContext") or {}).get("clientId")), []
    groups = (request.get("groupConfiguration") or {}).get("groupsToOverride") or []
    scopes = sorted({GROUP_SCOPES[g] for g in groups if g in GROUP_SCOPES})
    return user_tenant(request), scopes


def lambda_handler(event: dict, context: object = None) -> dict:
    tenant, scopes = claims_for(event)
    claims = {TENANT_CLAIM: tenant} if tenant else {}
    access: dict = {"claimsToAddOrOverride": claims}
    if scopes:
        access["scopesToAdd"] = scopes
    details: dict = {"accessTokenGeneration": access}
    if event.get("triggerSource") != CLIENT_CREDENTIALS:
        details["idTokenGeneration"] = {"claimsToAddOrOverride": dict(claims)}
    event.setdefault("response", {})["claimsAndScopeOverrideDetails"] = details
    # Never the tenant itself in logs (ids stay out of logs), only whether one was found.
    logger.info(
        "pre token generation",
        extra={
            "trigger": event.get("triggerSource"),
            "tenant_found": bool(tenant),
            "scopes_added": len(scopes),
        },
    )
    return event
