"""The batched HTTP bench (``python -m leasefence_tools.bench.batched_http``) at a tiny scale:
every figure reported, every lifecycle ended, and the batched fleet sending only batch routes
and fewer requests per lifecycle than one request per call."""

from __future__ import annotations

from leasefence_tools.bench import batched_http


def test_the_bench_counts_requests_per_lifecycle_in_both_modes():
    result = batched_http.measure(operations=12, workers=4, job_ms=300, lease_ms=900)
    one, batched = result["one_at_a_time"], result["batched"]
    # One at a time: an enqueue, a claim, a completion each (and renewals, idle polls).
    assert one["by_route"]["POST /v1/operations"] == 1
    assert one["by_route"]["POST /v1/operations/{id}/complete"] == 1 and one["operations"] >= 12
    assert one["by_route"]["POST /v1/claims"] >= 1
    assert all(route.startswith("POST /v1/batch/") for route in batched["by_route"]), batched
    assert batched["by_route"]["POST /v1/batch/enqueue"] == round(1 / 20, 3)  # 12 + 8 items, one request
    assert batched["requests_per_lifecycle"] < one["requests_per_lifecycle"]
    assert "batched:" in batched_http.render(result)
    # The fleet's claims and closes go in rounds, a close carrying its worker's next claim: fewer
    # rounds with a claim or a close than the claims and closes they carried.
    rounds = batched["by_route"]["POST /v1/batch/work"]
    carried = batched["items_per_request"]
    assert carried["POST /v1/batch/work: claim"] + carried["POST /v1/batch/work: finish"] > 1.5, carried
    figures = batched_http.fleet_figures(result)
    assert figures["lifecycle_requests"] == round(rounds + 1 / 20, 4)
    assert figures["leases_per_renewal"] >= 1
    # Each claim that rode with its worker's close named it (after): all but each worker's
    # first claim and a claim after an empty poll.
    assert figures["claims_after_close"] == batched["claims_after_close"]
    assert 0.5 < figures["claims_after_close"] <= 1, batched
    assert one["claims_after_close"] == 0
