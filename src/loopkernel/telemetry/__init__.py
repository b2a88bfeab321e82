"""OpenTelemetry traces of runs (extra ``otel``; docs/observability.md).

The spans::

    run <app>                  once, when the run is created; its context is stored with
    │                          the run, so every later execution joins the same trace
    └── execute <run_id>       one per execution (start, resume, a worker's claim)
        ├── plan <event kind>  one per planning step: event seq and kind, ops, planner
        └── task <task_id>     one per task execution: skill, attempt, outcome
            ├── tool <name>    one per tool call: effect class, idempotency key, replayed
            └── model <name>   one per model call: model, tokens, cost

Trace context travels on: to MCP servers in ``_meta["traceparent"]``, to the model
gateway in a ``traceparent`` header.

Tracing is on when the standard variables say so (``OTEL_TRACES_EXPORTER`` other than
``none``, or ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``;
``OTEL_SDK_DISABLED=true`` turns it off), or when an application hands LoopKernel a
tracer provider with ``configure(provider)``. Otherwise ``tracer()`` is ``None``, every
call site skips its span on that one check, and OpenTelemetry is never imported.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loopkernel.telemetry._otel import Tracer

__all__ = ["configure", "enabled_by_env", "reset", "tracer"]

_tracer: Tracer | None = None
_resolved = False


def enabled_by_env(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the standard ``OTEL_*`` variables ask for traces."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def tracer() -> Tracer | None:
    """The tracer LoopKernel's spans go to, or ``None`` when tracing is off."""
    global _tracer, _resolved
    if _resolved:
        return _tracer
    _resolved = True
    if enabled_by_env():
        from loopkernel.telemetry._otel import from_env

        _tracer = from_env()
    elif "opentelemetry.trace" in sys.modules:
        # The application set OpenTelemetry up itself: use its provider if it set one.
        from loopkernel.telemetry._otel import from_global

        _tracer = from_global()
    return _tracer


def configure(provider: Any) -> None:
    """Send LoopKernel's spans to ``provider`` (an OpenTelemetry ``TracerProvider``)."""
    global _tracer, _resolved
    from loopkernel.telemetry._otel import Tracer

    _tracer, _resolved = Tracer(provider), True


def reset() -> None:
    """Forget the tracer: the next ``tracer()`` looks at the environment again."""
    global _tracer, _resolved
    _tracer, _resolved = None, False
