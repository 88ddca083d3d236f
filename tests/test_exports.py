"""The public names of each package, pinned (Temporal's export test, written before the redesign).

A refactor that turns a module into a package of private modules, or moves code between rooms,
must leave every name below importable from where it is imported today. Adding a public name is
allowed (the contract is extended, never broken); removing or moving one fails here. Where a
module declares ``__all__`` the pinned names must all be in it and every name in it must resolve;
where it does not (``errors``, ``model``, ``engine``, the targets), the pinned names are the ones
code outside the module imports (the handlers, the constructs, the tools and the tests).
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import textwrap

import pytest

#: ``leasefence``'s lazy exports (PEP 562): the engine, the model's value types and the errors.
LEASEFENCE = {
    "Claim",
    "Engine",
    "EnqueueResult",
    "InvalidInput",
    "InvalidTransition",
    "LeaseFenceError",
    "NotFound",
    "Operation",
    "Page",
    "PayloadConflict",
    "PayloadTooLarge",
    "StaleFence",
    "State",
    "SweepResult",
    "TargetClass",
    "TargetRefused",
    "Unavailable",
}

WORKER = {
    "Ambiguous",
    "Backend",
    "EngineBackend",
    "FunctionHandler",
    "Handler",
    "Job",
    "LostOwnership",
    "Permanent",
    "Reconciled",
    "Retry",
    "Uninterpretable",
    "Worker",
}

CLIENT = {
    "Claim",
    "EnqueueResult",
    "Forbidden",
    "HistoryEntry",
    "HistoryPage",
    "JobType",
    "LeaseFenceClient",
    "Operation",
    "OperationPage",
    "Unauthorized",
    "WorkResults",
    "sigv4_signer",
}

#: The ``leasefence`` command: its Typer app and the console script's ``main``.
CLI = {"app", "main"}

INFRA = {
    "ROUTES",
    "SCOPE_APPROVE",
    "SCOPE_OPERATE",
    "SCOPE_PRODUCE",
    "SCOPE_WORK",
    "ContextError",
    "ImportedLeaseFenceService",
    "LayerBundlingError",
    "LeaseFenceService",
    "LeaseFenceServiceProps",
    "LeaseFenceStack",
    "LeaseFenceTable",
    "LocalLayerBundler",
    "WorkerProps",
    "context_bool",
    "core_layer_code",
    "package_layer_code",
    "service_props_from_context",
}

#: Every error class of the contract (the SDK maps the HTTP error codes onto them).
ERRORS = {
    "AlreadyAttempted",
    "IdentityRequired",
    "InlinePayloadRequired",
    "InvalidInput",
    "InvalidTransition",
    "LeaseFenceError",
    "NotFound",
    "PayloadAccessDenied",
    "PayloadConflict",
    "PayloadMismatch",
    "PayloadMissing",
    "PayloadTooLarge",
    "SelfApproval",
    "StaleFence",
    "StoreMisconfigured",
    "TargetRefused",
    "TenantErasing",
    "TooManyJobTypes",
    "Unavailable",
    "UnknownJobType",
    "VersionConflict",
}

MODEL = {
    "Claim",
    "EnqueueResult",
    "OPERATOR_ACTOR",
    "Operation",
    "Page",
    "PurgeResult",
    "Resolution",
    "SWEEPER_ACTOR",
    "State",
    "SweepResult",
    "TargetClass",
    "TenantErasure",
    "Transition",
    "TtlClearing",
}

#: What the handlers, the constructs, the tools and the tests import from ``leasefence.engine``.
ENGINE = {
    "CLAIM_RETRY_BUDGET_MS",
    "DAY_MS",
    "DEFAULT_CANDIDATE_PAGE",
    "DEFAULT_CONTENDED_PAGE",
    "Engine",
    "MAX_ID_LENGTH",
    "MAX_JOB_TYPES",
    "MISSING",
    "TENANT_ERASURE_SETTLE_MS",
    "closing_round",
    "validate_actor",
    "validate_id",
}

#: The side-effect targets by class, and what handlers use from each.
TARGETS = {
    "leasefence.targets.same_table": {"put", "update"},
    "leasefence.targets.fenced_table": {
        "ENTRY_PREFIX",
        "FencedTable",
        "HorizonRefused",
        "InconsistentClaim",
    },
    "leasefence.targets.idempotent_api": {
        "IdempotentApi",
        "InMemoryIdempotentApi",
        "call",
        "idempotency_key",
        "reconcile",
    },
    "leasefence.targets.single_shot": {"NotSent", "call_once", "reconcile"},
    "leasefence.targets.identity": {"identity_digest"},
}

#: Engine's public methods and the leading parameters of each (more may be added after them).
ENGINE_METHODS = {
    "__init__": [
        "client",
        "spec",
        "clock",
        "rng",
        "events",
        "identity_retention_ms",
        "payload_retention_ms",
        "candidate_page",
        "client_factory",
        "payloads",
        "contended_page",
        "max_job_types",
        "fence_epoch",
    ],
    "admit": [
        "tenant_id",
        "operation_id",
        "job_type",
        "payload_hash",
        "target_class",
        "max_attempts",
        "payload",
        "payload_given",
        "inline",
        "actor",
    ],
    "approve": ["tenant_id", "operation_id", "payload_hash", "actor"],
    "cancel": ["tenant_id", "operation_id", "actor"],
    "claim": ["tenant_id", "operation_id", "worker_id", "lease_ms", "job_types", "claim_token"],
    "claim_next": ["tenant_id", "worker_id", "lease_ms", "job_types", "claim_token"],
    "claim_seen": ["item", "worker_id", "lease_ms", "job_types"],
    "clear_ttls": ["limit"],
    "complete": ["tenant_id", "operation_id", "fence", "outcome_code"],
    "complete_with": ["tenant_id", "operation_id", "fence", "outcome_code", "writes"],
    "enqueue": [
        "tenant_id",
        "operation_id",
        "job_type",
        "payload_hash",
        "payload_ref",
        "max_attempts",
        "target_class",
        "payload_inline",
        "actor",
        "admission",
        "approval_required",
        "approval_valid_ms",
    ],
    "erase": ["tenant_id", "operation_id", "actor"],
    "erase_tenant": ["tenant_id", "limit", "cursor"],
    "fail": ["tenant_id", "operation_id", "fence", "retryable", "reason", "retry_after_ms"],
    "get": ["tenant_id", "operation_id"],
    "heartbeat": [
        "tenant_id",
        "operation_id",
        "fence",
        "worker_id",
        "lease_ms",
        "checkpoint",
        "intent",
    ],
    "history": ["tenant_id", "operation_id", "limit", "cursor"],
    "job_types": ["tenant_id"],
    "list": ["tenant_id", "state", "limit", "cursor"],
    "oldest_due_age_ms": ["max_queries"],
    "oldest_parked_age_ms": ["state"],
    "park_unknown": ["tenant_id", "operation_id", "fence", "reason"],
    "payload": ["operation"],
    "purge_payloads": ["limit"],
    "quarantine": ["tenant_id", "operation_id", "fence", "reason"],
    "reject": ["tenant_id", "operation_id", "actor", "note"],
    "resolve": ["tenant_id", "operation_id", "resolution", "note", "actor", "request_token"],
    "sweep": ["limit"],
}


@pytest.mark.parametrize(
    ("module", "pinned"),
    [
        ("leasefence", LEASEFENCE),
        ("leasefence.worker", WORKER),
        ("leasefence.client", CLIENT),
        ("leasefence_infra", INFRA),
        ("leasefence_tools.cli", CLI),
    ],
)
def test_all_keeps_every_pinned_name_and_each_resolves(module: str, pinned: set[str]) -> None:
    mod = importlib.import_module(module)
    exported = set(mod.__all__)
    assert pinned - exported == set(), f"{module}.__all__ lost public names"
    assert len(mod.__all__) == len(exported), f"{module}.__all__ names a name twice"
    for name in sorted(exported):
        assert getattr(mod, name) is not None, f"{module}.{name}"
    assert exported <= set(dir(mod))


@pytest.mark.parametrize(
    ("module", "pinned"),
    [
        ("leasefence.errors", ERRORS),
        ("leasefence.model", MODEL),
        ("leasefence.engine", ENGINE),
        *TARGETS.items(),
    ],
)
def test_module_keeps_the_names_others_import(module: str, pinned: set[str]) -> None:
    mod = importlib.import_module(module)
    missing = {name for name in pinned if not hasattr(mod, name)}
    assert missing == set(), f"{module} lost {sorted(missing)}"


def test_lazy_exports_are_the_objects_of_their_modules() -> None:
    import leasefence
    from leasefence import errors, model
    from leasefence.engine import Engine

    assert leasefence.Engine is Engine
    for name in LEASEFENCE - {"Engine"}:
        home = model if hasattr(model, name) and name not in ERRORS else errors
        assert getattr(leasefence, name) is getattr(home, name), name


def test_every_error_is_a_leasefence_error() -> None:
    from leasefence import errors

    for name in ERRORS:
        assert issubclass(getattr(errors, name), errors.LeaseFenceError), name


def test_engine_methods_keep_their_leading_parameters() -> None:
    from leasefence.engine import Engine

    for method, params in ENGINE_METHODS.items():
        signature = inspect.signature(getattr(Engine, method))
        names = [p for p in signature.parameters if p != "self"]
        assert names[: len(params)] == params, f"Engine.{method}{signature}"


def test_importing_the_package_imports_none_of_its_exports() -> None:
    """``import leasefence`` stays cheap: a handler's cold start pays only for what it uses."""
    code = textwrap.dedent(
        """
        import sys
        import leasefence
        loaded = sorted(m for m in sys.modules if m.startswith("leasefence."))
        print(",".join(loaded))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"import leasefence imported {out}"
