"""The OpenTelemetry side of ``loopkernel.telemetry``: imported only when tracing is on."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from loopkernel.errors import install_hint

__all__ = ["Span", "Tracer", "from_env", "from_global"]

_PROPAGATOR = TraceContextTextMapPropagator()
SIGNALS = frozenset({"NeedsApproval"})
"""Exceptions that are how a task asks for something, not failures: a span that ends with
one is not marked ERROR (a normal approval must not show red in a trace viewer)."""
FAILED_STATUSES = frozenset({"failed", "escalated"})
"""Run statuses whose ``execute`` span is an error: the run did not do its work."""
FLUSH_AT_EXIT_SECONDS = 3.0
"""Longest the process waits at exit for its last spans to go out."""
Attributes = Mapping[str, Any]
"""Span attributes: str, int, float or bool values; ``None`` values are left out."""


class Tracer:
    """LoopKernel's spans, on one OpenTelemetry tracer provider."""

    def __init__(self, provider: Any) -> None:
        from loopkernel import __version__

        self.provider = provider
        self._tracer = provider.get_tracer("loopkernel", __version__)

    def start(
        self,
        name: str,
        attributes: Attributes,
        *,
        parent: Span | str | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        links: Sequence[str | None] = (),
    ) -> Span:
        """A started span under ``parent``: a span, a stored ``traceparent``, or (``None``)
        whatever span is current. ``links``: stored ``traceparent`` values of spans it
        follows from (the run's span, a fork's source run); ``None`` entries are skipped."""
        if isinstance(parent, str):
            ctx = _PROPAGATOR.extract({"traceparent": parent})
        elif parent is not None:
            ctx = trace.set_span_in_context(parent)
        else:
            ctx = None
        attrs = _clean(attributes)
        if name.startswith("tool ") or name == "model":
            # A call out of the process (an MCP server, the model gateway): a CLIENT span
            # that says which run and task made it.
            kind = SpanKind.CLIENT
            attrs = {**_ids_of(attrs, parent), **attrs}
        follows = [Link(c) for c in map(_context_of, links) if c is not None]
        span: Span = self._tracer.start_span(
            name, context=ctx, kind=kind, attributes=attrs, links=follows
        )
        return span

    @staticmethod
    def end(
        span: Span, attributes: Attributes | None = None, *, error: BaseException | None = None
    ) -> None:
        """End ``span``. An ``error`` is recorded as an exception event and the span's
        status, unless it is a signal (``NeedsApproval``: the span says ``waiting``); a
        ``loopkernel.status`` of ``failed`` or ``escalated`` is an error status too."""
        attrs = _clean(attributes or {})
        if error is not None and _is_signal(error):
            span.add_event("approval required", {"loopkernel.reason": _secretless(str(error))})
            attrs.setdefault("loopkernel.outcome", "waiting")
            error = None
        span.set_attributes(attrs)
        if error is not None:
            # not record_exception: its message and stack trace would leave unredacted
            span.add_event("exception", _exception_attributes(error))
            span.set_status(
                Status(StatusCode.ERROR, _secretless(f"{type(error).__name__}: {error}"))
            )
        elif attrs.get("loopkernel.status") in FAILED_STATUSES:
            why = attrs.get("loopkernel.verdict") or f"the run ended {attrs['loopkernel.status']}"
            span.set_status(Status(StatusCode.ERROR, _secretless(str(why))))
        span.end()

    def event(
        self,
        name: str,
        attributes: Attributes,
        *,
        parent: Span | str | None = None,
        links: Sequence[str | None] = (),
    ) -> None:
        """A span of no duration for something that happened once (an approval, a timer)."""
        self.end(self.start(name, attributes, parent=parent, links=links))

    @staticmethod
    @contextmanager
    def current(span: Span) -> Iterator[Span]:
        """Make ``span`` the current span inside the block (tool calls nest under it)."""
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield span
        finally:
            otel_context.detach(token)

    @staticmethod
    def traceparent(span: Span | None = None) -> str | None:
        """The W3C ``traceparent`` of ``span``, or of the current span."""
        carrier: dict[str, str] = {}
        ctx = trace.set_span_in_context(span) if span is not None else None
        _PROPAGATOR.inject(carrier, context=ctx)
        return carrier.get("traceparent")


def _context_of(traceparent: str | None) -> SpanContext | None:
    """The span context a stored ``traceparent`` names, or ``None``."""
    if not traceparent:
        return None
    found = trace.get_current_span(_PROPAGATOR.extract({"traceparent": traceparent}))
    context = found.get_span_context()
    return context if context.is_valid else None


