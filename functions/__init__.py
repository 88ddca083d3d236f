"""The Lambda handlers (``api``, ``sweeper``, ``worker``, ``pretoken``).

Each function's code asset is this folder; its handler is ``<package>.handler.lambda_handler``.
It is also shipped inside the ``leasefence_infra`` package as ``leasefence_infra._functions``
(``infra/leasefence_infra/_functions`` links here), which is how the construct finds it.
"""
