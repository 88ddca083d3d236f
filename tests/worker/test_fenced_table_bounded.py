"""Class B target items stay bounded however many operations write them, and stay safe.

Most tests call :class:`FencedTable` directly with hand-made claims (the claim time is
``lease_expires_at - lease_ms``) and a manual clock; the zombie story runs through the engine and
the worker runtime.
"""

from __future__ import annotations

import itertools
import time

import pytest

from leasefence_tools.bench.units import item_size
from leasefence.clock import ManualClock
from leasefence.model import Claim, State, TargetClass
from leasefence.targets import fenced_table
from leasefence.targets.fenced_table import FencedTable
from leasefence.worker import EngineBackend, FunctionHandler, Job, LostOwnership, Reconciled, Worker

H1 = "sha256:" + "6" * 64
LEASE = 1_000
T0 = 1_800_000_000_000
_names = itertools.count()

#: What the module docstring promises for fence bookkeeping: a 49-byte name and a number of at
#: most 21 bytes per entry, and the horizon (10-byte name, number of at most 21 bytes).
ENTRY_BYTES = 49 + 21
HORIZON_BYTES = 10 + 21


class Events(dict):
    def __call__(self, name, value):
        self[name] = self.get(name, 0) + value


class Spy:
    """A DynamoDB client that lets a test act just before an UpdateItem and see its answer."""

    def __init__(self, client):
        self._client = client
        self.before_update = None
        self.after_update = None

    def __getattr__(self, name):
        return getattr(self._client, name)

    def update_item(self, **kwargs):
        if self.before_update is not None:
            self.before_update(kwargs)
        response = self._client.update_item(**kwargs)
        if self.after_update is not None:
            self.after_update(kwargs, response)
        return response


def create_table(ddb, name=None):
    name = name or f"ledger-bounded-{next(_names)}"
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def job(operation_id, fence, claimed_at, events=None, tenant="acme"):
    """A job as a worker would hold it after a claim granted at ``claimed_at``."""
    claim = Claim(
        tenant_id=tenant, operation_id=operation_id, job_type="ledger", fence=fence, attempts=fence,
        lease_expires_at=claimed_at + LEASE, lease_ms=LEASE, payload_ref=None, payload_hash=H1,
        target_class=TargetClass.B, reconcile_required=fence > 1, checkpoint=None, takeover=fence > 1,
        worker_id=f"w-{operation_id}-{fence}",
    )
    return Job(claim, None, events if events is not None else Events())


def attr(operation_id, tenant="acme"):
    return fenced_table.fence_attribute(tenant, operation_id)


def raw_item(ddb, table, key):
    return ddb.get_item(TableName=table, Key={"pk": {"S": key["pk"]}}, ConsistentRead=True).get("Item", {})


def bookkeeping(wire_item):
    """The fence entries and horizon of a wire-format item: (entry count, their size in bytes)."""
    fences = {k: v for k, v in wire_item.items() if k.startswith("lf_")}
    return sum(1 for k in fences if k.startswith("lf_fence_")), item_size(fences)


# ---------------------------------------------------------------- the size bound


@pytest.fixture(scope="module")
def own_ddb():
    """An endpoint of its own in a child process (thousands of requests: no interpreter lock
    shared with the server, no other test's tables in its backend)."""
    from leasefence_tools.local.embedded import EmbeddedAws

    with EmbeddedAws(process=True) as server:
        yield server.client()


#: Enough to fill the bound and prune it about 35 times (N = 64, pruned to N/2: one prune per 32
#: new operations). Every prune has the same shape (64 entries down to 32), so the first ones show
#: the steady state; more than 32 prunes are needed for a pruner that leaves behind even one entry
#: per prune (one it never removes) to push the item past N, so such a leak still fails here.
#: 3,000 (about 90 prunes) cost 2.5 times as much and reach no other case.
OPERATIONS = 1_200


