"""Another DynamoDB as the target of the engine's tests and of ``leasefence verify``.

``LEASEFENCE_TEST_DYNAMODB_ENDPOINT`` names it: a URL (dynalite, a proxy, any compatible store),
or ``aws`` for DynamoDB itself with the environment's credentials and region (opt-in: without the
variable everything runs on the embedded endpoint). :class:`ExternalDynamoDB` stands where the
embedded endpoint (:class:`~leasefence_tools.local.embedded.EmbeddedAws`) stands: it probes the
endpoint once (:mod:`leasefence_tools.local.capabilities`, whose scratch table it names with the
run's prefix), creates each table the tests ask for under that prefix
(``LEASEFENCE_TEST_TABLE_PREFIX``, default ``lf-test-<random>``) and, when stopped, deletes the
tables it created and no other. S3 and every other service stay on an embedded endpoint it starts
on first use: the target is DynamoDB.

What the endpoint lacks is named by :attr:`ExternalDynamoDB.lacking`, which adds
:data:`EMBEDDED` (what only the embedded endpoint offers: its clock, its index lag and TTL
deletion fidelity, its internals) to the probe's findings. Tests say what they need by the short
names of :data:`NEEDS` (``@pytest.mark.needs("transactions")``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
from collections.abc import Mapping
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from leasefence_tools.local import capabilities

ENDPOINT_ENV: Final = "LEASEFENCE_TEST_DYNAMODB_ENDPOINT"
PREFIX_ENV: Final = "LEASEFENCE_TEST_TABLE_PREFIX"
#: The endpoint's value that names DynamoDB itself.
AWS: Final = "aws"
#: What only the embedded endpoint offers (a moto endpoint of this repository's own).
EMBEDDED: Final = "embedded endpoint"

#: The names tests use in ``@pytest.mark.needs(...)``, and the capability each stands for.
NEEDS: Final = {
    "transactions": capabilities.TRANSACTIONS,
    "returned_item": capabilities.RETURNED_ITEM,
    "ttl": capabilities.TTL,
    "streams": capabilities.STREAMS,
    "embedded": EMBEDDED,
}


class TableExists(Exception):
    """A table the run was to create is there already."""


class ExternalDynamoDB:
    """A DynamoDB-compatible endpoint as a test target (see the module's text)."""

    def __init__(self, endpoint: str, prefix: str | None = None) -> None:
        self.endpoint = endpoint
        self.prefix = prefix or f"lf-test-{secrets.token_hex(3)}"
        self.capabilities: capabilities.Capabilities | None = None
        self.created: list[str] = []
        self._aux: Any = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ExternalDynamoDB | None:
        env = os.environ if env is None else env
        endpoint = (env.get(ENDPOINT_ENV) or "").strip()
        return cls(endpoint, env.get(PREFIX_ENV) or None) if endpoint else None

    @property
    def name(self) -> str:
        return "DynamoDB (aws)" if self.endpoint == AWS else self.endpoint

    def start(self) -> ExternalDynamoDB:
        """Probe the endpoint (:class:`~leasefence_tools.local.capabilities.UnsuitableEndpoint`
        when it does not answer or cannot create a table)."""
        self.capabilities = capabilities.probe(self.client(), prefix=self.prefix)
        return self

    @property
    def lacking(self) -> dict[str, str]:
        """Each capability the endpoint lacks, with what the probe saw."""
        found = dict(self.capabilities.lacking) if self.capabilities is not None else {}
        found[EMBEDDED] = "the embedded endpoint's clock, index lag and TTL deletion"
        return found

    def header(self) -> str:
        """One line for the start of a run: the target and what it lacks."""
        lacking = ", ".join(f"{c} ({why})" for c, why in self.lacking.items())
        return f"leasefence DynamoDB target: {self.name}, tables {self.prefix}-*; lacks {lacking}"

    def client(self, service: str = "dynamodb") -> Any:
        """A client of this endpoint for DynamoDB (and its streams), else of the embedded one."""
        if service not in ("dynamodb", "dynamodbstreams"):
            return self._embedded().client(service)
        import boto3

        if self.endpoint == AWS:
            return boto3.client(service)
        local = boto3.Session().get_credentials() is None
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=boto3.Session().region_name or "us-east-1",
            **({"aws_access_key_id": "local", "aws_secret_access_key": "local"} if local else {}),
        )

    def own(self, spec: Any) -> Any:
        """``spec`` (a :class:`~leasefence.schema.TableSpec`) renamed ``<prefix>-<its name>``,
        its table to be deleted by :meth:`stop`: for a test that creates the table itself."""
        spec = dataclasses.replace(spec, table_name=f"{self.prefix}-{spec.table_name}")
        self.created.append(spec.table_name)
        return spec

    def create_tables(self, spec: Any = None) -> Any:
        """The table of ``spec`` on the endpoint, named by :meth:`own` (that spec, renamed), TTL
        on where the endpoint has it. :class:`TableExists` when it is there already: a run never
        works in a table it did not create (another run's items would be in its pages)."""
        from leasefence.schema import TableSpec, create_table, create_table_request

        spec = self.own(spec if spec is not None else TableSpec())
        client = self.client()
        try:
            client.create_table(**create_table_request(spec))
        except client.exceptions.ResourceInUseException:
            self.created.remove(spec.table_name)
            raise TableExists(
                f"the table {spec.table_name} exists at {self.name} already: this run only uses "
                f"tables it creates (choose another {PREFIX_ENV})"
            ) from None
        create_table(client, spec, ttl=capabilities.TTL not in self.lacking)
        return spec

    def stop(self) -> list[str]:
        """Delete the tables this created (none other); those it could not delete."""
        client, left = self.client(), []
        for table in self.created:
            try:
                client.delete_table(TableName=table)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                    left.append(table)
            except BotoCoreError:
                left.append(table)
        self.created = []
        if self._aux is not None:
            with contextlib.suppress(Exception):
                self._aux.stop()
            self._aux = None
        return left

    def _embedded(self) -> Any:
        if self._aux is None:
            from leasefence_tools.local.embedded import EmbeddedAws

            self._aux = EmbeddedAws(fidelity=False).start()
        return self._aux

    def __enter__(self) -> ExternalDynamoDB:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
