"""Every fake in one place, for the tests, the demo, the kit and the torture run.

- :mod:`~leasefence_tools.testing.faults`: a boto3 client that fails the way networks and
  DynamoDB fail (before the write, after it, throttled).
- :mod:`~leasefence_tools.testing.recording`: the rollout kit's recording targets (a DynamoDB
  client, the class C provider, the class D gateway).
- :mod:`~leasefence_tools.testing.kits`: instrumented side-effect targets, one per class, that count
  what the target itself saw.

The torture run's chaos (``ChaosApi``, ``StoreChaos``) stays in
:mod:`leasefence_tools.torture.chaos` for now: it is woven into that run.
"""
