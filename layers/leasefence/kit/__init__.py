"""The rollout kit: prove a team's own handlers with the fault tests (``leasefence verify``, the
pytest plugin) and compare a shadow run beside an existing consumer (``leasefence shadow
report``). Dev-only: not shipped in the Lambda layer (shadow mode itself, :mod:`leasefence.shadow`,
is).

- :mod:`~leasefence.kit.rig`: the bench (embedded stack, manual clock, recording targets) and
  the fixture API (:class:`VerifyEnv`, :class:`Target`).
- :mod:`~leasefence.kit.checks`: the checks; :mod:`~leasefence.kit.verify`: running them.
- :mod:`~leasefence.kit.recording`: the recording DynamoDB client and the class C and D fakes.
- :mod:`~leasefence.kit.examples`: one handler per class, as the README writes them;
  :mod:`~leasefence.kit.examples_broken`: variants that must be no-go.
- :mod:`~leasefence.kit.pytest_plugin`: the same, as pytest fixtures.
- :mod:`~leasefence.kit.shadow_report`: what ``leasefence shadow report`` prints.
"""

from leasefence.kit.recording import RecordingIdempotentApi, SingleCallGateway
from leasefence.kit.report import CheckResult, VerifyReport
from leasefence.kit.rig import Rig, Target, VerifyEnv
from leasefence.kit.verify import SetupError, verify

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
