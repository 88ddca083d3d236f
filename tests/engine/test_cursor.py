"""The page cursors (leasefence.cursor): each format is total over its pattern, and round-trips."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leasefence import cursor
from leasefence.errors import InvalidInput

CONTROL = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)]))
ID = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=CONTROL),
    min_size=1,
    max_size=256,
)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(cursor.OPERATION_CURSOR_PATTERN, fullmatch=True))
def test_every_operation_cursor_the_pattern_admits_is_a_position(text):
    position = cursor.decode_operation_cursor(text)
    assert isinstance(position, str)
    assert len(position.encode("utf-8")) <= cursor.MAX_POSITION_BYTES


@settings(max_examples=300, deadline=None)
@given(ID)
def test_an_operation_cursor_names_the_id_it_was_made_from(operation_id):
    text = cursor.encode_operation_cursor(operation_id)
    assert re.fullmatch(cursor.OPERATION_CURSOR_PATTERN, text)
    assert cursor.decode_operation_cursor(text) == operation_id


@settings(max_examples=200, deadline=None)
@given(st.from_regex(cursor.HISTORY_CURSOR_PATTERN, fullmatch=True))
def test_every_history_cursor_the_pattern_admits_is_a_sequence_number(text):
    assert cursor.decode_history_cursor(text) == (int(text) if text else 0)


@given(st.integers(min_value=0, max_value=10**15 - 1))
def test_a_history_cursor_names_the_seq_it_was_made_from(seq):
    text = cursor.encode_history_cursor(seq)
    assert re.fullmatch(cursor.HISTORY_CURSOR_PATTERN, text)
    assert cursor.decode_history_cursor(text) == seq


@pytest.mark.parametrize(
    "text", ["!!not-a-cursor", "eyJvIjogImEifQ", "oA", "o====", "o a", "p" + "A" * 4, "o" + "A" * 1368]
)
def test_anything_else_is_refused_as_an_operation_cursor(text):
    assert not re.fullmatch(cursor.OPERATION_CURSOR_PATTERN, text)
    with pytest.raises(InvalidInput):
        cursor.decode_operation_cursor(text)


@pytest.mark.parametrize("text", ["zzz", "not-a-cursor", "eyJzIjogM30", "-1", "1.0", "1" * 16, " 1"])
def test_anything_else_is_refused_as_a_history_cursor(text):
    assert not re.fullmatch(cursor.HISTORY_CURSOR_PATTERN, text)
    with pytest.raises(InvalidInput):
        cursor.decode_history_cursor(text)


def test_the_longest_id_fits_the_pattern():
    assert re.fullmatch(cursor.OPERATION_CURSOR_PATTERN, cursor.encode_operation_cursor("\U0010ffff" * 256))