def _secretless(text: str) -> str:
    """``text`` as an exporter may see it: the one redaction of the journal
    (``loopkernel.evidence.redact_text``), for every attribute, event and status."""
    from loopkernel.evidence import redact_text

    return redact_text(text)


def _clean(attributes: Attributes) -> dict[str, Any]:
    """Attributes without ``None`` values, every string redacted."""
    return {
        k: _secretless(v) if isinstance(v, str) else v
        for k, v in attributes.items()
        if v is not None
    }


def _exception_attributes(error: BaseException) -> dict[str, str]:
    """The OpenTelemetry exception event's attributes, each redacted: the type, the message
    and the stack trace (which repeats the message, and may hold a chained one)."""
    import traceback

    stack = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return {
        "exception.type": type(error).__qualname__,
        "exception.message": _secretless(str(error)),
        "exception.stacktrace": _secretless(stack),
        "exception.escaped": "False",
    }


def _is_signal(error: BaseException) -> bool:
    return any(cls.__name__ in SIGNALS for cls in type(error).__mro__)


def _ids_of(attrs: Mapping[str, Any], parent: Span | str | None) -> dict[str, Any]:
    """``loopkernel.run_id`` and ``loopkernel.task_id`` for a call's span: from its
    idempotency key (``run/task/index``), else from the span it runs under."""
    key = attrs.get("loopkernel.key")
    if isinstance(key, str) and key.count("/") >= 2:
        run_id, rest = key.split("/", 1)
        return {"loopkernel.run_id": run_id, "loopkernel.task_id": rest.rsplit("/", 1)[0]}
    around = parent if parent is not None and not isinstance(parent, str) else None
    around = around or trace.get_current_span()
    found = getattr(around, "attributes", None) or {}
    return {k: found[k] for k in ("loopkernel.run_id", "loopkernel.task_id") if k in found}


class _Guarded:
    """The OTLP exporter, quiet when its endpoint is down: one line on stderr the first
    time a batch cannot be sent, then batches are dropped for ``pause_seconds`` instead of
    each waiting out the exporter's retries. The journal, not the trace, is the record."""

    def __init__(self, inner: Any, where: str, pause_seconds: float = 30.0) -> None:
        self.inner = inner
        self.where = where
        self.pause_seconds = pause_seconds
        self._down_until = 0.0
        self.said = False

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if time.monotonic() < self._down_until:
            return SpanExportResult.FAILURE
        result = self.inner.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self._down_until = time.monotonic() + self.pause_seconds
            if not self.said:
                self.said = True
                print(
                    f"loopkernel: traces could not be sent to {self.where}; the run goes on, "
                    "its spans are dropped until the endpoint answers",
                    file=sys.stderr,
                )
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def _shutdown_bounded(
    provider: Any, guard: _Guarded | None, seconds: float = FLUSH_AT_EXIT_SECONDS
) -> None:
    """Flush and shut the provider down at exit, waiting at most ``seconds``; spans not
    sent by then are dropped, said in one line (unless the endpoint's failure was)."""
    done = threading.Thread(target=provider.shutdown, name="loopkernel-otel-exit", daemon=True)
    done.start()
    done.join(seconds)
    if done.is_alive() and guard is not None and not guard.said:
        guard.said = True
        print(
            f"loopkernel: traces could not be sent to {guard.where} within {seconds:g} s "
            "at exit; the rest are dropped",
            file=sys.stderr,
        )


def from_env() -> Tracer | None:
    """A provider built from the standard ``OTEL_*`` variables, flushed at exit."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        print(
            "loopkernel: OTEL_* asks for traces but the OpenTelemetry SDK is not installed: "
            f"{install_hint('otel')}",
            file=sys.stderr,
        )
        return None
    resource = Resource.create(
        {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "loopkernel"}
    )
    provider = TracerProvider(resource=resource)
    exporter: SpanExporter
    guard: _Guarded | None = None
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        where = (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or "the OTLP endpoint"
        )
        # Our one line says it; the SDK's own would print a traceback per batch.
        for name in ("opentelemetry.exporter.otlp", "opentelemetry.sdk.trace.export"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        guard = _Guarded(OTLPSpanExporter(), where)
        exporter = guard  # type: ignore[assignment]
    provider.add_span_processor(BatchSpanProcessor(exporter))
    atexit.register(_shutdown_bounded, provider, guard)
    return Tracer(provider)


def from_global() -> Tracer | None:
    """The application's own provider, if it installed one."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return Tracer(provider)
