"""The OpenTelemetry side of ``loopkernel.telemetry``: imported only when tracing is on."""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["Span", "Tracer", "from_env", "from_global"]

_PROPAGATOR = TraceContextTextMapPropagator()
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
    ) -> Span:
        """A started span under ``parent``: a span, a stored ``traceparent``, or (``None``)
        whatever span is current."""
        if isinstance(parent, str):
            ctx = _PROPAGATOR.extract({"traceparent": parent})
        elif parent is not None:
            ctx = trace.set_span_in_context(parent)
        else:
            ctx = None
        span: Span = self._tracer.start_span(
            name, context=ctx, kind=kind, attributes=_clean(attributes)
        )
        return span

    @staticmethod
    def end(
        span: Span, attributes: Attributes | None = None, *, error: BaseException | None = None
    ) -> None:
        span.set_attributes(_clean(attributes or {}))
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()

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


def _clean(attributes: Attributes) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}


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
            "pip install 'loopkernel[otel]'",
            file=sys.stderr,
        )
        return None
    resource = Resource.create(
        {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "loopkernel"}
    )
    provider = TracerProvider(resource=resource)
    exporter: SpanExporter
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_* itself
    provider.add_span_processor(BatchSpanProcessor(exporter))
    atexit.register(provider.shutdown)
    return Tracer(provider)


def from_global() -> Tracer | None:
    """The application's own provider, if it installed one."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return Tracer(provider)
