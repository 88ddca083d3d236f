"""Regular expressions that cannot stall the API: tenants' schema patterns, in linear time.

A job type's payload schema (:mod:`leasefence.catalogue`) may hold ``pattern`` and
``patternProperties`` regular expressions written by a tenant. Python's ``re`` backtracks: a
pattern such as ``^(a+)+$`` costs seconds of CPU on 25 characters, in the API function every
tenant shares. So no tenant pattern ever reaches ``re``'s matcher. This module is the one that
evaluates them:

* :func:`compile_pattern` parses a pattern with the standard library's own parser
  (``re._parser``: the same syntax the schemas had before) and builds a Thompson NFA from it.
  What an automaton cannot decide (backreferences, lookahead and lookbehind, conditionals,
  atomic groups and possessive repeats, inline flags) is refused with :class:`PatternError`, as
  is an invalid pattern or one whose automaton exceeds :data:`MAX_STATES` states (counted
  repeats are expanded, so ``(a{100}){100}`` is refused). The catalogue turns that into 422 at
  ``PUT``, never 500 at enqueue.
* :meth:`Pattern.search` simulates the automaton over the string once, holding a set of states
  per position (no backtracking), and caches the sets it met as a lazily built DFA, so a
  string costs at most one cached step per character once the automaton is warm, and never
  more than ``len(string) x states`` work. Every step is charged to a budget
  (:func:`budget`): a validation that would exceed it stops with :class:`BudgetExceeded`
  (the enqueue is 422), so even a worst case is bounded in time, not just in growth.

Semantics are Python's for everything accepted (``\\d``, ``\\w``, ``\\s`` and ``\\b`` are
Unicode-aware; ``.`` does not match a newline), except ``$``, which means the end of the string
only, as in JSON Schema (ECMA 262) and as the schema's ``pattern`` always meant here.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from re import _constants as _c  # type: ignore[attr-defined]
from re import _parser as _sre_parse  # type: ignore[attr-defined]
from typing import Any

#: The most NFA states one pattern may compile to (counted repeats are expanded).
MAX_STATES = 1_000
#: The most states all of a pattern's epsilon closures may hold together (what building its
#: automaton can cost; checked when the pattern is compiled).
MAX_CLOSURE_STATES = 20_000
#: The longest pattern accepted (characters).
MAX_PATTERN_LENGTH = 1_000
#: Work units one validation may spend on patterns. A cached step (one character) costs 1 unit;
#: a step that builds a DFA state costs :data:`_STEP_COST` plus :data:`_STATE_COST` per NFA
#: state it handles. Measured here, a unit is 0.25-0.5 microseconds of CPU whatever the pattern,
#: so a validation stops within about half a second at worst, and a 256 KiB string under a simple
#: pattern costs about a quarter of the budget.
DEFAULT_BUDGET = 1_000_000
_STEP_COST = 8
_STATE_COST = 4
#: Bounds on what one compiled pattern caches (DFA states, character classes).
_MAX_DFA_STATES = 4_096
_MAX_CHAR_CACHE = 65_536

_CHAR, _SPLIT, _ASSERT, _MATCH = 0, 1, 2, 3
_BEGIN, _END, _BOUNDARY, _NON_BOUNDARY = 0, 1, 2, 3


class PatternError(ValueError):
    """The pattern is invalid, or uses what leasefence does not evaluate (see the module)."""


class BudgetExceeded(Exception):
    """Matching would cost more than the budget: the caller refuses the input (nothing runs on)."""


class _Budget:
    __slots__ = ("left",)

    def __init__(self, units: int) -> None:
        self.left = units

    def charge(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise BudgetExceeded("matching the schema's patterns exceeds leasefence's budget")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "leasefence_regex_budget", default=None
)


@contextlib.contextmanager
def budget(units: int = DEFAULT_BUDGET) -> Iterator[None]:
    """Every match inside the block shares one budget of ``units``."""
    token = _BUDGET.set(_Budget(units))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def charge(units: int) -> None:
    """Charge work done outside a pattern (a format check's) to the current budget, if any."""
    current = _BUDGET.get()
    if current is not None:
        current.charge(units)


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


_CATEGORIES: dict[Any, Callable[[str], bool]] = {
    _c.CATEGORY_DIGIT: str.isdecimal,
    _c.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
    _c.CATEGORY_SPACE: str.isspace,
    _c.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
    _c.CATEGORY_WORD: _word,
    _c.CATEGORY_NOT_WORD: lambda ch: not _word(ch),
}

_ASSERTIONS = {
    _c.AT_BEGINNING: _BEGIN,
    _c.AT_BEGINNING_STRING: _BEGIN,
    _c.AT_END: _END,
    _c.AT_END_STRING: _END,
    _c.AT_BOUNDARY: _BOUNDARY,
    _c.AT_NON_BOUNDARY: _NON_BOUNDARY,
}

_REFUSED = {
    _c.GROUPREF: "backreferences",
    _c.GROUPREF_EXISTS: "conditional groups",
    _c.ASSERT: "lookahead or lookbehind",
    _c.ASSERT_NOT: "lookahead or lookbehind",
}
for _name, _what in (
    ("ATOMIC_GROUP", "atomic groups"),
    ("POSSESSIVE_REPEAT", "possessive repeats"),
):
    if hasattr(_c, _name):  # Python 3.11+
        _REFUSED[getattr(_c, _name)] = _what


def _class_predicate(items: list[tuple[Any, Any]]) -> tuple[Callable[[str], bool], int]:
    """A character class as a predicate, and its cost (how many items it may test)."""
    negate = False
    chars: set[str] = set()
    ranges: list[tuple[int, int]] = []
    categories: list[Callable[[str], bool]] = []
    for op, av in items:
        if op is _c.NEGATE:
            negate = True
        elif op is _c.LITERAL:
            chars.add(chr(av))
        elif op is _c.RANGE:
            ranges.append((av[0], av[1]))
        elif op is _c.CATEGORY and av in _CATEGORIES:
            categories.append(_CATEGORIES[av])
        else:
            raise PatternError(f"unsupported character class item {op}")

    def predicate(ch: str) -> bool:
        if ch in chars:
            return not negate
        code = ord(ch)
        for low, high in ranges:
            if low <= code <= high:
                return not negate
        for category in categories:
            if category(ch):
                return not negate
        return negate

    return predicate, 1 + len(ranges) + len(categories)


class Pattern:
    """A compiled pattern (:func:`compile_pattern`): ``search`` and ``match`` answer a truthy value
    or None, like ``re``'s, which is all a schema validator asks of them."""

    def __init__(
        self,
        pattern: str,
        max_states: int = MAX_STATES,
        max_closure_states: int = MAX_CLOSURE_STATES,
    ) -> None:
        self.pattern = pattern
        self._max_states = max_states
        self._max_closure_states = max_closure_states
        self._kind: list[int] = []
        self._arg: list[int] = []
        self._out1: list[int] = []
        self._out2: list[int] = []
        self._atoms: list[Callable[[str], bool]] = []
        self._atom_ids: dict[Any, int] = {}
        #: What classifying one new character costs (every atom's tests).
        self._classify_cost = 1
        #: The context bits (see :meth:`_context`) this pattern's assertions read.
        self._context_mask = 0
        try:
            parsed = _sre_parse.parse(pattern)
        except re.error as error:
            raise PatternError(f"not a valid regular expression: {error}") from None
        except RecursionError:
            raise PatternError("nested too deeply") from None
        if parsed.state.flags & ~_c.SRE_FLAG_UNICODE:
            raise PatternError("inline flags such as (?i) are not supported")
        match = self._state(_MATCH, 0, -1, -1)
        try:
            self._start = self._sequence(list(parsed), match)
        except RecursionError:
            raise PatternError("nested too deeply") from None
        self._has_boundary = bool(self._context_mask & 28)
        if self._has_boundary:
            self._word_atom = self._atom(("word",), _word, 1)
        self._check_closures()
        self._closures: dict[int, tuple[frozenset[int], bool]] = {}
        # The lazily built DFA: (states alive, previous character is a word character, new
        # matches may start) -> id; per id, character class id -> next id.
        self._dfa: dict[tuple[frozenset[int], bool, bool], int] = {}
        self._dfa_keys: list[tuple[frozenset[int], bool, bool]] = []
        self._transitions: list[dict[int, int]] = []
        self._generation = 0
        # Characters -> class ids: characters every atom answers alike share a class.
        self._classes: dict[tuple[bool, ...], int] = {}
        self._class_values: list[tuple[bool, ...]] = []
        self._char_class: dict[str, int] = {}
        self._lock = threading.Lock()
        # A pattern that can only start at position 0 (``^...``): nothing to seed later.
        unlimited = _Budget(1 << 62).charge
        self._anchored = all(
            not chars and not matched
            for end in (False, True)
            for prev in (False, True)
            for nxt in (False, True)
            for chars, matched in [
                self._closure(
                    (self._start,), self._context(False, end, prev, nxt, False), unlimited
                )
            ]
        )

    # ------------------------------------------------------------------ construction

    def _state(self, kind: int, arg: int, out1: int, out2: int) -> int:
        if len(self._kind) >= self._max_states:
            raise PatternError(f"too large (more than {self._max_states} automaton states)")
        self._kind.append(kind)
        self._arg.append(arg)
        self._out1.append(out1)
        self._out2.append(out2)
        return len(self._kind) - 1

    def _atom(self, key: Any, predicate: Callable[[str], bool], cost: int) -> int:
        found = self._atom_ids.get(key)
        if found is None:
            found = self._atom_ids[key] = len(self._atoms)
            self._atoms.append(predicate)
            self._classify_cost += cost
        return found

    def _sequence(self, items: list[tuple[Any, Any]], nxt: int) -> int:
        for op, av in reversed(items):
            nxt = self._node(op, av, nxt)
        return nxt

    def _node(self, op: Any, av: Any, nxt: int) -> int:
        if op is _c.LITERAL:
            return self._state(_CHAR, self._atom(("=", av), chr(av).__eq__, 1), nxt, -1)
        if op is _c.NOT_LITERAL:
            return self._state(_CHAR, self._atom(("!=", av), chr(av).__ne__, 1), nxt, -1)
        if op is _c.ANY:
            return self._state(_CHAR, self._atom(("any",), "\n".__ne__, 1), nxt, -1)
        if op is _c.IN:
            predicate, cost = _class_predicate(av)
            key = ("in", tuple((str(o), repr(a)) for o, a in av))
            return self._state(_CHAR, self._atom(key, predicate, cost), nxt, -1)
        if op is _c.BRANCH:
            starts = [self._sequence(list(alternative), nxt) for alternative in av[1]]
            head = starts[-1]
            for start in reversed(starts[:-1]):
                head = self._state(_SPLIT, 0, start, head)
            return head
        if op is _c.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            if add_flags or del_flags:
                raise PatternError("inline flags such as (?i:...) are not supported")
            return self._sequence(list(body), nxt)
        if op is _c.MAX_REPEAT or op is _c.MIN_REPEAT:  # lazy or greedy: the same language
            low, high, body = av
            body = list(body)
            if high == _c.MAXREPEAT:
                loop = self._state(_SPLIT, 0, -1, nxt)
                self._out1[loop] = self._sequence(body, loop)
                tail = loop
            else:
                tail = nxt
                for _ in range(high - low):
                    tail = self._state(_SPLIT, 0, self._sequence(body, tail), nxt)
            for _ in range(low):
                tail = self._sequence(body, tail)
            return tail
        if op is _c.AT:
            kind = _ASSERTIONS.get(av)
            if kind is None:
                raise PatternError(f"unsupported anchor {av}")
            self._context_mask |= {_BEGIN: 1, _END: 2}.get(kind, 4 | 8 | 16)
            return self._state(_ASSERT, kind, nxt, -1)
        what = _REFUSED.get(op)
        if what is not None:
            raise PatternError(f"{what} are not supported (they cannot be matched in linear time)")
        raise PatternError(f"unsupported construct {op}")

    def _check_closures(self) -> None:
        """Refuse a pattern whose epsilon closures (from every state a step can start from) hold
        more than :data:`MAX_CLOSURE_STATES` states together, counting every assertion as
        passing (an upper bound for every context): building its automaton would cost too much."""
        kind, out1, out2 = self._kind, self._out1, self._out2
        seeds = {self._start} | {out1[s] for s, k in enumerate(kind) if k == _CHAR}
        total = 0
        for seed in seeds:
            seen: set[int] = set()
            stack = [seed]
            while stack:
                state = stack.pop()
                if state in seen:
                    continue
                seen.add(state)
                if kind[state] == _SPLIT:
                    stack += (out1[state], out2[state])
                elif kind[state] == _ASSERT:
                    stack.append(out1[state])
            total += len(seen)
            if total > self._max_closure_states:
                raise PatternError("too large (its automaton would cost too much to build)")

    # ------------------------------------------------------------------ matching

    def _context(
        self, at_start: bool, at_end: bool, prev_word: bool, next_word: bool, empty: bool
    ) -> int:
        """A position as bit flags, keeping only what this pattern's assertions read."""
        bits = at_start | at_end << 1 | prev_word << 2 | next_word << 3 | empty << 4
        return bits & self._context_mask

    def _closure_of(
        self, state: int, context: int, charge: Callable[[int], None]
    ) -> tuple[frozenset[int], bool]:
        """The character states reachable from ``state`` without consuming a character in
        ``context``, and whether the match state is reachable. Cached per state and context."""
        key = state * 32 + context
        found = self._closures.get(key)
        if found is not None:
            return found
        at_start, at_end = bool(context & 1), bool(context & 2)
        prev_word, next_word, empty = bool(context & 4), bool(context & 8), bool(context & 16)
        kind, arg, out1, out2 = self._kind, self._arg, self._out1, self._out2
        seen: set[int] = set()
        chars: list[int] = []
        matched = False
        stack = [state]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            k = kind[current]
            if k == _CHAR:
                chars.append(current)
            elif k == _SPLIT:
                stack.append(out2[current])
                stack.append(out1[current])
            elif k == _MATCH:
                matched = True
            else:
                a = arg[current]
                if (
                    (a == _BEGIN and at_start)
                    or (a == _END and at_end)
                    or (a == _BOUNDARY and not empty and prev_word != next_word)
                    or (a == _NON_BOUNDARY and not empty and prev_word == next_word)
                ):
                    stack.append(out1[current])
        charge(_STATE_COST * len(seen))
        found = self._closures[key] = (frozenset(chars), matched)
        return found

    def _closure(
        self, seeds: Iterable[int], context: int, charge: Callable[[int], None]
    ) -> tuple[frozenset[int], bool]:
        """The character states reachable from ``seeds`` in ``context``, and whether the match
        state is reachable."""
        closure_of = self._closure_of
        chars: set[int] = set()
        matched = False
        count = 0
        for seed in seeds:
            reached, reaches_match = closure_of(seed, context, charge)
            chars |= reached
            matched = matched or reaches_match
            count += 1
        charge(_STEP_COST + _STATE_COST * (count + len(chars)))
        return frozenset(chars), matched

    def _classify(self, ch: str, charge: Callable[[int], None]) -> int:
        """The class of a character: its answers from every atom of the pattern."""
        charge(self._classify_cost)
        values = tuple(atom(ch) for atom in self._atoms)
        class_id = self._classes.get(values)
        if class_id is None:
            class_id = self._classes[values] = len(self._class_values)
            self._class_values.append(values)
        if len(self._char_class) < _MAX_CHAR_CACHE:
            self._char_class[ch] = class_id
        return class_id

    def _intern(self, key: tuple[frozenset[int], bool, bool]) -> int:
        found = self._dfa.get(key)
        if found is None:
            if len(self._dfa_keys) >= _MAX_DFA_STATES:
                # Full: start over (ids of the old generation are never used again).
                self._generation += 1
                self._dfa.clear()
                self._dfa_keys.clear()
                self._transitions.clear()
            found = self._dfa[key] = len(self._dfa_keys)
            self._dfa_keys.append(key)
            self._transitions.append({})
        return found

    def _step(
        self,
        pending: frozenset[int],
        prev_word: bool,
        class_id: int,
        at_start: bool,
        seed: bool,
        charge: Callable[[int], None],
    ) -> tuple[frozenset[int], bool, bool]:
        """Consume one character (of class ``class_id``): the states alive after it, whether it
        is a word character, and whether a match ended before it."""
        values = self._class_values[class_id]
        next_word = values[self._word_atom] if self._has_boundary else False
        seeds = pending | {self._start} if seed else pending
        context = self._context(at_start, False, prev_word, next_word, False)
        chars, matched = self._closure(seeds, context, charge)
        if matched:
            return frozenset(), next_word, True
        arg, out1 = self._arg, self._out1
        return frozenset(out1[s] for s in chars if values[arg[s]]), next_word, False

    def _run(self, text: str, search: bool) -> bool:
        if not isinstance(text, str):
            raise TypeError("patterns match strings")
        shared = _BUDGET.get()
        charge = (shared if shared is not None else _Budget(DEFAULT_BUDGET)).charge
        with self._lock:
            return self._simulate(text, search, charge)

    def _simulate(self, text: str, search: bool, charge: Callable[[int], None]) -> bool:
        if not text:
            context = self._context(True, True, False, False, True)
            return self._closure((self._start,), context, charge)[1]
        intern, transitions, keys, known = (
            self._intern,
            self._transitions,
            self._dfa_keys,
            self._char_class,
        )
        rest = iter(text)
        first = next(rest)
        class_id = known.get(first)
        if class_id is None:
            class_id = self._classify(first, charge)
        # Position 0 (where ^ holds) is never cached.
        pending, prev_word, matched = self._step(frozenset(), False, class_id, True, True, charge)
        if matched:
            return True
        seed = search and not self._anchored
        state = intern((pending, prev_word, seed))
        cost = 0
        for ch in rest:
            class_id = known.get(ch)
            if class_id is None:
                class_id = self._classify(ch, charge)
            nxt = transitions[state].get(class_id)
            if nxt is None:
                pending, prev_word, _ = keys[state]
                pending, prev_word, matched = self._step(
                    pending, prev_word, class_id, False, seed, charge
                )
                if matched:
                    return True
                generation = self._generation
                nxt = intern((pending, prev_word, seed))
                if self._generation == generation:
                    transitions[state][class_id] = nxt
            else:
                cost += 1
                if cost >= 4096:
                    charge(cost)
                    cost = 0
            state = nxt
            if not seed and not keys[state][0]:
                charge(cost)
                return False  # nothing alive, and nothing can start after position 0
        charge(cost)
        pending, prev_word, _ = keys[state]
        seeds = pending | {self._start} if seed else pending
        return self._closure(seeds, self._context(False, True, prev_word, False, False), charge)[1]

    def search(self, text: str) -> bool | None:
        """A match anywhere in ``text`` (truthy), or None."""
        return True if self._run(text, True) else None

    def match(self, text: str) -> bool | None:
        """A match starting at the beginning of ``text`` (truthy), or None."""
        return True if self._run(text, False) else None


def compile_pattern(pattern: Any) -> Pattern:
    """A :class:`Pattern`, or :class:`PatternError` saying why it cannot be one."""
    if not isinstance(pattern, str):
        raise PatternError("a pattern must be a string")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(f"longer than {MAX_PATTERN_LENGTH} characters")
    return Pattern(pattern)
