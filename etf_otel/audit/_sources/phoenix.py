"""Spans read back from an Arize Phoenix server, as audit input (``etf-otel audit --phoenix URL``).

Phoenix stores what it receives over OTLP and serves it again on its REST API:
``GET /v1/projects/{project}/spans`` answers pages of at most 1000 spans
(``{"data": [...], "next_cursor": str | null}``), newest first; the cursor is an
inclusive lower bound on the span row id, so spans that arrive while the pages are
read are not seen, and no span is seen twice. Each span is converted to the audit's
protocol-neutral :class:`~etf_otel.audit._model.SpanData` as soon as its page arrives: memory
is one page plus what the audit keeps.

What Phoenix does not keep, and what that means for the audit:

* **span links**: Phoenix drops them on ingestion (20.x has no place for them). An
  ``execute_tool`` span is then matched to its ``assemble_tool_call`` by call id within
  its own trace only. When the application runs its agent loop under no span of its own
  (as ``etf-otel demo`` does), every response and every execution is the root of its own
  trace, tied to its proposal only by the link: read back from Phoenix, such an execution
  is an ``orphaned_execution`` and its proposal ``unjudged`` (or settled by the next
  request's evidence, which needs no link). The report (``etf_otel.cli._audit``) says so on
  stderr whenever ``orphaned_execution`` is found. Under an application span, the same
  calls are checked as exactly as from files.
* the resource (``service.name``) and the span kind; timestamps have microseconds.

Phoenix adds attributes of its own (``tool.name``, ``llm.system``, ...): the audit reads
only the ``gen_ai.*`` and ``etf.*`` keys it knows. Only the standard library is used.
An ``Authorization: Bearer`` header is sent when ``PHOENIX_API_KEY`` is set, as
Phoenix's own clients do.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from etf_otel.audit._model import SpanData, span_events
from etf_otel.errors import PhoenixError

__all__ = [
    "DEFAULT_PROJECT",
    "PhoenixError",
    "PhoenixStats",
    "iter_phoenix_spans",
    "span_from_phoenix",
]

DEFAULT_PROJECT = "default"
"""The project Phoenix files spans under when they name none (``openinference.project.name``)."""
PAGE_SIZE = 1000
"""Spans per request: the largest page Phoenix serves."""
DEFAULT_TIMEOUT = 30.0
"""Seconds to wait for each answer (connect and read)."""
MAX_PAGE_BYTES = 256 * 1024 * 1024
"""An answer larger than this is refused rather than read into memory."""

_STATUS_CODES = {"UNSET": 0, "OK": 1, "ERROR": 2}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class PhoenixStats:
    """What was read (for the report)."""

    pages: int = 0
    spans: int = 0


def _time_ns(value: Any) -> int:
    """Nanoseconds since the epoch of an ISO 8601 time (naive means UTC); 0 if absent or unreadable."""
    if not isinstance(value, str) or not value:
        return 0
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return 0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - _EPOCH
    return (delta // timedelta(microseconds=1)) * 1000


def _flat(attributes: Any, prefix: str = "") -> dict[str, object]:
    """Attributes as flat dotted keys (Phoenix may answer nested objects for dotted names)."""
    out: dict[str, object] = {}
    if not isinstance(attributes, Mapping):
        return out
    for key, value in attributes.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, name + "."))
        else:
            out[name] = value
    return out


def _hex_id(value: Any, size: int, what: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str) and len(value) == 2 * size:
        try:
            int(value, 16)
        except ValueError:
            pass
        else:
            text = value.lower()
            return None if text.strip("0") == "" else text
    raise ValueError(f"malformed {what} {str(value)[:40]!r}")


def span_from_phoenix(span: Any) -> SpanData:
    """One span of Phoenix's REST answer as :class:`SpanData`; raises ``ValueError`` if malformed."""
    if not isinstance(span, Mapping):
        raise ValueError("span is not an object")
    context = span.get("context")
    if not isinstance(context, Mapping):
        raise ValueError(f"span {str(span.get('name'))[:60]!r} without a context")
    trace_id = _hex_id(context.get("trace_id"), 16, "trace id")
    span_id = _hex_id(context.get("span_id"), 8, "span id")
    if trace_id is None or span_id is None:
        raise ValueError(f"span {str(span.get('name'))[:60]!r} without a valid trace_id and span_id")
    events = span_events(span.get("events"), _flat)
    name = span.get("name")
    status = span.get("status_code")
    return SpanData(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_hex_id(span.get("parent_id"), 8, "parent span id"),
        name=name if isinstance(name, str) else "",
        start_ns=_time_ns(span.get("start_time")),
        end_ns=_time_ns(span.get("end_time")),
        attributes=_flat(span.get("attributes")),
        events=events,
        links=[],
        status_code=_STATUS_CODES.get(status.upper(), 0) if isinstance(status, str) else 0,
        service=None,
    )


