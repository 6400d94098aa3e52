"""The page shell the ``--html`` views share: one self-contained document, nothing fetched.

Everything a page needs is inline (the style sheet, a few lines of script for the details
panel and for opening or closing every trace), so the file can be mailed, attached to an
issue or opened offline, and the browser makes no request but the file itself. Every string
from the input goes through :func:`text`: escaped for HTML and made visible the way the
terminal report shows it (``displayable``), so model output can never become markup.

Accessibility: no meaning rests on colour alone (each mark has a shape and a letter, each
verdict a word), every mark takes keyboard focus and describes itself (``aria-label``; the
details panel shows the same text on hover and on focus), and the print style sheet drops
the scroll areas so nothing is cut.
"""

from __future__ import annotations

import hashlib
import html
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from etf_otel.cli._text import displayable
from etf_otel.errors import EtfOtelError

__all__ = ["HtmlWriteError", "attribute", "digest", "legend", "page", "text", "write_page"]


class HtmlWriteError(EtfOtelError):
    """``--html OUT`` cannot be written; its message is the one-line reason."""


def text(value: object) -> str:
    """``value`` as HTML text: visible escapes for what is not printable, then HTML-escaped."""
    return html.escape(displayable(str(value)), quote=True)


def attribute(value: object) -> str:
    """``value`` for a quoted attribute (the same escaping: quotes are escaped too)."""
    return text(value)


_STYLE: Final = """
:root { --ok: #1b6e2a; --bad: #b3261e; --warn: #8a5a00; --ink: #1d1d1f; --muted: #5b5b63;
  --line: #d5d5db; --lane: 58px; --cell: 30px; font-family: system-ui, -apple-system, "Segoe UI", Roboto,
  "DejaVu Sans", sans-serif; color: var(--ink); background: #fff; }
body { margin: 0 auto; padding: 16px 24px 48px; max-width: 1400px; font-size: 14px; line-height: 1.4; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 20px 0 8px; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
.muted { color: var(--muted); }
.facts { display: flex; flex-wrap: wrap; gap: 6px 18px; margin: 6px 0 10px; padding: 0; list-style: none; }
.facts b { font-weight: 600; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 10px; border: 1px solid currentColor;
  font-weight: 600; white-space: nowrap; }
.pill.ok { color: var(--ok); } .pill.bad { color: var(--bad); } .pill.warn { color: var(--warn); }
table.data { border-collapse: collapse; margin: 6px 0 12px; display: block; max-width: 100%; overflow-x: auto; }
table.data th, table.data td { border: 1px solid var(--line); padding: 3px 8px; text-align: left;
  vertical-align: top; overflow-wrap: normal; word-break: normal; }
.row > div, summary code, .facts li { overflow-wrap: anywhere; }
table.data th { background: #f3f3f6; font-weight: 600; } td.num { text-align: right; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 6px 0 10px; padding: 6px 10px; font-size: 12px;
  border: 1px solid var(--line); border-radius: 6px; background: #fafafc; }
.legend .item { display: inline-flex; align-items: center; gap: 6px; }
.legend .mark { position: relative; top: 0; width: 20px; height: 20px; font-size: 11px; }
.legend .mark.s-bar { width: 9px; margin-left: 0; }
#detail { position: sticky; top: 0; z-index: 5; min-height: 2.8em; margin: 0 0 8px; padding: 6px 10px;
  border: 1px solid var(--line); border-left: 4px solid #3a5fcd; background: #f7f8ff; }
.mark { position: absolute; z-index: 1; top: 6px; width: 24px; height: 24px; display: flex; align-items: center;
  justify-content: center; font: 700 12px/1 ui-monospace, "DejaVu Sans Mono", monospace; color: #fff;
  background: var(--c); border: 2px solid transparent; box-sizing: border-box; cursor: default; }
.mark:focus, .mark:hover { outline: 3px solid #111; outline-offset: 2px; z-index: 3; }
.mark.s-circle { border-radius: 50%; } .mark.s-square { border-radius: 3px; }
.mark.s-hollow { border-radius: 50%; background: #fff; color: var(--ink); border-color: var(--ink); }
.mark.s-diamond, .mark.s-octagon { background: transparent; }
.mark.s-diamond::before, .mark.s-octagon::before { content: ""; position: absolute; inset: -2px; z-index: -1;
  background: var(--c); }
.mark.s-diamond::before { clip-path: polygon(50% 0, 100% 50%, 50% 100%, 0 50%); }
.mark.s-octagon::before { clip-path: polygon(30% 0, 70% 0, 100% 30%, 100% 70%, 70% 100%, 30% 100%, 0 70%, 0 30%); }
.mark.s-bar { width: 10px; border-radius: 2px; margin-left: 7px; }
.mark.s-tag { border-radius: 3px 12px 12px 3px; }
.t-establish { --c: #1b6e2a; } .t-replace_empty { --c: #2f7f6f; }
.t-keep_omitted, .t-positional { --c: #44618f; } .t-keep_null { --c: #2856b8; }
.t-keep_identical { --c: #5a49a8; } .t-keep_empty { --c: #6b6f7a; }
.t-infer_index, .t-buffer_early, .t-drop_late, .t-drop_repeat { --c: #a86400; }
.t-reject, .t-snapshot_mismatch { --c: #b3261e; } .t-snapshot { --c: #7a3e9d; }
.t-close, .t-arguments_closed { --c: #333; } .t-end { --c: #111; } .t-finish { --c: #555; }
.timeline { display: grid; grid-template-columns: minmax(170px, 230px) 1fr minmax(150px, 210px);
  border: 1px solid var(--line); border-radius: 6px; }
.labels > div, .verdicts > div, .track { height: var(--lane); box-sizing: border-box;
  border-bottom: 1px solid var(--line); }
.labels > div, .verdicts > div { padding: 4px 8px; overflow: hidden; font-size: 12.5px; }
.labels > div.axis, .verdicts > div.axis, .track.axis { height: 24px; background: #f3f3f6; font-size: 11px; }
.scroll { overflow-x: auto; border-left: 1px solid var(--line); border-right: 1px solid var(--line); }
.track { position: relative; min-width: 100%; }
.tick { position: absolute; top: 5px; width: var(--cell); text-align: center; color: var(--muted); }
.cat { position: absolute; top: 33px; font-size: 10.5px; font-weight: 600; color: var(--bad); white-space: nowrap;
  background: rgba(255, 255, 255, .85); padding: 0 2px; }
.cat.low { top: 44px; }
.name { font-weight: 600; } .lane-id { color: var(--muted); }
details.trace { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0; padding: 0 10px; }
details.trace > summary { cursor: pointer; padding: 6px 0; }
details.trace > summary:focus { outline: 3px solid #111; outline-offset: 2px; }
.spans { position: relative; margin: 4px 0 10px; }
.row { display: grid; grid-template-columns: minmax(300px, 42%) 1fr; gap: 8px; align-items: center; min-height: 30px;
  border-bottom: 1px solid #eee; }
.row .bar-area { position: relative; height: 26px; }
.bar { position: absolute; top: 5px; height: 16px; min-width: 4px; border-radius: 3px; background: #9a9aa3; }
.bar.r-response { background: #44618f; } .bar.r-call { background: #1b6e2a; }
.bar.r-execution { background: #7a3e9d; } .bar.r-remote_call { background: #333; } .bar.r-other { background: #9a9aa3; }
.bar.rejected { background: repeating-linear-gradient(45deg, #b3261e 0 5px, #e38b85 5px 10px); }
.finding { display: inline-block; margin: 2px 4px 2px 0; padding: 0 6px; border: 2px solid var(--bad);
  border-radius: 3px; color: var(--bad); font-weight: 600; font-size: 12px; }
.finding::before { content: "\\26A0\\FE0E  "; }
.role { display: inline-block; width: 18px; text-align: center; font-weight: 700; }
.toolbar { margin: 8px 0; display: flex; gap: 8px; }
.toolbar button { font: inherit; padding: 3px 10px; }
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  #detail, .toolbar { display: none; }
  .scroll { overflow: visible; }
  .timeline { grid-template-columns: 150px minmax(0, 1fr) 170px; }
  .pill { white-space: normal; }
  .track { page-break-inside: avoid; }
  .mark { print-color-adjust: exact; -webkit-print-color-adjust: exact; }
  .bar, .t-reject, .t-snapshot_mismatch { print-color-adjust: exact; -webkit-print-color-adjust: exact; }
  details.trace { page-break-inside: avoid; }
}
"""

