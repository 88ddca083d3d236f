"""Tenants' payload schemas, compiled so that no schema can stall or break the API.

A job type's ``payload_schema`` (:mod:`leasefence.catalogue`) is a JSON Schema written by a
tenant and evaluated by ``fastjsonschema`` in the API function that every tenant shares. Left
alone, its regular expressions would run on Python's backtracking ``re``: ``^(a+)+$`` costs
seconds per enqueue on 25 characters, and the built-in ``email`` format's own expression is
quadratic (20,000 characters: 0.4 s). So :func:`compile_schema`:

1. walks the schema the way a validator reads it (the keywords that hold subschemas) and
   checks every ``pattern`` and ``patternProperties`` key with :mod:`leasefence.safe_regex`: an
   invalid pattern, or one that uses what an automaton cannot decide in linear time
   (backreferences, lookarounds, inline flags...), is refused here, so a ``PUT`` answers 422
   naming where it is. Each pattern is replaced by a placeholder (a regex comment that matches
   everywhere) in the copy handed to fastjsonschema, so ``re`` never runs a tenant's pattern;
2. accepts only local references (``#...``) that point at a subschema the walk visited, and no
   ``$id`` below the root, so the validator cannot reach a pattern the walk did not replace;
3. after fastjsonschema compiled the copy, puts the linear-time patterns where its code looks
   them up, and refuses the schema if that table holds anything else;
4. gives every format fastjsonschema knows a linear-time implementation (its expressions run
   on the same engine; the three that use lookarounds are rewritten without them).

The validator runs each payload under one budget (:func:`leasefence.safe_regex.budget`); what
exceeds it, fails the schema, or breaks inside the validator (a payload nested deeper than
Python's recursion allows) is :class:`InvalidInput`: 422, never 500.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from leasefence import safe_regex
from leasefence.errors import InvalidInput
from leasefence.limits import MAX_SCHEMA_BYTES

log = logging.getLogger("leasefence.catalogue")

#: What a placeholder looks like: a regex comment, so fastjsonschema's own ``re`` use of it
#: (compiling it, and one check at code generation) costs nothing and matches everywhere.
_PLACEHOLDER = "(?#leasefence-pattern-{})"

#: Keywords whose value is one subschema, a list of them, or a map of them.
_ONE = (
    "additionalItems",
    "additionalProperties",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "definitions", "$defs", "dependentSchemas")

#: fastjsonschema's format expressions that need lookarounds, rewritten without them.
_REWRITTEN_FORMATS = {
    # ^(?!-)(xn--)?...\.(?!-)(xn--)?(...)$ : the first (?!-) can never fail (what follows
    # starts with x or an alphanumeric); the second forbids a leading - unless xn-- came first.
    "idn-hostname": r"^(xn--)?[a-zA-Z0-9][a-zA-Z0-9-_]{0,61}[a-zA-Z0-9]{0,1}\."
    r"(?:xn--(?:[a-zA-Z0-9\-]{1,50}|[a-zA-Z0-9-]{1,30}\.[a-zA-Z]{2,})"
    r"|[a-zA-Z0-9][a-zA-Z0-9\-]{0,49}|[a-zA-Z0-9][a-zA-Z0-9-]{0,29}\.[a-zA-Z]{2,})\Z",
    # ^P(?!$)(...(?:T(?=[0-9])(?:[0-9]+H)?(?:[0-9]+M)?(?:[0-9]+S)?)?)\Z : "P" alone is refused
    # in the check below, and a T must be followed by at least one part.
    "duration": r"^P(?:[0-9]+W|(?:[0-9]+Y)?(?:[0-9]+M)?(?:[0-9]+D)?"
    r"(?:T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?)\Z",
    # ^(?!.*\.\..*@)[^@.][^@]*(?<!\.)@[^@]+\.[^@]+\Z : the lookarounds are checked below.
    "email": r"^[^@.][^@]*@[^@]+\.[^@]+\Z",
}
#: The longest string the ``regex`` format compiles (with Python's ``re``: compiling is linear;
#: matching is what backtracks, and that format matches nothing).
MAX_REGEX_FORMAT_LENGTH = 4_096
#: The longest string checked against a format expression this module could not compile (a
#: future fastjsonschema's): Python's ``re`` then runs it, on at most this much.
MAX_FALLBACK_FORMAT_LENGTH = 256


def _known_formats() -> dict[str, str]:
    """fastjsonschema's own format expressions (the newest draft it has)."""
    try:
        from fastjsonschema.draft2019 import CodeGeneratorDraft2019 as Generator
    except ImportError:  # pragma: no cover - older fastjsonschema
        from fastjsonschema.draft07 import CodeGeneratorDraft07 as Generator  # type: ignore[assignment]
    return dict(Generator.FORMAT_REGEXS)


