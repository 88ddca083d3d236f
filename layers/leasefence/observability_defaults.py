"""What the constructs ship for logs and traces unless told otherwise, in one place (standard
library only: the CDK app and the benchmark import it without Powertools or the engine).

* ``log_level``: the functions' own level (``POWERTOOLS_LOG_LEVEL``): what the code writes.
* Lambda's application log level (JSON log format) drops lines below it; it follows
  ``log_level`` but never goes above INFO, because the metrics' EMF lines carry no ``level`` and
  Lambda files a line without one as INFO: filtering at WARN would drop every metric (and the
  alarms built on them). The code itself writes no INFO line when ``log_level`` is above INFO.
* Lambda's system log level: its ``platform.start`` and ``platform.report`` lines (one pair per
  invocation) are INFO, so WARN drops them; by default it follows ``log_level`` (DEBUG and INFO
  keep them, anything above drops them).
* Active X-Ray tracing: recorded traces are billed per trace; Lambda samples the first request
  each second and 5% of the rest.
"""

from __future__ import annotations

#: The functions' log level (``LeaseFenceServiceProps.log_level``).
DEFAULT_LOG_LEVEL = "WARNING"
#: Active X-Ray tracing on the functions (``LeaseFenceServiceProps.tracing``).
DEFAULT_TRACING = False

#: Accepted log levels -> the level Python's logging (Powertools) uses.
LOG_LEVELS = {
    "DEBUG": "DEBUG",
    "INFO": "INFO",
    "WARNING": "WARNING",
    "WARN": "WARNING",
    "ERROR": "ERROR",
    "CRITICAL": "CRITICAL",
}
#: Lambda's system log levels.
SYSTEM_LOG_LEVELS = ("DEBUG", "INFO", "WARN")


def powertools_log_level(log_level: str) -> str:
    """``POWERTOOLS_LOG_LEVEL`` for a ``log_level``."""
    return LOG_LEVELS[log_level.upper()]


def application_log_level(log_level: str) -> str:
    """Lambda's application log level for a ``log_level``: the same, but never above INFO (the
    EMF metric lines have no level and count as INFO)."""
    level = powertools_log_level(log_level)
    return "DEBUG" if level == "DEBUG" else "INFO"


def system_log_level(log_level: str, system: str | None = None) -> str:
    """Lambda's system log level: ``system`` when given, else DEBUG or INFO with those
    ``log_level`` values and WARN above them (no ``platform.start``/``platform.report`` lines)."""
    if system is not None:
        upper = system.upper()
        if upper not in SYSTEM_LOG_LEVELS:
            raise ValueError(f"system log level must be one of {SYSTEM_LOG_LEVELS}, got {system!r}")
        return upper
    level = powertools_log_level(log_level)
    return level if level in ("DEBUG", "INFO") else "WARN"