@pytest.mark.timeout(600)
def test_twelve_hundred_operations_keep_one_item_bounded(own_ddb):
    """1,200 operations (about 35 prunes of the 64-entry bound) each write one shared item: it never holds more than N entries and its
    fence bookkeeping stays under N * 70 + 31 bytes (the old layout passes 400 KB)."""
    ddb = own_ddb
    spy = Spy(ddb)
    name = create_table(ddb)
    table = FencedTable(spy, name)  # the defaults: N = 64, prune age one day, the system clock
    n = getattr(table, "max_entries", 64)
    bound = n * ENTRY_BYTES + HORIZON_BYTES
    key = {"pk": "acct-hot"}
    worst = {"entries": 0, "bytes": 0, "item": 0}

    def measure(wire_item):
        entries, size = bookkeeping(wire_item)
        worst["entries"], worst["bytes"] = max(worst["entries"], entries), max(worst["bytes"], size)
        worst["item"] = max(worst["item"], item_size(wire_item))
        assert entries <= n, f"{entries} fence entries on one item"
        assert size <= bound, f"fence bookkeeping is {size} bytes"

    spy.after_update = lambda kwargs, response: "Attributes" in response and measure(response["Attributes"])
    base = int(time.time() * 1000) - 3_600_000  # claims in the last hour: nothing is past the prune age
    started = time.monotonic()
    for i in range(OPERATIONS):
        table.write(job(f"op-{i:05d}", 1 + i % 5, base + i), key, {"balance": i})
        if i % 100 == 99:  # also read the item as it is (covers a table that returns no item)
            measure(raw_item(ddb, name, key))
    seconds = time.monotonic() - started
    final = raw_item(ddb, name, key)
    measure(final)
    assert int(final["balance"]["N"]) == OPERATIONS - 1
    assert worst["entries"] == n  # the bound is reached, and held
    print(f"\n{OPERATIONS:,} operations: {seconds:.1f} s; at most {worst['entries']} entries, "
          f"{worst['bytes']} bytes of fences (bound {bound}), whole item at most {worst['item']} bytes")


def test_a_quiet_item_sheds_entries_older_than_the_prune_age(ddb):
    """Fewer than N entries, but N/4 of them past the prune age: one prune removes them."""
    clock, events = ManualClock(T0), Events()
    table = FencedTable(ddb, create_table(ddb), events=events, clock=clock, max_entries=16, prune_age_ms=60_000)
    key = {"pk": "acct-quiet"}
    for i in range(4):
        table.raise_fence(job(f"old-{i}", 1, T0 + i), key)
    clock.advance(60_003)  # all four are now at least 60 s old
    table.raise_fence(job("young", 1, clock()), key)  # 4 old entries >= 16 / 4: pruned
    state = table.fence_state(key)
    assert set(state.entries) == {attr("young")} and state.horizon == T0 + 3
    assert events["TargetPrunes"] == 1 and events["TargetEntriesPruned"] == 4
    for i in range(2):
        table.raise_fence(job(f"later-{i}", 1, clock() + i), key)
    clock.advance(120_000)
    table.raise_fence(job("last", 1, clock()), key)  # 3 old entries < 16 / 4: not worth a write yet
    assert len(table.fence_state(key).entries) == 4 and events["TargetPrunes"] == 1


# ---------------------------------------------------------------- safety after pruning