def _expression_check(expression: str) -> Callable[[str], bool]:
    try:
        # Not a tenant's: larger limits (the ipv6 expression has about 2,000 states).
        pattern = safe_regex.Pattern(expression, max_states=10_000, max_closure_states=200_000)
    except safe_regex.PatternError:
        fallback = re.compile(expression)

        def bounded(value: str) -> bool:
            safe_regex.charge(len(value))
            return len(value) <= MAX_FALLBACK_FORMAT_LENGTH and bool(fallback.match(value))

        return bounded
    return lambda value: pattern.match(value) is not None


def _format_checks() -> dict[str, Callable[[str], bool]]:
    expressions = {**_known_formats(), **_REWRITTEN_FORMATS}
    checks = {name: _expression_check(e) for name, e in expressions.items()}
    base_email, base_duration = checks["email"], checks["duration"]

    def email(value: str) -> bool:
        if not base_email(value):
            return False
        at = value.index("@")  # exactly one: the expression allows no other
        if value[at - 1] == ".":
            return False  # (?<!\.)@
        first_line = value.split("\n", 1)[0]  # (?!.*\.\..*@): '.' stops at a newline
        line_at = first_line.find("@")
        return not (line_at >= 0 and ".." in first_line[:line_at])

    def duration(value: str) -> bool:
        return value != "P" and base_duration(value)

    def regex(value: str) -> bool:
        safe_regex.charge(len(value))
        if len(value) > MAX_REGEX_FORMAT_LENGTH:
            return False
        try:
            re.compile(value)
        except (re.error, RecursionError, OverflowError, ValueError):
            return False
        return True

    checks.update(email=email, duration=duration, regex=regex)
    return checks


@functools.cache
def format_checks() -> dict[str, Callable[[str], bool]]:
    """Every format fastjsonschema would check, as a linear-time function (built once)."""
    return _format_checks()


def _pointer(path: tuple[str, ...]) -> str:
    return "#" + "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def _ref_path(ref: str) -> tuple[str, ...]:
    """The path a local ``$ref`` names, parsed exactly as fastjsonschema's resolver does."""
    fragment = ref[1:].lstrip("/")
    parts = unquote(fragment).split("/") if fragment else []
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in parts)


class _Preparation:
    """One walk over a schema: the copy for fastjsonschema and the patterns it replaced."""

    def __init__(self) -> None:
        self.patterns: dict[str, safe_regex.Pattern] = {}
        self._placeholders: dict[str, str] = {}
        self.positions: set[tuple[str, ...]] = set()
        self.refs: list[tuple[str, tuple[str, ...]]] = []

    def placeholder(self, pattern: Any, path: tuple[str, ...]) -> str:
        if not isinstance(pattern, str):
            raise InvalidInput(f"payload_schema: the pattern at {_pointer(path)} must be a string")
        found = self._placeholders.get(pattern)
        if found is None:
            try:
                compiled = safe_regex.compile_pattern(pattern)
            except safe_regex.PatternError as error:
                raise InvalidInput(
                    f"payload_schema: the pattern {pattern!r} at {_pointer(path)} cannot be "
                    f"used: {error}"
                ) from None
            found = self._placeholders[pattern] = _PLACEHOLDER.format(len(self.patterns))
            self.patterns[found] = compiled
        return found

    def restore(self, text: str) -> str:
        """A message of fastjsonschema's, with each placeholder back to its pattern."""
        for pattern, placeholder in self._placeholders.items():
            text = text.replace(placeholder, pattern)
        return text

    def walk(self, node: Any, path: tuple[str, ...]) -> Any:
        """A copy of the subschema ``node`` at ``path`` with its patterns replaced."""
        if not isinstance(node, dict):
            return node
        self.positions.add(path)
        out = dict(node)
        if path and isinstance(node.get("$id", node.get("id")), str):
            raise InvalidInput(
                f"payload_schema: $id below the root is not supported (at {_pointer(path)})"
            )
        ref = node.get("$ref")
        if ref is not None:
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise InvalidInput(
                    f"payload_schema may only use local references ('#/...'), not {ref!r}"
                )
            self.refs.append((ref, path))
        if "pattern" in node:
            out["pattern"] = self.placeholder(node["pattern"], (*path, "pattern"))
        properties = node.get("patternProperties")
        if isinstance(properties, dict):
            where = (*path, "patternProperties")
            out["patternProperties"] = {
                self.placeholder(key, (*where, key)): self.walk(sub, (*where, key))
                for key, sub in properties.items()
            }
            self._check_required(node, path)
        for name in _ONE:
            if name in node:
                out[name] = self.walk(node[name], (*path, name))
        for name in _LIST:
            if isinstance(node.get(name), list):
                out[name] = [self.walk(s, (*path, name, str(i))) for i, s in enumerate(node[name])]
        for name in _MAP:
            if isinstance(node.get(name), dict):
                out[name] = {k: self.walk(s, (*path, name, k)) for k, s in node[name].items()}
        items = node.get("items")
        if isinstance(items, list):
            out["items"] = [self.walk(s, (*path, "items", str(i))) for i, s in enumerate(items)]
        elif items is not None:
            out["items"] = self.walk(items, (*path, "items"))
        dependencies = node.get("dependencies")
        if isinstance(dependencies, dict):
            out["dependencies"] = {
                k: self.walk(s, (*path, "dependencies", k)) for k, s in dependencies.items()
            }
        return out

    def _check_required(self, node: dict[str, Any], path: tuple[str, ...]) -> None:
        """fastjsonschema refuses a required property that ``additionalProperties: false`` and
        the patterns forbid; it decides that with ``re`` while generating code, so the
        placeholders (which match everything) would skip it: decide it here instead."""
        required = node.get("required")
        if node.get("additionalProperties", True) or not isinstance(required, list):
            return
        declared = node.get("properties") or {}
        patterns = [self.patterns[self._placeholders[p]] for p in node["patternProperties"]]
        impossible = [
            name
            for name in required
            if isinstance(name, str)
            and name not in declared
            and not any(p.search(name) for p in patterns)
        ]
        if impossible:
            raise InvalidInput(
                f"payload_schema: at {_pointer(path)} items {impossible} are required but not "
                "allowed"
            )

    def check_refs(self) -> None:
        for ref, path in self.refs:
            if _ref_path(ref) not in self.positions:
                raise InvalidInput(
                    f"payload_schema: $ref {ref!r} at {_pointer(path)} must point to a subschema "
                    "of this document (under properties, definitions, items, allOf, ...)"
                )


