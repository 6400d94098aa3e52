"""``etf-otel audit`` in SQL: the audit's checks over the Collector ClickHouse exporter's ``otel_traces``.

The checks are ``etf_otel/audit/sql/audit_findings.sql`` (shipped in the package, readable and runnable
by operators with ``clickhouse-client --param_...``); ``etf_otel/audit/sql/otel_traces.sql`` is the exporter's
table. Two engines run them:

* ``--clickhouse URL``: a ClickHouse server the Collector's ``clickhouse`` exporter writes to, through
  ``clickhouse-connect`` (extra ``etf-otel[clickhouse]``);
* ``--engine chdb PATH...``: OTLP JSON files loaded into that same table inside embedded chDB
  (extra ``etf-otel[chdb]``), so the SQL runs on every test run without a server.

:func:`sql_findings` runs them; ``etf_otel.audit._pipeline.sql_audit`` aggregates its findings into the same
report as the Python streaming audit (:class:`etf_otel.audit._report.AuditReport`), and the command line
(``etf_otel.cli._audit``) prints it the same way.

Where the two audits can differ (documented, and kept out of the agreement test): the Python audit breaks
some ties by the order spans arrive in, which a table does not have; SQL breaks them by start time, then
span id. That concerns which referencing span ``missing_span``'s ``detail`` names, which span an
``orphaned_tool_message`` found on several spans is reported on, which sibling's first category an
``executed_rejected`` of a response blocked by several rejected siblings carries (and the category of a
``recorded_rejection``), and proposals or executions with equal start times. An execution matched by id to
a proposal of another trace is counted per trace of its findings by the Python audit after every trace is
checked, so ``traces`` of a kind can differ when that trace has a finding of the same kind already; and a
nested execution span with a link into another trace is reported as the outer span by the Python audit,
the inner one by SQL. The exporter's ``Map(String, String)`` also loses attribute types: an
attribute of the wrong type (an integer call id, the string ``"true"`` as ``etf.stream.dispatchable``) is
ignored by the Python audit and read as its text by SQL. Settlement evidence (``etf.linkage.answered_ids``,
``unanswered_call`` events) is matched across the traces of the window by both; past 1,000,000 settled call
ids the Python audit stops collecting it (``checks.Evidence``: those proposals become ``unjudged``), SQL
does not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from importlib import resources
from typing import Any, Protocol
from urllib.parse import urlsplit

from etf_otel.audit._model import AuditFinding, FindingKind, SpanData
from etf_otel.audit._sources.sql_values import clean, string_map
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.errors import SqlAuditError

__all__ = [
    "DEFAULT_DATABASE",
    "DEFAULT_TABLE",
    "ENGINES",
    "ChdbEngine",
    "ClickHouseEngine",
    "Engine",
    "SqlAuditError",
    "SqlFindings",
    "TimeWindow",
    "parse_time",
    "read_sql",
    "sql_findings",
    "statements",
    "to_row",
]

DEFAULT_DATABASE = "otel"
"""The exporter's default database."""
DEFAULT_TABLE = "otel_traces"
"""The exporter's default traces table."""
ENGINES = ("python", "chdb")
MIN_NS = 0
MAX_NS = 2**63 - 1
INSERT_BATCH_ROWS = 200_000
"""Rows written to one temporary JSONEachRow file before it is inserted."""

_STATUS = {0: "Unset", 1: "Ok", 2: "Error"}
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def read_sql(name: str) -> str:
    """The text of ``etf_otel/audit/sql/<name>``."""
    return resources.files("etf_otel.audit").joinpath("sql").joinpath(name).read_text(encoding="utf-8")


def statements(text: str) -> list[str]:
    """The statements of a SQL file (separated by ``;`` at the end of a line), comments kept."""
    parts = re.split(r";[ \t]*(?:\n|$)", text)
    return [
        part.strip()
        for part in parts
        if any(line.strip() and not line.strip().startswith("--") for line in part.splitlines())
    ]


# --- time window -------------------------------------------------------------------------------------


