"""CDK (Python) constructs for leasefence: :class:`LeaseFenceService` and its core layer."""

from .bundling import LayerBundlingError, LocalLayerBundler, core_layer_code, package_layer_code
from .service import ROUTES, SCOPE_OPERATE, SCOPE_PRODUCE, SCOPE_WORK, LeaseFenceService
from .worker import WorkerProps

__all__ = [
    "ROUTES",
    "SCOPE_OPERATE",
    "SCOPE_PRODUCE",
    "SCOPE_WORK",
    "LayerBundlingError",
    "LeaseFenceService",
    "LocalLayerBundler",
    "WorkerProps",
    "core_layer_code",
    "package_layer_code",
]