_SCRIPT: Final = """
(function () {
  var panel = document.getElementById("detail");
  function show(event) {
    var mark = event.target.closest ? event.target.closest("[data-detail]") : null;
    if (mark && panel) { panel.textContent = mark.getAttribute("data-detail"); }
  }
  document.addEventListener("focusin", show);
  document.addEventListener("mouseover", show);
  document.querySelectorAll("[data-toggle]").forEach(function (button) {
    button.addEventListener("click", function () {
      var open = button.getAttribute("data-toggle") === "open";
      document.querySelectorAll("details.trace").forEach(function (d) { d.open = open; });
    });
  });
})();
"""


def legend(items: Iterable[tuple[str, str, str, str]]) -> str:
    """A legend row: ``(css classes, letter, label, explanation)`` per entry."""
    entries = "".join(
        f'<span class="item"><span class="mark {classes}" aria-hidden="true">{text(letter)}</span>'
        f'<span><b>{text(label)}</b> <span class="muted">{text(explanation)}</span></span></span>'
        for classes, letter, label, explanation in items
    )
    return f'<div class="legend" role="list" aria-label="legend">{entries}</div>'


def page(title: str, body: str) -> str:
    """The whole document around ``body`` (already HTML): no external resource of any kind."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline';"
        " script-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{text(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n"
        f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )


def digest(document: str) -> str:
    """The sha256 of a page: what the README screenshots record to tell when they are stale."""
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


def write_page(path: str, document: str) -> None:
    """Write ``document`` to ``path``; :class:`HtmlWriteError` with a one-line reason when it cannot.

    The directory must exist (a typo in it should not create a tree somewhere); a directory,
    a full disk or a file that cannot be opened is a reason, never a traceback.
    """
    if not path:
        raise HtmlWriteError("--html: empty file name: name a file")
    target = Path(path)
    if target.is_dir():
        raise HtmlWriteError(f"--html: {path} is a directory: name a file")
    parent = target.parent
    if not parent.is_dir():
        raise HtmlWriteError(f"--html: cannot write {path}: no directory {os.fspath(parent) or '.'}")
    try:
        with open(target, "w", encoding="utf-8") as out:
            out.write(document)
    except OSError as error:
        raise HtmlWriteError(f"--html: cannot write {path}: {error.strerror or error}") from None
