"""``etf-otel audit``: progress bars, the report as a table or JSON, and exit codes (arguments: ``_audit_arguments``).

The audit itself (``etf_otel.audit``) prints nothing; this module reads the command line, runs the
audit over files (``--engine python``, the default), a Phoenix server (``--phoenix``) or a SQL engine
(``--engine chdb``, ``--clickhouse``), prints the report and returns the exit code (docs/cli.md):
:data:`EXIT_OK` when nothing was found, :data:`EXIT_FOUND` when something was, :data:`EXIT_BAD_INPUT`
(one line on stderr) when the input or the usage is bad.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from typing import IO

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from etf_otel.audit._model import FindingKind, SpanData
from etf_otel.audit._partition import Partitioner
from etf_otel.audit._pipeline import audit_spans, sql_audit
from etf_otel.audit._report import AuditReport
from etf_otel.audit._sources.files import STDIN, expand_paths, total_bytes
from etf_otel.audit._sources.otlp_json import InputStats, iter_spans
from etf_otel.audit._sources.phoenix import DEFAULT_PROJECT, PhoenixStats, iter_phoenix_spans
from etf_otel.audit._sources.sql import DEFAULT_DATABASE, ChdbEngine, ClickHouseEngine, TimeWindow
from etf_otel.cli._audit_arguments import add_audit_arguments
from etf_otel.cli._audit_report import emit_audit_report, fill_input, no_etf_spans, render_audit_report, skipped_note
from etf_otel.cli._exit_codes import EXIT_BAD_INPUT
from etf_otel.cli._text import TERMINAL_STDIN, displayable, stdin_is_terminal
from etf_otel.cli.html._audit import write_audit_page
from etf_otel.cli.html._page import HtmlWriteError
from etf_otel.errors import OtlpInputError, PhoenixError, SqlAuditError

__all__ = [
    "LINKS_NOTE",
    "add_audit_arguments",
    "emit_audit_report",
    "render_audit_report",
    "run_audit",
    "run_phoenix_audit",
    "run_sql_audit",
]

LINKS_NOTE = (
    "etf-otel audit: note: Phoenix does not keep span links; an execution in another trace than its proposal "
    "shows as orphaned_execution plus unjudged"
)


def _fail(message: str) -> int:
    """One line on stderr; the exit code of bad usage or unreadable input."""
    print(f"etf-otel audit: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


# --- the report -----------------------------------------------------------------------------------


def run_audit(
    paths: list[str],
    *,
    json_output: bool,
    progress: bool,
    phoenix: str | None = None,
    project: str | None = None,
    engine: str = "python",
    clickhouse: str | None = None,
    database: str | None = None,
    since: str | None = None,
    until: str | None = None,
    html: str | None = None,
    strict: bool = False,
) -> int:
    """Audit the exports at ``paths`` (or a Phoenix server); prints the report, returns the exit code (docs/cli.md).

    ``strict``: ``history_drift`` counts as a finding (``--strict``)."""
    if engine != "python" or clickhouse is not None or database is not None or since is not None or until is not None:
        if phoenix is not None or project is not None:
            return _fail("--phoenix takes no SQL option (--engine, --clickhouse, ...)")
        if html is not None:
            return _fail("--html needs the spans themselves: use the python engine (PATH...) or --phoenix")
        return run_sql_audit(
            paths,
            json_output=json_output,
            engine=engine,
            clickhouse=clickhouse,
            database=database,
            since=since,
            until=until,
            strict=strict,
        )
    if phoenix is not None or project is not None:
        return run_phoenix_audit(
            phoenix, project, paths, json_output=json_output, progress=progress, html=html, strict=strict
        )
    if not paths or (STDIN in paths and stdin_is_terminal()):
        return _fail("give at least one PATH, or --phoenix URL" if not paths else TERMINAL_STDIN)
    return _run_files_audit(paths, AuditReport(strict=strict), json_output=json_output, progress=progress, html=html)


def _run_files_audit(
    paths: list[str], report: AuditReport, *, json_output: bool, progress: bool, html: str | None = None
) -> int:
    try:
        files = expand_paths(paths)
    except OtlpInputError as error:
        return _fail(str(error))
    with ExitStack() as cleanup:
        stdin = None
        if html is not None and STDIN in files:  # the page reads the input a second time: keep a copy
            try:
                stdin = cleanup.enter_context(tempfile.TemporaryFile())
                shutil.copyfileobj(sys.stdin.buffer, stdin)
                stdin.seek(0)
            except OSError as error:
                return _fail(f"cannot use temporary storage: {error}")
        return _files_report(files, paths, report, json_output=json_output, progress=progress, html=html, stdin=stdin)
    return EXIT_BAD_INPUT  # pragma: no cover - ExitStack does not swallow exceptions


def _files_report(
    files: list[str],
    paths: list[str],
    report: AuditReport,
    *,
    json_output: bool,
    progress: bool,
    html: str | None,
    stdin: IO[bytes] | None,
) -> int:
    def spans() -> Iterator[SpanData]:
        if stdin is not None:
            stdin.seek(0)
        return iter_spans(paths, stdin=stdin)

    stats = InputStats()
    try:
        _audit_files(paths, stats, report, progress=progress, stdin=stdin)
    except OtlpInputError as error:
        return _fail(str(error))
    except OSError as error:
        return _fail(f"cannot use temporary storage: {error}")
    fill_input(report, stats)
    if stats.spans == 0:
        return _fail(f"no OTLP trace spans in {len(files)} input file(s){skipped_note(stats)}")
    if report.etf_spans == 0:
        return _fail(no_etf_spans(report.spans))
    if html is not None:
        try:
            write_audit_page(html, report, spans, ", ".join(paths))
        except (HtmlWriteError, OtlpInputError) as error:
            return _fail(str(error))
    return emit_audit_report(report, json_output)


class _AmountColumn(ProgressColumn):
    """How far a task is, in its own unit: bytes read (``DownloadColumn``), or groups of traces checked."""

    def __init__(self) -> None:
        super().__init__()
        self._bytes = DownloadColumn()

    def render(self, task: Task) -> Text:
        if task.fields.get("unit") == "bytes":
            return self._bytes.render(task)
        total = "?" if task.total is None else str(int(task.total))
        return Text(f"{int(task.completed)}/{total} {task.fields.get('unit', '')}", style="progress.download")


def _audit_files(
    paths: list[str], stats: InputStats, report: AuditReport, *, progress: bool, stdin: IO[bytes] | None = None
) -> None:
    """The streaming audit of ``paths`` into ``report``, with a progress bar on a terminal's stderr."""
    size = total_bytes(expand_paths(paths))
    errors = Console(stderr=True)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        _AmountColumn(),
        TextColumn("{task.fields[spans]} spans"),
        TimeRemainingColumn(),
        console=errors,
        transient=True,
        disable=not (progress and errors.is_terminal),
    )
    reading = bar.add_task("reading", total=size or None, spans=0, unit="bytes")
    checking = bar.add_task("checking", total=None, visible=False, spans=0, unit="groups of traces")

    def read_progress(count: int) -> None:
        stats.bytes_read += count
        bar.update(reading, advance=count, spans=stats.spans)

    def expected(spans_so_far: int) -> int:
        """The spans the whole input probably holds, from the bytes read so far (sizes the spill)."""
        done = stats.bytes_read or 1
        return int(spans_so_far * max(size, done) / done) + 1

    def on_group(done: int, total: int) -> None:
        bar.update(checking, completed=done, total=total, visible=True, spans=stats.spans)

    with bar:
        audit_spans(
            iter_spans(paths, stats, read_progress, stdin),
            report=report,
            partitioner=Partitioner(expected_spans=expected),
            on_group=on_group,
        )