def parse_time(value: str, *, now: float | None = None) -> int:
    """Unix nanoseconds of ``value``: ISO 8601 (UTC unless it has an offset), or ``30m``/``2h``/``7d`` ago."""
    text = value.strip()
    match = _RELATIVE.match(text)
    if match:
        seconds = Decimal(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        reference = Decimal(repr(time.time() if now is None else now))
        return int((reference - seconds) * 1_000_000_000)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise SqlAuditError(
            f"bad time {value!r}: expected ISO 8601 (2025-01-31T12:00:00Z) or a duration ago (30m, 2h, 7d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


@dataclass(frozen=True)
class TimeWindow:
    """``[since_ns, until_ns)``: traces with at least one span starting inside are audited whole."""

    since_ns: int = MIN_NS
    until_ns: int = MAX_NS

    @classmethod
    def parse(cls, since: str | None, until: str | None, *, now: float | None = None) -> TimeWindow:
        window = cls(
            parse_time(since, now=now) if since else MIN_NS,
            parse_time(until, now=now) if until else MAX_NS,
        )
        if window.since_ns >= window.until_ns:
            raise SqlAuditError("empty time window: --since must be before --until")
        return window

    def selects(self, spans: Iterable[SpanData]) -> list[SpanData]:
        """The same selection in Python (the spans of traces with a span starting in the window)."""
        spans = list(spans)
        inside = {span.trace_id for span in spans if self.since_ns <= span.start_ns < self.until_ns}
        return [span for span in spans if span.trace_id in inside]

    def params(self) -> dict[str, int]:
        return {"since_ns": self.since_ns, "until_ns": self.until_ns}


# --- engines ------------------------------------------------------------------------------------------


class Engine(Protocol):
    """What the audit needs of a SQL engine: :class:`ChdbEngine`, :class:`ClickHouseEngine`."""

    def query(self, sql: str, params: dict[str, Any]) -> list[list[Any]]: ...

    def close(self) -> None: ...


_ROW_TYPES = {
    "TimestampNs": "Int64",
    "TraceId": "String",
    "SpanId": "String",
    "ParentSpanId": "String",
    "SpanName": "String",
    "ServiceName": "String",
    "ScopeName": "String",
    "ResourceAttributes": "Map(String, String)",
    "SpanAttributes": "Map(String, String)",
    "Duration": "UInt64",
    "StatusCode": "String",
    "Events.TimestampNs": "Array(Int64)",
    "Events.Name": "Array(String)",
    "Events.Attributes": "Array(Map(String, String))",
    "Links.TraceId": "Array(String)",
    "Links.SpanId": "Array(String)",
    "Links.TraceState": "Array(String)",
    "Links.Attributes": "Array(Map(String, String))",
}
"""The rows ``to_row`` writes (JSONEachRow); times are Unix nanoseconds, converted on insert."""
_STRUCTURE = ", ".join(f"`{name}` {kind}" for name, kind in _ROW_TYPES.items())
_COLUMNS = [f"`{name.replace('TimestampNs', 'Timestamp')}`" for name in _ROW_TYPES]
_SELECTED = [
    "fromUnixTimestamp64Nano(TimestampNs)"
    if name == "TimestampNs"
    else "arrayMap(t -> fromUnixTimestamp64Nano(t), `Events.TimestampNs`)"
    if name == "Events.TimestampNs"
    else f"`{name}`"
    for name in _ROW_TYPES
]


def to_row(span: SpanData) -> dict[str, Any]:
    """One ``otel_traces`` row for ``span``, as the exporter writes it.

    ``SpanData`` has no span kind or event times: ``SpanKind`` stays empty and event timestamps are the
    span's start (the audit reads neither). Lone surrogates become U+FFFD (``sql_values.clean``).
    """
    row: dict[str, Any] = clean(
        {
            "TimestampNs": span.start_ns,
            "TraceId": span.trace_id,
            "SpanId": span.span_id,
            "ParentSpanId": span.parent_span_id or "",
            "SpanName": span.name,
            "ServiceName": span.service or "",
            "ScopeName": span.scope or "",
            "ResourceAttributes": {"service.name": span.service} if span.service else {},
            "SpanAttributes": string_map(span.attributes),
            "Duration": max(span.end_ns - span.start_ns, 0),
            "StatusCode": _STATUS.get(span.status_code, "Unset"),
            "Events.TimestampNs": [span.start_ns] * len(span.events),
            "Events.Name": [name for name, _ in span.events],
            "Events.Attributes": [string_map(attributes) for _, attributes in span.events],
            "Links.TraceId": [trace_id for trace_id, _ in span.links],
            "Links.SpanId": [span_id for _, span_id in span.links],
            "Links.TraceState": [""] * len(span.links),
            "Links.Attributes": [{} for _ in span.links],
        }
    )
    return row


class ChdbEngine:
    """Embedded chDB holding ``otel.otel_traces`` (the exporter's DDL) in a temporary directory."""

    def __init__(self, directory: str | None = None, *, database: str = DEFAULT_DATABASE, table: str = DEFAULT_TABLE):
        try:
            from chdb import session
        except ImportError:
            raise SqlAuditError("--engine chdb needs chDB: pip install 'etf-otel[chdb]'") from None
        self.database, self.table = database, table
        self._directory = tempfile.mkdtemp(prefix="etf-otel-chdb-", dir=directory)
        factory: Any = session.Session  # chDB's own annotations are partial
        self._session: Any = factory(os.path.join(self._directory, "db"))
        self._session.query(f"CREATE DATABASE IF NOT EXISTS {database}")
        self._session.query(read_sql("otel_traces.sql"), params={"database": database, "table": table})

    def load(self, spans: Iterable[SpanData], batch_rows: int = INSERT_BATCH_ROWS) -> int:
        """Insert ``spans`` through temporary JSONEachRow files; returns the number of rows."""
        path = os.path.join(self._directory, "batch.jsonl")
        total = 0
        pending = 0
        out = open(path, "w", encoding="utf-8")  # reopened per batch
        try:
            for span in spans:
                out.write(json.dumps(to_row(span), separators=(",", ":")))
                out.write("\n")
                pending += 1
                if pending >= batch_rows:
                    out.close()
                    self._insert(path)
                    total += pending
                    pending = 0
                    out = open(path, "w", encoding="utf-8")
        finally:
            out.close()
        if pending:
            self._insert(path)
            total += pending
        os.remove(path)
        return total

    def _insert(self, path: str) -> None:
        quoted = path.replace("\\", "\\\\").replace("'", "\\'")
        self._session.query(
            f"INSERT INTO {self.database}.{self.table} ({', '.join(_COLUMNS)})"
            f" SELECT {', '.join(_SELECTED)} FROM file('{quoted}', JSONEachRow, '{_STRUCTURE}')"
        )

    def query(self, sql: str, params: dict[str, Any]) -> list[list[Any]]:
        result = self._session.query(sql, "JSONCompactEachRow", params=params)
        return [json.loads(line) for line in result.bytes().decode("utf-8").splitlines() if line]

    def close(self) -> None:
        try:
            self._session.close()
        finally:
            shutil.rmtree(self._directory, ignore_errors=True)


class ClickHouseEngine:
    """A ClickHouse server, through ``clickhouse-connect`` (HTTP interface)."""

    def __init__(self, url: str, *, connect_timeout: float = 10) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https", "clickhouse", "clickhousedb") or not parts.hostname:
            raise SqlAuditError(f"bad --clickhouse URL {url!r}: expected http[s]://[user[:password]@]host[:port]")
        try:
            import clickhouse_connect
        except ImportError:
            raise SqlAuditError("--clickhouse needs clickhouse-connect: pip install 'etf-otel[clickhouse]'") from None
        try:
            # One session: the audit's intermediate results are session TEMPORARY tables.
            self._client = clickhouse_connect.get_client(
                dsn=url, connect_timeout=connect_timeout, autogenerate_session_id=True
            )
        except Exception as error:  # any driver failure is a one-line exit 2
            raise SqlAuditError(f"cannot connect to ClickHouse at {_redacted(url)}: {_one_line(error)}") from None

    def query(self, sql: str, params: dict[str, Any]) -> list[list[Any]]:
        try:
            return [list(row) for row in self._client.query(sql, parameters=params).result_rows]
        except Exception as error:
            raise SqlAuditError(f"ClickHouse query failed: {_one_line(error)}") from None

    def close(self) -> None:
        self._client.close()


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return (text[:300] + "…") if len(text) > 300 else text or type(error).__name__


# --- the audit ----------------------------------------------------------------------------------------


_KIND_ORDER = {kind.value: index for index, kind in enumerate(FindingKind)}
_ETF_SPAN = (
    "SpanName IN ('assemble_response', 'assemble_tool_call') OR startsWith(SpanName, 'assemble_tool_call ')"
    " OR ScopeName = 'etf_otel' OR startsWith(ScopeName, 'etf_otel.')"
    " OR arrayExists(k -> startsWith(k, 'etf.'), mapKeys(SpanAttributes))"
    " OR arrayExists(n -> startsWith(n, 'etf.'), `Events.Name`)"
)
"""A span etf-otel wrote, as ``etf_otel.audit._foreign.is_etf_span`` tells."""


def _findings(rows: list[list[Any]]) -> Iterator[tuple[str, AuditFinding]]:
    for group, kind, trace_id, span_id, category, call_id, detail, reason in rows:
        # the sub-kind column is either
        divergent = category == ErrorCategory.DIVERGENT_ASSEMBLY.value or kind == FindingKind.HISTORY_DRIFT.value
        orphan, divergence = (None, reason or None) if divergent else (reason or None, None)
        found = (FindingKind(kind), trace_id, span_id or None, category or None, call_id or None, detail or None)
        yield group, AuditFinding(*found, orphan, divergence)


@dataclass
class SqlFindings:
    """What ``audit_findings.sql`` found: counts of the audited spans and traces, and the findings."""

    spans: int = 0
    traces: int = 0
    duplicate_spans: int = 0
    etf_spans: int = 0
    groups: list[list[AuditFinding]] = field(default_factory=list)
    """The findings of each checked trace, one list per trace, in a stable order (never empty lists)."""


def sql_findings(
    engine: Engine,
    *,
    database: str = DEFAULT_DATABASE,
    table: str = DEFAULT_TABLE,
    window: TimeWindow | None = None,
) -> SqlFindings:
    """Run ``audit_findings.sql`` (``etf_otel.audit._pipeline.sql_audit`` makes a report of it)."""
    window = window or TimeWindow()
    params: dict[str, Any] = {"database": database, "table": table, **window.params()}
    counts = engine.query(
        f"SELECT uniqExact(TraceId, SpanId), uniqExact(TraceId), count(), countIf({_ETF_SPAN})"
        " FROM {database:Identifier}.{table:Identifier}"
        " WHERE TraceId IN (SELECT TraceId FROM {database:Identifier}.{table:Identifier}"
        " WHERE Timestamp >= fromUnixTimestamp64Nano({since_ns:Int64})"
        " AND Timestamp < fromUnixTimestamp64Nano({until_ns:Int64}))",
        params,
    )
    found = SqlFindings(int(counts[0][0]), int(counts[0][1]))
    found.duplicate_spans, found.etf_spans = int(counts[0][2]) - found.spans, int(counts[0][3])
    rows: list[list[Any]] = []
    for statement in statements(read_sql("audit_findings.sql")):
        rows = engine.query(statement, params)
    # Grouped by checked trace, as audit_spans gets them from each check_trace call.
    rows.sort(key=lambda row: (row[0], _KIND_ORDER[row[1]], row[2], row[3] or "", row[5] or ""))
    group: str | None = None
    batch: list[AuditFinding] = []
    for group_trace, finding in _findings(rows):
        if group_trace != group and batch:
            found.groups.append(batch)
            batch = []
        group = group_trace
        batch.append(finding)
    if batch:
        found.groups.append(batch)
    return found
