"""Example: a team proves its own handler with leasefence's fault tests, from its own test suite.

Installing leasefence registers the pytest plugin (entry point ``pytest11``): the
``leasefence_*`` fixtures are just there. The handler and its fixture would normally live in
the team's package; they are inline here so the example is complete.
"""

from __future__ import annotations

import contextlib

from leasefence_tools.kit import Target, VerifyEnv
from leasefence.targets.fenced_table import FencedTable
from leasefence.worker import FunctionHandler, Job, Reconciled

# ------------------------------------------------------------ the team's handler (class B)

wallets: FencedTable  # set at start-up from configuration; the fixture below points it


def wallet(job: Job) -> dict[str, str]:
    return {"tenant_id": job.tenant_id, "wallet": job.payload["wallet"]}


def credit(job: Job) -> str:
    job.progress()
    entry = {"op": job.operation_id, "cents": job.payload["cents"]}
    wallets.write(job, wallet(job), {}, append={"credits": [entry]})
    return "credited"


def reconcile_credit(job: Job) -> Reconciled:
    credits = (wallets.read(wallet(job)) or {}).get("credits", [])
    done = any(entry["op"] == job.operation_id for entry in credits)
    return Reconciled.done("credited") if done else Reconciled.not_done()


def raise_wallet_fence(job: Job) -> None:  # on claim: the wallet refuses older fences
    wallets.raise_fence(job, wallet(job))


HANDLERS = {"credit": FunctionHandler(credit, reconcile_credit, raise_wallet_fence)}


# ------------------------------------------------------------ its verification fixture


def build(env: VerifyEnv) -> Target:
    global wallets
    with contextlib.suppress(env.dynamodb.exceptions.ResourceInUseException):
        env.dynamodb.create_table(
            TableName="wallets",
            AttributeDefinitions=[
                {"AttributeName": "tenant_id", "AttributeType": "S"},
                {"AttributeName": "wallet", "AttributeType": "S"},
            ],
            KeySchema=[
                {"AttributeName": "tenant_id", "KeyType": "HASH"},
                {"AttributeName": "wallet", "KeyType": "RANGE"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
    wallets = FencedTable(env.dynamodb, "wallets", clock=env.clock)
    return Target(prepare=lambda tenant_id, operation_id: {"wallet": "w-1", "cents": 500})


# ------------------------------------------------------------ the tests


def test_the_credit_handler_passes_every_check(leasefence_verify) -> None:
    report = leasefence_verify(HANDLERS, job_type="credit", target_class="B", fixture=build)
    assert report.go, report.text()


def test_a_zombie_credit_is_refused_by_the_wallet(leasefence_rig) -> None:
    rig = leasefence_rig(HANDLERS, job_type="credit", target_class="B", fixture=build)
    result = rig.run("stale-write")  # a worker paused past its lease, right before its write
    assert result.go, result.why
    landed = [a for a in result.actions if a.kind == "write" and a.outcome == "landed"]
    refused = [a for a in result.actions if a.kind == "write" and a.outcome == "refused"]
    assert {a.fence for a in landed} == {2} and {a.fence for a in refused} == {1}
