"""One decoded OTLP JSON ``ExportTraceServiceRequest`` as :class:`SpanData` (``otlp_json``'s reader).

Its own module because it knows the OTLP/JSON message structure (resource, scope and span
fields, camelCase or snake_case), while :mod:`.otlp_json` knows how an input is framed (JSON
lines or whole documents, files or standard input) and what to refuse; ``otlp_json`` re-exports
:func:`spans_of_request`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from etf_otel.audit._model import SpanData, span_events
from etf_otel.audit._sources.otlp_values import decode_attributes, decode_id, status_code, to_int

__all__ = ["spans_of_request"]


def _first(mapping: dict[str, Any], camel: str, snake: str) -> Any:
    value = mapping.get(camel)
    return mapping.get(snake) if value is None else value


def spans_of_request(request: Any) -> Iterator[SpanData]:
    """The spans of one decoded ``ExportTraceServiceRequest``; raises ``ValueError`` if malformed."""
    resource_spans = _first(request, "resourceSpans", "resource_spans")
    if not isinstance(resource_spans, list):
        raise ValueError("resourceSpans is not a list")
    for resource_entry in resource_spans:
        if not isinstance(resource_entry, dict):
            raise ValueError("resourceSpans entry is not an object")
        resource = resource_entry.get("resource")
        service = None
        if isinstance(resource, dict):
            service_name = decode_attributes(resource.get("attributes")).get("service.name")
            service = service_name if isinstance(service_name, str) else None
        scope_spans = _first(resource_entry, "scopeSpans", "scope_spans")
        if scope_spans is None:
            scope_spans = _first(resource_entry, "instrumentationLibrarySpans", "instrumentation_library_spans")
        if scope_spans is None:
            continue
        if not isinstance(scope_spans, list):
            raise ValueError("scopeSpans is not a list")
        for scope_entry in scope_spans:
            if not isinstance(scope_entry, dict):
                raise ValueError("scopeSpans entry is not an object")
            spans = scope_entry.get("spans")
            if spans is None:
                continue
            if not isinstance(spans, list):
                raise ValueError("spans is not a list")
            scope = scope_entry.get("scope")
            scope_name = scope.get("name") if isinstance(scope, dict) else None
            for span in spans:
                decoded = _decode_span(span, service)
                decoded.scope = scope_name if isinstance(scope_name, str) else None
                yield decoded


def _decode_span(span: Any, service: str | None) -> SpanData:
    if not isinstance(span, dict):
        raise ValueError("span is not an object")
    trace_id = decode_id(_first(span, "traceId", "trace_id"), 16)
    span_id = decode_id(_first(span, "spanId", "span_id"), 8)
    if trace_id is None or span_id is None:
        raise ValueError(f"span {str(span.get('name'))[:60]!r} without a valid traceId and spanId")
    links: list[tuple[str, str]] = []
    raw_links = span.get("links")
    if isinstance(raw_links, list):
        for link in raw_links:
            if isinstance(link, dict):
                link_trace = decode_id(_first(link, "traceId", "trace_id"), 16)
                link_span = decode_id(_first(link, "spanId", "span_id"), 8)
                if link_trace is not None and link_span is not None:
                    links.append((link_trace, link_span))
    events = span_events(span.get("events"), decode_attributes)
    name = span.get("name")
    return SpanData(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=decode_id(_first(span, "parentSpanId", "parent_span_id"), 8),
        name=name if isinstance(name, str) else "",
        start_ns=to_int(_first(span, "startTimeUnixNano", "start_time_unix_nano")),
        end_ns=to_int(_first(span, "endTimeUnixNano", "end_time_unix_nano")),
        attributes=decode_attributes(span.get("attributes")),
        events=events,
        links=links,
        status_code=status_code(span.get("status")),
        service=service,
    )
