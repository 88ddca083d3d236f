"""A bounded exhaustive model check of the protocol that drives the real engine.

Every interleaving of a small configuration's actors (workers with leases, stalls and lost
answers, the sweeper, an operator, an approver, a producer, clock jumps) is explored on an
in-process moto table, states deduplicated by a canonical digest, each transition checked against
:mod:`~leasefence_tools.modelcheck.invariants`. ``python -m leasefence_tools.modelcheck`` (``make
modelcheck``) runs it; :mod:`~leasefence_tools.modelcheck.mutations` re-introduces the protocol
bugs fixed before, which the check must find.
"""