# --- Phoenix --------------------------------------------------------------------------------------------


def run_phoenix_audit(
    url: str | None,
    project: str | None,
    paths: list[str],
    *,
    json_output: bool,
    progress: bool,
    html: str | None = None,
    strict: bool = False,
) -> int:
    """``etf-otel audit --phoenix URL [--project NAME]``: prints the report, returns the exit code."""
    if url is None:
        return _fail("--project needs --phoenix URL")
    if paths:
        return _fail("give either PATH... or --phoenix URL, not both")
    project = DEFAULT_PROJECT if project is None else project
    stats = PhoenixStats()
    report = AuditReport(strict=strict)
    try:
        _audit_phoenix(url, project, stats, report, progress=progress)
    except PhoenixError as error:
        return _fail(str(error))
    except OSError as error:
        return _fail(f"cannot use temporary storage: {error}")
    report.records, report.spans = stats.pages, stats.spans - report.duplicate_spans
    if stats.spans == 0:
        return _fail(f"no spans in Phoenix project {project!r} at {url}")
    if report.etf_spans == 0:
        return _fail(no_etf_spans(report.spans))
    if html is not None:
        try:
            write_audit_page(html, report, lambda: iter_phoenix_spans(url, project), f"Phoenix {url} ({project})")
        except (HtmlWriteError, PhoenixError) as error:
            return _fail(str(error))
    code = emit_audit_report(report, json_output)
    if FindingKind.ORPHANED_EXECUTION in report.kinds or FindingKind.UNANSWERED_CALL in report.kinds:
        print(LINKS_NOTE, file=sys.stderr)
    return code