class SchemaValidator:
    """A compiled payload schema: call it with a payload; :class:`InvalidInput` when the payload
    does not match (or cannot be checked within the budget)."""

    def __init__(self, validate: Callable[[Any], Any], preparation: _Preparation) -> None:
        self._validate = validate
        self._preparation = preparation

    def __call__(self, payload: Any) -> Any:
        import fastjsonschema

        try:
            with safe_regex.budget():
                return self._validate(payload)
        except fastjsonschema.JsonSchemaValueException as error:
            message = self._preparation.restore(error.message)
            raise InvalidInput(f"payload does not match the job type's schema: {message}") from None
        except safe_regex.BudgetExceeded:
            raise InvalidInput(
                "payload could not be checked against the job type's schema within leasefence's "
                "budget (long strings under costly patterns); nothing was stored"
            ) from None
        except Exception as error:  # noqa: BLE001 - a tenant's schema never makes an enqueue 500
            log.warning("payload schema failed", extra={"error": type(error).__name__})
            raise InvalidInput(
                "payload could not be checked against the job type's schema "
                f"({type(error).__name__}); nothing was stored"
            ) from None


def _refuse_remote(uri: str) -> Any:
    raise InvalidInput(f"payload_schema may only use local references ('#/...'), not {uri!r}")


def compile_schema(schema: Any) -> SchemaValidator:
    """A validator for ``schema``, or :class:`InvalidInput` saying why it cannot be one."""
    import fastjsonschema  # only where schemas are used: not on every cold start

    if not isinstance(schema, dict):
        raise InvalidInput("payload_schema must be a JSON object (a JSON Schema)")
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise InvalidInput(f"payload_schema must be at most {MAX_SCHEMA_BYTES} bytes of JSON")
    preparation = _Preparation()
    try:
        prepared = preparation.walk(copy.deepcopy(schema), ())
    except RecursionError:
        raise InvalidInput("payload_schema is nested too deeply") from None
    preparation.check_refs()
    refuse = dict.fromkeys(("", "http", "https", "file", "ftp", "urn", "data"), _refuse_remote)
    try:
        validate = fastjsonschema.compile(prepared, handlers=refuse, formats=format_checks())
    except InvalidInput:
        raise
    except fastjsonschema.JsonSchemaDefinitionException as error:
        message = preparation.restore(str(error))
        raise InvalidInput(f"payload_schema is not a usable JSON Schema: {message}") from None
    except Exception as error:  # noqa: BLE001 - broken schemas fail inside the code generator
        raise InvalidInput(
            f"payload_schema is not a usable JSON Schema ({type(error).__name__})"
        ) from None
    # Every expression the generated code evaluates must be one of ours (linear time).
    function = validate.func if isinstance(validate, functools.partial) else validate
    table = function.__globals__.get("REGEX_PATTERNS")
    if table is None:
        if preparation.patterns:  # a fastjsonschema that keeps them elsewhere: fail closed
            raise InvalidInput("payload_schema patterns cannot be evaluated safely here")
        table = {}
    for key in list(table):
        if key not in preparation.patterns:
            raise InvalidInput(
                "payload_schema uses a pattern where leasefence cannot evaluate it safely"
            )
        table[key] = preparation.patterns[key]
    return SchemaValidator(validate, preparation)
