"""When the functions trace, and the no-op Powertools tracing provider used when they do not.

Powertools' ``Tracer`` imports the X-Ray SDK even when tracing is off (its default provider is the
SDK's recorder) and, unless told otherwise, patches every library the SDK knows (``patch_all``:
requests, httplib, sqlite3 ...). :mod:`leasefence.observability` instead builds the Tracer with
:class:`NoTracing` when :func:`tracing_enabled` is false, and otherwise patches only
:data:`TRACED_MODULES`.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from aws_lambda_powertools.tracing.base import BaseProvider, BaseSegment

#: What the Tracer patches: botocore, so every AWS call is a subsegment. The functions make no
#: other outbound calls (a worker's own handlers may: patch theirs with ``tracer.patch``).
TRACED_MODULES = ("botocore",)

_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})


def tracing_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process sends X-Ray traces. Powertools' rules: in Lambda
    (``LAMBDA_TASK_ROOT``), but not under SAM local or Chalice, and not turned off with
    ``POWERTOOLS_TRACE_DISABLED``; and the X-Ray SDK is installed (it comes with the
    AWS-managed Powertools layer, not with the core layer)."""
    env = os.environ if env is None else env
    if env.get("POWERTOOLS_TRACE_DISABLED", "false").strip().lower() in _TRUE:
        return False
    if (
        not env.get("LAMBDA_TASK_ROOT")
        or env.get("AWS_SAM_LOCAL")
        or env.get("AWS_CHALICE_CLI_MODE")
    ):
        return False
    return importlib.util.find_spec("aws_xray_sdk") is not None


class NoSegment(BaseSegment):
    """A segment that records nothing."""

    def close(self, end_time: int | None = None) -> None:
        pass

    def add_subsegment(self, subsegment: Any) -> None:
        pass

    def remove_subsegment(self, subsegment: Any) -> None:
        pass

    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass

    def add_exception(self, exception: BaseException, stack: Any, remote: bool = False) -> None:
        pass


class NoTracing(BaseProvider):
    """A tracing provider that records nothing and imports nothing."""

    @contextmanager
    def in_subsegment(
        self,
        name: str | None = None,  # noqa: ARG002 - the provider's signature
        **kwargs: Any,  # noqa: ARG002
    ) -> Generator[NoSegment, None, None]:
        yield NoSegment()

    @asynccontextmanager
    async def in_subsegment_async(
        self,
        name: str | None = None,  # noqa: ARG002 - the provider's signature
        **kwargs: Any,  # noqa: ARG002
    ) -> AsyncGenerator[NoSegment, None]:
        yield NoSegment()

    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass

    def patch(self, modules: Sequence[str]) -> None:
        pass

    def patch_all(self) -> None:
        pass
