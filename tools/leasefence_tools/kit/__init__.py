"""The rollout kit: prove a team's own handlers with the fault tests (``leasefence verify``, the
pytest plugin) and compare a shadow run beside an existing consumer (``leasefence shadow
report``). Dev-only: not shipped in the Lambda layer (shadow mode itself, :mod:`leasefence.shadow`,
is).

- :mod:`~leasefence_tools.kit.rig`: the bench (embedded stack, manual clock, recording targets) and
  the fixture API (:class:`VerifyEnv`, :class:`Target`).
- :mod:`~leasefence_tools.kit.checks`: the checks; :mod:`~leasefence_tools.kit.verify`: running them.
- :mod:`~leasefence_tools.testing.recording`: the recording DynamoDB client and the class C and D fakes.
- :mod:`~leasefence_tools.kit.examples`: one handler per class, as the README writes them;
  :mod:`~leasefence_tools.kit.examples_broken`: variants that must be no-go.
- :mod:`~leasefence_tools.kit.pytest_plugin`: the same, as pytest fixtures.
- :mod:`~leasefence_tools.kit.shadow_report`: what ``leasefence shadow report`` prints.
"""

from leasefence_tools.kit.report import CheckResult, VerifyReport
from leasefence_tools.kit.rig import Rig, Target, VerifyEnv
from leasefence_tools.kit.verify import SetupError, verify
from leasefence_tools.testing.recording import RecordingIdempotentApi, SingleCallGateway

__all__ = [
    "CheckResult",
    "RecordingIdempotentApi",
    "Rig",
    "SetupError",
    "SingleCallGateway",
    "Target",
    "VerifyEnv",
    "VerifyReport",
    "verify",
]
