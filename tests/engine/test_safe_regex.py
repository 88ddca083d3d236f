"""The linear-time regular expressions that evaluate tenants' schema patterns (leasefence.safe_regex)."""

from __future__ import annotations

import random
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leasefence.safe_regex import (
    DEFAULT_BUDGET,
    BudgetExceeded,
    PatternError,
    budget,
    compile_pattern,
)

_ATOMS = ["a", "b", "x", "é", "_", "\\.", ".", "\\d", "\\w", "\\s", "\\W", "[ab]", "[^a]",
          "[a-c\\d]", "\\b", "\\B", "^", "$"]
_QUANTIFIERS = ["*", "+", "?", "*?", "+?", "{2}", "{1,3}", "{0,2}", "{2,}"]


def _patterns() -> st.SearchStrategy[str]:
    return st.recursive(
        st.sampled_from(_ATOMS),
        lambda inner: st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map(lambda t: f"({t[0]}|{t[1]})"),
            st.tuples(inner, st.sampled_from(_QUANTIFIERS)).map(lambda t: f"(?:{t[0]}){t[1]}"),
        ),
        max_leaves=8,
    )


@settings(max_examples=400, deadline=None)
@given(_patterns(), st.lists(st.text(alphabet="ab1 _é.\nx-", max_size=10), min_size=1, max_size=6))
def test_patterns_mean_what_pythons_re_means(pattern, texts):
    """Same answers as re for everything accepted ($ means the end of the string: re's \\Z)."""
    ours, theirs = compile_pattern(pattern), re.compile(pattern.replace("$", "\\Z"))
    for text in texts:
        assert bool(ours.search(text)) == bool(theirs.search(text)), (pattern, text)
        assert bool(ours.match(text)) == bool(theirs.match(text)), (pattern, text)


def test_dollar_is_the_end_of_the_string():
    assert compile_pattern("^a$").search("a") and not compile_pattern("^a$").search("a\n")
    assert re.search("^a$", "a\n")  # what Python's re would have said


def test_a_catastrophic_pattern_costs_microseconds():
    """^(a+)+$ against 25 characters costs re seconds (2**25 ways to split them)."""
    pattern = compile_pattern("^(a+)+$")
    started = time.perf_counter()
    assert pattern.search("a" * 25 + "!") is None
    assert pattern.search("a" * 25)
    assert time.perf_counter() - started < 0.05
    # Linear: 100,000 characters stay well inside one budget.
    started = time.perf_counter()
    with budget():
        assert pattern.search("a" * 100_000 + "!") is None
        assert compile_pattern("(x+x+)+y").search("x" * 100_000) is None
    assert time.perf_counter() - started < 2


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(", "not a valid regular expression"),
        ("a{2,1}", "not a valid regular expression"),
        ("(a)\\1", "backreferences"),
        ("a(?=b)", "lookahead or lookbehind"),
        ("(?<!a)b", "lookahead or lookbehind"),
        ("(?>a+)", "atomic groups"),
        ("a*+", "possessive repeats"),
        ("(a)?(?(1)b|c)", "conditional groups"),
        ("(?i)abc", "inline flags"),
        ("(?i:a)bc", "inline flags"),
        ("(a{100}){100}", "too large"),
        ("(a?){300}a{300}", "too large"),
        ("a" * 1_001, "longer than"),
    ],
)
def test_what_an_automaton_cannot_decide_is_refused(pattern, why):
    with pytest.raises(PatternError, match=re.escape(why)):
        compile_pattern(pattern)


def test_a_budget_bounds_every_match():
    """A pattern whose DFA would have 2**41 states keeps building new ones: the budget stops it,
    within a fraction of a second, wherever it is spent."""
    pattern = compile_pattern("(a|b)*a(a|b){40}c")
    rng = random.Random(3)
    text = "".join(rng.choice("ab") for _ in range(200_000))
    # CPU time, not wall-clock time: a loaded machine makes the second longer, not the work
    # (about 0.1 s of CPU here; the bound is 50 times that).
    started = time.process_time()
    with pytest.raises(BudgetExceeded), budget():
        pattern.search(text)
    assert time.process_time() - started < 5
    # One budget for a whole validation: many cheap matches add up.
    cheap = compile_pattern("^[a-z]+$")
    with pytest.raises(BudgetExceeded), budget(units=DEFAULT_BUDGET // 10):
        for _ in range(50):
            cheap.search("a" * 10_000)
    # Without a shared budget every match has one of its own.
    assert cheap.search("a" * 10_000)