def _audit_phoenix(url: str, project: str, stats: PhoenixStats, report: AuditReport, *, progress: bool) -> None:
    """The streaming audit of a Phoenix project into ``report``, with a spinner on a terminal's stderr."""
    errors = Console(stderr=True)
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}: {task.fields[spans]} spans"),
        console=errors,
        transient=True,
        disable=not (progress and errors.is_terminal),
    )
    task = bar.add_task(f"reading Phoenix project {escape(displayable(project))}", total=None, spans=0)

    def counted() -> Iterator[SpanData]:
        for span in iter_phoenix_spans(url, project, stats=stats):
            if stats.spans % 1000 == 0:
                bar.update(task, spans=stats.spans)
            yield span

    with bar:
        audit_spans(counted(), report=report)


# --- SQL engines ------------------------------------------------------------------------------------------


def run_sql_audit(
    paths: list[str],
    *,
    json_output: bool,
    engine: str,
    clickhouse: str | None = None,
    database: str | None = None,
    since: str | None = None,
    until: str | None = None,
    strict: bool = False,
) -> int:
    """``etf-otel audit --engine chdb PATH...`` or ``--clickhouse URL``: prints the report, returns the exit code."""
    engines = ExitStack()  # closes the engine opened, after an error is reported
    try:
        window = TimeWindow.parse(since, until)
        if clickhouse is not None:
            report = _clickhouse_report(clickhouse, paths, engine, database, window, engines, strict)
        else:
            report = _chdb_report(paths, engine, database, window, engines, strict)
    except (SqlAuditError, OtlpInputError) as error:
        return _fail(str(error))
    except OSError as error:
        return _fail(f"cannot use temporary storage: {error}")
    finally:
        engines.close()
    if report.spans and report.etf_spans == 0:
        return _fail(no_etf_spans(report.spans))
    return emit_audit_report(report, json_output)


def _clickhouse_report(
    url: str,
    paths: list[str],
    engine: str,
    database: str | None,
    window: TimeWindow,
    engines: ExitStack,
    strict: bool = False,
) -> AuditReport:
    """``--clickhouse URL``: the audit's SQL on the server (its connection is closed by ``engines``)."""
    if paths:
        raise SqlAuditError("--clickhouse reads the server: give no PATH")
    if engine not in ("python", "clickhouse"):
        raise SqlAuditError("--clickhouse and --engine chdb exclude each other")
    backend = ClickHouseEngine(url)
    engines.callback(backend.close)
    return sql_audit(backend, database=database or DEFAULT_DATABASE, window=window, strict=strict)


def _chdb_report(
    paths: list[str],
    engine: str,
    database: str | None,
    window: TimeWindow,
    engines: ExitStack,
    strict: bool = False,
) -> AuditReport:
    """``--engine chdb PATH...``: the files loaded into embedded chDB (closed by ``engines``)."""
    if engine != "chdb":
        raise SqlAuditError("--database, --since and --until need --engine chdb or --clickhouse URL")
    if not paths:
        raise SqlAuditError("no PATH given (or --clickhouse URL)")
    if database is not None:
        raise SqlAuditError("--database applies to --clickhouse only")
    files = expand_paths(paths)
    backend = ChdbEngine()
    engines.callback(backend.close)
    stats = InputStats()
    backend.load(iter_spans(paths, stats))
    report = sql_audit(backend, window=window, strict=strict)
    report.files, report.records, report.skipped_records = stats.files, stats.records, stats.skipped_records
    report.skipped_files = list(stats.skipped_files)
    if stats.spans == 0:
        raise SqlAuditError(f"no OTLP trace spans in {len(files)} input file(s){skipped_note(stats)}")
    return report
