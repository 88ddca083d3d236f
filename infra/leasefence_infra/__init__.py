"""CDK (Python) constructs for leasefence: :class:`LeaseFenceService` and what it is made of.

Install with the ``cdk`` extra (``pip install 'leasefence[cdk]'``): the function code and the
core layer's sources ship inside the installed packages. cdk-nag is optional (``[nag]``): with it,
the service's acknowledgments (each with its reason) apply to ``AwsSolutionsChecks``.
"""

from .access import ImportedLeaseFenceService
from .bundling import LayerBundlingError, LocalLayerBundler, core_layer_code, package_layer_code
from .contract import ROUTES, SCOPE_APPROVE, SCOPE_OPERATE, SCOPE_PRODUCE, SCOPE_WORK
from .props import LeaseFenceServiceProps
from .service import LeaseFenceService
from .stack import ContextError, LeaseFenceStack, context_bool, service_props_from_context
from .table import LeaseFenceTable
from .worker_props import WorkerProps

__all__ = [
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
]
