"""leasefence's tools: everything that is never shipped to Lambda.

- :mod:`leasefence_tools.cli`: the ``leasefence`` command.
- :mod:`leasefence_tools.local`: the local stack (embedded DynamoDB/S3 endpoint, the HTTP API over
  the handlers, the local event source mappings and subscriptions, dev tokens).
- :mod:`leasefence_tools.bench`, :mod:`leasefence_tools.torture`: the benchmarks and the torture
  run; :mod:`leasefence_tools.demo`: the zombie-worker demo.
- :mod:`leasefence_tools.kit`: the rollout kit (``leasefence verify``, the pytest plugin, the
  shadow report).
- :mod:`leasefence_tools.testing`: every fake in one place (the fault-injecting client, the
  recording targets, the instrumented targets of the demo and the tests).

The runtime (:mod:`leasefence`, exactly what the Lambda layer ships) imports nothing from here;
``tests/test_runtime_boundary.py`` checks it.
"""
