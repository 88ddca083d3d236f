"""`leasefence bench --only local-stack`: HTTP workers against `leasefence local --samples` (a
real process); the report's shape, never its speed."""

from __future__ import annotations

from leasefence_tools.bench import local_stack


def test_the_local_stack_section_reports_rate_routes_and_endpoint_operations():
    result = local_stack.measure(operations=12, workers=3)
    assert result["errors"] == []
    assert result["lifecycles"] == 12 and result["workers"] == 3
    assert result["lifecycles_per_s"] > 0
    assert set(result["client_p50_ms"]) == {"claim", "heartbeat", "complete"}
    handler = result["handler"]
    for route in ("POST /v1/claims", "POST /v1/operations/{id}/heartbeat", "POST /v1/operations/{id}/complete"):
        assert handler[f"api {route}"]["count"] >= 12
        assert handler[f"api {route}"]["p50_ms"] > 0
    # make run's stack runs the API function in execution environments of its own: every call
    # of the run was served in one of them, and their CPU is counted with the stack's.
    assert sum(result["environments"].values()) >= 36
    if result["stack_cpu_ms_per_lifecycle"] is not None:
        assert result["environments_cpu_ms_per_lifecycle"] > 0
    held, waited = result["endpoint"]["held"], result["endpoint"]["waited"]
    assert held["UpdateItem"]["count"] >= 36  # claim, heartbeat and complete each write once
    assert held["Query"]["count"] >= 12
    assert set(waited) == set(held)
    if result["stack_cpu_ms_per_lifecycle"] is not None:
        assert result["stack_cpu_ms_per_lifecycle"] > 0
    text = local_stack.render(result)
    assert "lifecycles/s" in text and "UpdateItem" in text and "api POST /v1/claims" in text