def test_a_stale_holder_whose_entry_was_pruned_is_refused(ddb):
    """The stale holder's entry is gone, but the horizon covers its claim: refused. The new
    holder's writes land once its claim is newer than the horizon, and so do new operations'."""
    clock, events = ManualClock(T0), Events()
    table = FencedTable(ddb, create_table(ddb), events=events, clock=clock, max_entries=4)
    key = {"pk": "acct-1"}
    stale = job("victim", 1, T0, events)
    table.raise_fence(stale, key)
    table.write(stale, key, {"balance": 10})
    takeover_at = T0 + 2 * LEASE
    honest = job("victim", 2, takeover_at, events)  # took over after the lease lapsed
    table.raise_fence(honest, key)
    for i in range(6):  # later operations write the item: the victim's entry is the oldest
        table.write(job(f"other-{i}", 1, takeover_at + 10 + i, events), key, {"balance": 20 + i})
    state = table.fence_state(key)
    assert attr("victim") not in state.entries, "the victim's entry was never pruned"
    assert state.horizon is not None and state.horizon >= takeover_at
    pruned = [i for i in range(6) if attr(f"other-{i}") not in state.entries]
    assert len(pruned) >= 2
    for i in pruned:  # the horizon covers every pruned entry's claim, not just the oldest
        with pytest.raises(fenced_table.HorizonRefused):
            table.write(job(f"other-{i}", 1, takeover_at + 10 + i), key, {"balance": -1})

    with pytest.raises(fenced_table.HorizonRefused) as refused:
        table.write(stale, key, {"balance": -1})
    assert isinstance(refused.value, LostOwnership) and "horizon" in str(refused.value)
    assert stale.cancelled.is_set() and events["TargetHorizonRefusals"] == 1 + len(pruned)
    # The honest holder's claim is older than the horizon too: refused (liveness, not safety).
    with pytest.raises(fenced_table.HorizonRefused):
        table.write(honest, key, {"balance": 30})
    assert table.read(key)["balance"] == 25

    # The next claim (after fence 2's lease lapsed) is newer than the horizon: it lands.
    fresh = job("victim", 3, state.horizon + 2 * LEASE, events)
    table.raise_fence(fresh, key)
    table.write(fresh, key, {"balance": 30})
    assert table.read(key)["balance"] == 30
    assert table.fence_state(key).entries[attr("victim")] == (3, state.horizon + 2 * LEASE)
    # Now the entry is back, and the older holders meet it (not just the horizon).
    with pytest.raises(LostOwnership, match="it has seen 3"):
        table.write(job("victim", 2, takeover_at), key, {"balance": -2})
    # A new operation claimed after the horizon writes the item; one claimed before it (and
    # never written) cannot tell itself from a pruned one: refused.
    horizon = table.fence_state(key).horizon
    table.write(job("newcomer", 1, horizon + 1), key, {"note": "new"})
    with pytest.raises(fenced_table.HorizonRefused):
        table.write(job("latecomer", 1, horizon), key, {"note": "late"})
    item = table.read(key)
    assert (item["balance"], item["note"]) == (30, "new")


def stated_job(operation_id, fence, claimed_at, lease_ms, lease_expires_at, events):
    """A job whose claim states its claim time (as both backends' claims do)."""
    claim = Claim(
        tenant_id="acme", operation_id=operation_id, job_type="ledger", fence=fence, attempts=fence,
        lease_expires_at=lease_expires_at, lease_ms=lease_ms, payload_ref=None, payload_hash=H1,
        target_class=TargetClass.B, reconcile_required=fence > 1, checkpoint=None, takeover=False,
        worker_id="w", claimed_at=claimed_at,
    )
    return Job(claim, None, events)


def test_a_claim_whose_stated_claim_time_disagrees_with_its_lease_is_refused_before_any_write(ddb):
    """A claim granted 1 s (a catalogued maximum cut the 60 s asked for) but carried with the
    requested lease: ``lease_expires_at - lease_ms`` would put its claim 59 s early. The target
    uses the stated claim time, and refuses a claim whose claim time and lease disagree: nothing
    is written, the job is in lost-ownership mode."""
    events = Events()
    name = create_table(ddb)
    table = FencedTable(ddb, name, events=events, clock=ManualClock(T0))
    key = {"pk": "acct-stated"}
    wrong = stated_job("op", 1, T0, 60_000, T0 + 1_000, events)
    with pytest.raises(fenced_table.InconsistentClaim) as refused:
        table.raise_fence(wrong, key)
    assert isinstance(refused.value, LostOwnership) and wrong.cancelled.is_set()
    with pytest.raises(LostOwnership):
        table.write(wrong, key, {"balance": 1})
    assert raw_item(ddb, name, key) == {} and events["InconsistentClaimsRefused"] == 1
    # Consistent: the entry records the claim time as stated, to the millisecond.
    right = stated_job("op", 1, T0 + 7, 1_000, T0 + 1_007, events)
    table.raise_fence(right, key)
    table.write(right, key, {"balance": 1})
    assert table.fence_state(key).entries[attr("op")] == (1, T0 + 7)
    # The target's clock takes no part by default; max_claim_skew_ms bounds a claim time ahead.
    later = stated_job("op", 2, T0 + 600_000, 1_000, T0 + 601_000, events)
    table.raise_fence(later, key)
    strict = FencedTable(ddb, name, events=events, clock=ManualClock(T0), max_claim_skew_ms=60_000)
    ahead = stated_job("op", 3, T0 + 60_001, 1_000, T0 + 61_001, events)
    with pytest.raises(fenced_table.InconsistentClaim, match="ahead"):
        strict.raise_fence(ahead, key)
    assert table.fence_state(key).entries[attr("op")] == (2, T0 + 600_000)
    strict.raise_fence(stated_job("op", 3, T0 + 60_000, 1_000, T0 + 61_000, events), key)
    assert table.fence_state(key).entries[attr("op")] == (3, T0 + 60_000)


