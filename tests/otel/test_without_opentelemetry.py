"""Without OpenTelemetry installed nothing changes and nothing breaks: a fresh interpreter with
the ``opentelemetry`` package hidden enqueues with a trace context, claims across a takeover and
runs a handler."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_nothing_is_traced_and_nothing_breaks_without_opentelemetry(ddb, spec):
    creds = ddb._get_credentials().get_frozen_credentials()
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["opentelemetry"] = None  # any import of it fails, as when not installed
        import boto3
        from leasefence import Engine, otel
        from leasefence.clock import ManualClock
        from leasefence.schema import TableSpec
        from leasefence.tracecontext import TraceContext
        from leasefence.worker import EngineBackend, FunctionHandler, Reconciled, Worker

        assert not otel.enabled() and otel.current_trace_context() is None
        with otel.producer_span("ledger", "acme", "op"):
            pass
        client = boto3.client(
            "dynamodb", endpoint_url={ddb.meta.endpoint_url!r}, region_name={ddb.meta.region_name!r},
            aws_access_key_id={creds.access_key!r}, aws_secret_access_key={creds.secret_key!r},
            aws_session_token={creds.token!r},
        )
        clock = ManualClock()
        engine = Engine(client=client, spec=TableSpec(table_name={spec.table_name!r},
                        due_shards={spec.due_shards}, sweep_shards={spec.sweep_shards}), clock=clock)
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        engine.enqueue("acme", "op", "ledger", "sha256:" + "6" * 64,
                       trace_context=TraceContext(parent, "v=1"))
        first = engine.claim_next("acme", "w1", lease_ms=1000)
        assert first.traceparent == parent and first.tracestate == "v=1"  # handed on unchanged
        clock.advance(1001)
        ran = []
        worker = Worker(EngineBackend(engine, ["acme"]),
                        {{"ledger": FunctionHandler(lambda job: ran.append(job.claim.traceparent),
                                                    lambda job: Reconciled.not_done())}},
                        worker_id="w2")
        assert worker.run_once() and ran == [parent]
        assert engine.get("acme", "op").state == "succeeded"
        assert "opentelemetry.trace" not in sys.modules
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
