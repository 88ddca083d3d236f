"""The meter's request-unit arithmetic against hand-computed cases (DynamoDB's published rules)."""

from __future__ import annotations

import pytest

from leasefence import schema
from leasefence_tools.bench import units as U

MODEL = U.TableModel.from_description(schema.create_table_request())


def s(text: str) -> dict:
    return {"S": text}


def n(number: str) -> dict:
    return {"N": number}


# ------------------------------------------------------------------ sizes


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (s("abc"), 3),
        (s("é"), 2),  # UTF-8 bytes, not characters
        (n("0"), 2),  # one significant digit: 1 + 1
        (n("12"), 2),
        (n("123"), 3),  # ceil(3 / 2) + 1
        (n("1800000000000"), 2),  # trailing zeros trimmed: "18"
        (n("1800000012345"), 8),  # 13 significant digits: 7 + 1
        (n("-0.00125"), 3),  # leading zeros trimmed: "125"
        ({"BOOL": True}, 1),
        ({"NULL": True}, 1),
        ({"B": b"\x00\x01\x02"}, 3),
        ({"SS": ["ab", "c"]}, 3),
        ({"L": [s("ab"), n("1")]}, 3 + (1 + 2) + (1 + 2)),
        ({"M": {"k": s("v"), "kk": {"L": []}}}, 3 + (1 + 1 + 1) + (1 + 2 + 3)),
    ],
)
def test_value_sizes(value, expected):
    assert U.value_size(value) == expected


def test_item_size_counts_names_and_values():
    item = {"tenant_id": s("acme"), "fence": n("7")}
    assert U.item_size(item) == (9 + 4) + (5 + 2)
    assert U.item_size(None) == 0


# ------------------------------------------------------------------ units


@pytest.mark.parametrize(("size", "units"), [(0, 1), (1, 1), (1024, 1), (1025, 2), (4096, 4)])
def test_write_units_round_up_per_kb(size, units):
    assert U.write_units_for(size) == units


@pytest.mark.parametrize(
    ("size", "consistent", "units"),
    [(0, False, 0.5), (4096, False, 0.5), (4097, False, 1.0), (100, True, 1.0), (8193, True, 3.0)],
)
def test_read_units_round_up_per_4kb(size, consistent, units):
    assert U.read_units_for(size, consistent) == units


def test_query_sums_sizes_before_rounding():
    # 16 entries of 200 bytes: 3,200 bytes is one 4 KB block, not 16 blocks.
    entry = {"x": s("y" * 199)}
    assert U.item_size(entry) == 200
    assert U.query_read_units([entry] * 16, consistent=False) == 0.5
    assert U.query_read_units([entry] * 21, consistent=False) == 1.0  # 4,200 bytes
    assert U.query_read_units([], consistent=False) == 0.5


# ------------------------------------------------------------------ table + index writes


def _op(**extra) -> dict:
    item = {
        "tenant_id": s("acme"),
        "operation_id": s("op-1"),
        "state": s("queued"),
        "fence": n("0"),
        "attempts": n("0"),
        "max_attempts": n("5"),
        "job_type": s("refund"),
        "payload_hash": s("sha256:" + "0" * 64),
        "updated_at": n("1800000000001"),
    }
    item.update(extra)
    return item


def test_put_into_sparse_index_is_one_table_and_one_index_write():
    after = _op(due_pk=s("acme#1"), due_at=n("1800000000001"))
    cost = U.write_cost(MODEL, None, after)
    assert (cost.table, cost.index, cost.index_ops) == (1, 1, [("due", "put")])


def test_item_outside_every_index_writes_no_index():
    cost = U.write_cost(MODEL, None, _op())
    assert (cost.table, cost.index) == (1, 0)


def test_moving_an_index_key_is_a_delete_plus_a_put():
    before = _op(due_pk=s("acme#1"), due_at=n("1800000000001"))
    after = _op(due_pk=s("acme#1"), due_at=n("1800000030001"), state=s("claimed"), fence=n("1"))
    cost = U.write_cost(MODEL, before, after)
    assert (cost.table, cost.index, cost.index_ops) == (1, 2, [("due", "delete"), ("due", "put")])


def test_changing_only_a_projected_attribute_is_one_index_update():
    before = _op(due_pk=s("acme#1"), due_at=n("1"))
    after = _op(due_pk=s("acme#1"), due_at=n("1"), state=s("claimed"))
    cost = U.write_cost(MODEL, before, after)
    assert (cost.index, cost.index_ops) == (1, [("due", "update")])


def test_changing_an_unprojected_attribute_writes_no_index():
    # A heartbeat: lease and updated_at are not projected, index keys unchanged.
    before = _op(due_pk=s("acme#1"), due_at=n("1"), lease_expires_at=n("100"))
    after = _op(due_pk=s("acme#1"), due_at=n("1"), lease_expires_at=n("200"), updated_at=n("2"))
    cost = U.write_cost(MODEL, before, after)
    assert (cost.table, cost.index) == (1, 0)


def test_leaving_one_index_and_entering_another():
    # A claim on the final attempt: out of `due`, into `sweep`.
    before = _op(due_pk=s("acme#1"), due_at=n("1"))
    after = _op(sweep_pk=s("sweep#0"), sweep_at=n("30001"), state=s("claimed"))
    cost = U.write_cost(MODEL, before, after)
    assert (cost.table, cost.index) == (1, 2)
    assert sorted(cost.index_ops) == [("due", "delete"), ("sweep", "put")]


def test_larger_of_before_and_after_decides_the_table_units():
    small = _op()
    large = _op(checkpoint=s("x" * 1500))
    assert U.write_cost(MODEL, small, large).table == 2  # growing past 1 KB
    assert U.write_cost(MODEL, large, small).table == 2  # shrinking: the old size counts


def test_refused_write_costs_the_existing_item_and_no_index():
    before = _op(due_pk=s("acme#1"), due_at=n("1"), checkpoint=s("x" * 1500))
    assert U.write_cost(MODEL, before, None, refused=True).total == 2
    assert U.write_cost(MODEL, None, None, refused=True).total == 1


def test_transactions_double_the_item_writes_and_optionally_the_index_writes():
    before = _op(due_pk=s("acme#1"), due_at=n("1"), state=s("claimed"))
    after = _op(state=s("succeeded"))  # completion: leaves `due`
    upper = U.write_cost(MODEL, before, after, transactional=True)
    assert (upper.table, upper.index) == (2, 2)
    standard = U.write_cost(MODEL, before, after, transactional=True, tx_index_multiplier=1)
    assert (standard.table, standard.index) == (2, 1)


def test_index_entry_is_keys_plus_projection():
    item = _op(due_pk=s("acme#1"), due_at=n("1"), payload_ref=s("s3://x"))
    due = MODEL.indexes[0]
    entry = MODEL.index_entry(due, item)
    assert set(entry) == {"tenant_id", "operation_id", "due_pk", "due_at", *schema.INDEX_PROJECTION}
    assert MODEL.index_entry(due, _op()) is None