def test_zombie_pauses_after_claim_and_its_pruned_entry_still_refuses_it(ddb, engine, clock):
    """The zombie story on a hot shared item: w1 claims (raising the fence), pauses past its
    lease; w2 takes over, raises the fence and posts; other operations then write the item until
    the zombie's operation has no entry left; w1 wakes up and tries to post: refused."""
    events = Events()
    table = FencedTable(ddb, create_table(ddb), events=events, clock=clock, max_entries=4)
    account = {"pk": "acct-hot"}
    pauses = {}

    def on_claim(job):
        table.raise_fence(job, account)

    def run(job):
        pause = pauses.pop((job.operation_id, job.fence), None)
        if pause:
            pause()
        table.write(job, account, {"last": job.operation_id}, append={"posted": [f"{job.operation_id}@{job.fence}"]})
        return "posted"

    def reconcile(job):
        posted = (table.read(account) or {}).get("posted", [])
        done = any(p.startswith(f"{job.operation_id}@") for p in posted)
        return Reconciled.done("posted") if done else Reconciled.not_done()

    handler = FunctionHandler(run, reconcile, on_claim)

    def worker(name):
        return Worker(EngineBackend(engine, ["acme"]), {"ledger": handler}, worker_id=name, lease_ms=LEASE,
                      heartbeat_interval_ms=10_000)

    engine.enqueue("acme", "zombie", "ledger", H1, target_class="B")

    def stall():
        clock.advance(LEASE * 2)
        assert worker("w2").run_once()  # takeover: raise fence 2, reconcile (not done), post
        for i in range(6):
            engine.enqueue("acme", f"busy-{i}", "ledger", H1, target_class="B")
            clock.advance(10)
            assert worker("w3").run_once()
        state = table.fence_state(account)
        assert attr("zombie") not in state.entries, "the zombie's entry was never pruned"
        assert len(state.entries) <= 4 and state.horizon is not None

    pauses[("zombie", 1)] = stall
    zombie = worker("w1").process(engine.claim_next("acme", "w1", lease_ms=LEASE))
    assert zombie.cancelled.is_set() and "horizon" in (zombie.lost_reason or "")
    posted = table.read(account)["posted"]
    assert [p for p in posted if p.startswith("zombie@")] == ["zombie@2"]
    assert len(posted) == 7
    op = engine.get("acme", "zombie")
    assert (op.state, op.fence) == (State.SUCCEEDED, 2)


# ---------------------------------------------------------------- concurrency and migration


