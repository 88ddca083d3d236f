"""Schemathesis hooks for the fuzz test (tests/api/test_api_fuzz.py; ``SCHEMATHESIS_HOOKS``).

One hook, and only for rules the OpenAPI document states in words because no JSON Schema can
state them: a job type's ``lease_seconds`` must not exceed its ``max_lease_seconds`` (a comparison
of two fields), its ``payload_schema`` must be a JSON Schema leasefence can compile, and each field
its ``approval_summary`` names must be a property of that schema, and an integer inside a
payload's arrays and objects must lie within +-(2**53 - 1) (the document's ``IJsonValue`` states
that bound in its description: a schema that recurses to state it breaks generated clients). A
schema-valid declaration refused for one of these (422 ``invalid_request`` with exactly that
message) is not counted as "a schema-valid request rejected". Every other refusal of a
schema-valid request still fails the run.
"""

from __future__ import annotations

import json
import re
from typing import Any

import schemathesis

#: (operation, error message prefix) of the refusals the document states in words only.
STATED_IN_WORDS = (
    ("PUT /v1/job-types/{job_type}", "lease_seconds must not exceed max_lease_seconds"),
    ("PUT /v1/job-types/{job_type}", "payload_schema "),
    ("PUT /v1/job-types/{job_type}", "approval_summary names fields the payload_schema does not"),
    ("POST /v1/operations", "payload cannot be canonicalized as I-JSON (RFC 8785): IntegerDomainError"),
    ("POST /v1/batch/enqueue", "payload cannot be canonicalized as I-JSON (RFC 8785): IntegerDomainError"),
)
#: A batch's refusal names its item first ("items.2: ...").
ITEM_PREFIX = re.compile(r"^items\.\d+: ")


def _error(response: Any) -> dict[str, Any]:
    try:
        return json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return {}


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:  # noqa: ARG001 - the hook's signature
    """False (drop it) only for a 422 one of :data:`STATED_IN_WORDS` explains."""
    if failure.code != "ST202" or response.status_code != 422:
        return True
    error = _error(response)
    label = f"{case.method} {case.path}"
    return not (
        error.get("code") == "invalid_request"
        and any(
            label == operation
            and ITEM_PREFIX.sub("", str(error.get("message", ""))).startswith(prefix)
            for operation, prefix in STATED_IN_WORDS
        )
    )
