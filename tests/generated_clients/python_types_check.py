"""What mypy must refuse in a client openapi-python-client generated from openapi.json: each
``type: ignore`` below marks an error, and ``--warn-unused-ignores`` fails the check when one is
not (the Python twin of the TypeScript files' ``@ts-expect-error`` lines). A JSON object payload
is the generated ``IJsonValueType0`` (its ``from_dict`` takes a dict)."""

from leasefence_client.models import EnqueueByReference, EnqueueInline, IJsonValueType0

payload = IJsonValueType0.from_dict({"n": 1})
EnqueueInline(job_type="t", payload=payload)  # type: ignore[call-arg]  # operation_id is required
EnqueueInline(operation_id="o", job_type="t", payload=None)  # type: ignore[arg-type]  # never null
EnqueueByReference(operation_id="o", job_type="t", payload_ref="s3://b/k")  # type: ignore[call-arg]
EnqueueInline(operation_id="o", job_type="t", payload=payload)
EnqueueInline(operation_id="o", job_type="t", payload=[1, "two", {"three": None}])
