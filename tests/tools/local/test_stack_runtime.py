"""A local stack's handlers run with the stack's own runtime (endpoints, table, bucket), whatever
else the same process installs or resets: tests and tools that build their own runtime, or a
second stack, must not move the first stack's API onto another endpoint or the default table."""

from __future__ import annotations

from leasefence import settings
from leasefence_tools.local.server import LocalStack

#: Nothing listens there: a handler sent to it answers 503 (store unreachable).
DEAD_ENDPOINT = "http://127.0.0.1:9"


def _round_trip(sdk, operation_id: str) -> None:
    sdk.enqueue(operation_id, "mail", {"to": operation_id}, target_class="C")
    assert sdk.get(operation_id).state == "queued"


def test_a_runtime_installed_or_reset_elsewhere_does_not_move_the_stacks_handlers(
    stack, sdk, monkeypatch
):
    # Another component of the process installs its own runtime (a dead endpoint, another table).
    monkeypatch.setattr(
        settings,
        "_runtime",
        settings.Runtime(
            settings.Settings(
                table_name="elsewhere", dynamodb_endpoint=DEAD_ENDPOINT, s3_endpoint=DEAD_ENDPOINT
            )
        ),
    )
    _round_trip(sdk, "installed-elsewhere")
    assert "stopped" in stack.sweep_now()  # the sweeper function too
    # ...or forgets the process's runtime, so that the next call would read the environment.
    settings.reset()
    _round_trip(sdk, "reset-elsewhere")
    # The runtime seen outside an invocation is still the process's own, not the stack's.
    assert settings._scoped.get() is None


def test_a_second_stack_in_the_process_leaves_the_first_ones_handlers_alone(aws, stack, sdk):
    with LocalStack(
        host="127.0.0.1",
        port=0,
        aws=aws,
        table_name="second-stack-ops",
        bucket="second-stack",
        sweep_interval=None,
        quiet=True,
    ) as second:
        assert second.runtime is not stack.runtime
        assert second.runtime.settings.table_name == "second-stack-ops"
        _round_trip(sdk, "beside-a-second-stack")
    # Stopping, the second stack forgets its own runtime, never the first stack's.
    _round_trip(sdk, "after-a-second-stack")
