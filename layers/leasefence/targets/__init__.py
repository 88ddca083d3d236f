"""Side-effect targets by class: where the fence is enforced, and what can honestly be claimed.

- :mod:`~leasefence.targets.same_table` (A): business writes commit in the completion's transaction.
- :mod:`~leasefence.targets.fenced_table` (B): the target item refuses a lower fence per operation.
- :mod:`~leasefence.targets.idempotent_api` (C): a tenant-scoped idempotency key; look up first.
- :mod:`~leasefence.targets.single_shot` (D): intent recorded first, one call, ambiguity is unknown.
"""