@pytest.mark.parametrize("meddler", ["entry_changed", "horizon_raised"])
def test_a_refused_prune_leaves_the_item_correct(ddb, meddler):
    """Between a write and its prune, someone else changes the item: the prune is refused as a
    whole, nothing is lost, the fences still hold, and a later write prunes."""
    clock, events = ManualClock(T0), Events()
    spy = Spy(ddb)
    name = create_table(ddb)
    table = FencedTable(spy, name, events=events, clock=clock, max_entries=4)
    key = {"pk": "acct-2"}
    for i, op in enumerate(("a", "b", "c")):
        table.raise_fence(job(op, 1, T0 + i), key)
    a_next = job("a", 2, T0 + 5 * LEASE)

    def meddle(kwargs):
        if not kwargs["UpdateExpression"].startswith("REMOVE"):
            return
        spy.before_update = None
        if meddler == "entry_changed":  # a's new holder raises its fence: a pinned victim changes
            FencedTable(ddb, name).raise_fence(a_next, key)
        else:  # another pruner got there first and raised the horizon past this one's
            ddb.update_item(TableName=name, Key={"pk": {"S": "acct-2"}}, UpdateExpression="SET lf_horizon = :h",
                            ExpressionAttributeValues={":h": {"N": str(T0 + 1_000)}})

    spy.before_update = meddle
    table.raise_fence(job("d", 1, T0 + 3), key)  # 4 entries: prune a and b, but refused
    assert events.get("TargetPrunesRefused") == 1 and "TargetPrunes" not in events
    state = table.fence_state(key)
    assert set(state.entries) == {attr(op) for op in "abcd"}
    if meddler == "entry_changed":
        assert state.entries[attr("a")] == (2, T0 + 5 * LEASE) and state.horizon is None
        with pytest.raises(LostOwnership, match="it has seen 2"):
            table.write(job("a", 1, T0), key, {"balance": -1})
    else:
        assert state.horizon == T0 + 1_000
    # b's holder still owns b: its write lands, and (4 entries) prunes the two oldest others.
    table.write(job("b", 1, T0 + 1), key, {"balance": 1})
    state = table.fence_state(key)
    assert events["TargetPrunes"] == 1 and len(state.entries) == 2 and attr("b") in state.entries
    assert state.horizon is not None
    for op, fence, at in (("a", 1, T0), ("a", 2, T0 + 5 * LEASE), ("c", 1, T0 + 2), ("d", 1, T0 + 3)):
        stale = op == "a" and fence == 1
        if stale or attr(op) not in state.entries and at <= state.horizon:
            with pytest.raises(LostOwnership):
                table.write(job(op, fence, at), key, {"balance": -1})
    assert table.read(key)["balance"] == 1


def test_entries_of_the_old_layout_are_honoured_and_pruned_first(ddb):
    """Items written by the previous version carry plain-number fences: they still refuse lower
    fences, they are rewritten in the new form by their operation's next write, and a prune
    removes them first, raising the horizon to the pruner's clock (their claim time is unknown,
    so it is not taken to be 0)."""
    clock, events = ManualClock(T0 + 50_000), Events()
    name = create_table(ddb)
    legacy = {attr(f"old-{i}"): {"N": "1"} for i in range(5)}
    legacy[attr("kept")] = {"N": "3"}
    for i in range(2):  # and two of the new form, old enough to be pruned with the others
        legacy[attr(f"recent-{i}")] = {"N": str(fenced_table.entry_value(1, T0 + i))}
    ddb.put_item(TableName=name, Item={"pk": {"S": "acct-3"}, "balance": {"N": "7"}, **legacy})
    table = FencedTable(ddb, name, events=events, clock=clock, max_entries=16, prune_age_ms=40_000)
    key = {"pk": "acct-3"}
    assert table.fence_state(key).entries[attr("recent-1")] == (1, T0 + 1)

    with pytest.raises(LostOwnership, match="it has seen 3"):
        table.write(job("kept", 2, T0), key, {"balance": -1})
    assert table.fence_state(key).entries[attr("kept")] == (3, None)
    table.write(job("kept", 3, T0 + 20_000), key, {"balance": 8})  # same fence: allowed, migrated
    state = table.fence_state(key)
    # 5 entries of unknown time and 2 past the prune age >= 16 / 4: the write pruned them all,
    # raising the horizon to the pruner's clock.
    assert set(state.entries) == {attr("kept")} and state.entries[attr("kept")] == (3, T0 + 20_000)
    assert state.horizon == clock() and events["TargetEntriesPruned"] == 7
    with pytest.raises(fenced_table.HorizonRefused):  # a stale holder of a pruned old entry
        table.write(job("old-0", 1, T0 + 30_000), key, {"balance": -1})
    table.write(job("new", 1, clock() + 1), key, {"balance": 9})
    assert table.read(key)["balance"] == 9