def _base_url(url: str) -> str:
    parsed = urllib.parse.urlsplit(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise PhoenixError(f"{url}: not an http:// or https:// URL of a Phoenix server")
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path.rstrip("/"), "", ""))


def _reason(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    if isinstance(reason, BaseException):
        error = reason
    elif isinstance(reason, str) and reason:
        return reason
    if isinstance(error, (socket.timeout, TimeoutError)):
        return "no answer in time"
    if isinstance(error, ssl.SSLError):
        return f"TLS error: {error.reason or error}"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def _get_page(url: str, timeout: float) -> Any:
    headers = {"Accept": "application/json", "User-Agent": "etf-otel-audit"}
    api_key = os.environ.get("PHOENIX_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # scheme checked
            body = answer.read(MAX_PAGE_BYTES + 1)
    except urllib.error.HTTPError as error:
        detail = ""
        try:
            payload = json.loads(error.read(4096) or b"null")
            if isinstance(payload, Mapping) and isinstance(payload.get("detail"), str):
                detail = f": {payload['detail'][:200]}"
        except (ValueError, OSError):
            pass
        finally:
            error.close()
        raise PhoenixError(f"{url}: HTTP {error.code} {error.reason}{detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise PhoenixError(f"{url}: cannot read: {_reason(error)}") from None
    if len(body) > MAX_PAGE_BYTES:
        raise PhoenixError(f"{url}: answer larger than {MAX_PAGE_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError:
        start = body[:60].decode("utf-8", "replace").strip().splitlines()
        raise PhoenixError(
            f"{url}: answer is not JSON (is this a Phoenix server?)" + (f": {start[0]!r}" if start else "")
        ) from None


def iter_phoenix_spans(
    url: str,
    project: str = DEFAULT_PROJECT,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    page_size: int = PAGE_SIZE,
    stats: PhoenixStats | None = None,
) -> Iterator[SpanData]:
    """Every span of ``project`` on the Phoenix server at ``url``, page by page.

    Raises :class:`PhoenixError` (one-line reason) when the server cannot be reached, answers
    an HTTP error (for example 404 for an unknown project) or answers anything but span pages.
    """
    stats = stats if stats is not None else PhoenixStats()
    if not project or any(char in project for char in "/?#"):
        raise PhoenixError(f"project name {project!r} is empty or contains '/', '?' or '#'")
    endpoint = f"{_base_url(url)}/v1/projects/{urllib.parse.quote(project, safe='')}/spans"
    cursor: str | None = None
    seen_cursors: set[str] = set()
    while True:
        query = {"limit": str(page_size)}
        if cursor is not None:
            query["cursor"] = cursor
        page_url = f"{endpoint}?{urllib.parse.urlencode(query)}"
        page = _get_page(page_url, timeout)
        data = page.get("data") if isinstance(page, Mapping) else None
        if not isinstance(data, list):
            raise PhoenixError(f"{page_url}: not a Phoenix span page (expected an object with a data list)")
        stats.pages += 1
        for raw in data:
            try:
                span = span_from_phoenix(raw)
            except ValueError as error:
                raise PhoenixError(f"{page_url}: {error}") from None
            stats.spans += 1
            yield span
        next_cursor = page.get("next_cursor")
        if next_cursor is None or next_cursor == "" or not data:
            return
        if not isinstance(next_cursor, str) or next_cursor in seen_cursors:
            raise PhoenixError(f"{page_url}: bad or repeated next_cursor {str(next_cursor)[:60]!r}")
        seen_cursors.add(next_cursor)
        cursor = next_cursor
