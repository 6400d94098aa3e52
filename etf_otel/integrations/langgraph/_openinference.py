"""Our spans in OpenInference's LangChain traces, when that instrumentation is co-installed (docs/frameworks.md).

OpenInference's LangChain instrumentation makes a span per LangChain run from callbacks,
without making it the current span (a callback has no scope to detach it in), so the spans
the ``openai`` instrumentor and ours open inside a run would start traces of their own, and
``etf-otel audit`` would count OpenInference's LLM spans as responses etf-otel never
observed. While a model or tool of a graph runs, its run's span (OpenInference's public
``get_current_span()``: the span of the run that called it, the graph node) is made current
around our wrappers, so the response and execution spans join the graph's trace. Nothing
happens when OpenInference is not imported and instrumented.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context

__all__ = ["attached", "run_context", "stepped", "stepped_async"]

_MODULE = "openinference.instrumentation.langchain"


def run_context() -> Context | None:
    """The context whose current span is OpenInference's span of the LangChain run in progress, if any."""
    module = sys.modules.get(_MODULE)
    if module is None:
        return None
    try:
        if not module.LangChainInstrumentor().is_instrumented_by_opentelemetry:
            return None  # get_current_span() would print a warning
        span = module.get_current_span()
    except Exception:  # another version of it: our spans stay where they are
        return None
    if span is None or not span.get_span_context().is_valid:
        return None
    return trace.set_span_in_context(span)


class attached:  # used like a function: ``with attached(context):``
    """``context`` current inside the block (nothing when ``None``)."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: Context | None) -> None:
        self._context = context
        self._token: object = None

    def __enter__(self) -> None:
        if self._context is not None:
            self._token = otel_context.attach(self._context)

    def __exit__(self, *exc_info: object) -> None:
        if self._context is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]


def stepped(iterator: Iterator[Any], context: Context) -> Iterator[Any]:
    """``iterator``'s items, each step run with ``context`` current (a generator is never left attached)."""
    try:
        while True:
            with attached(context):
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


async def stepped_async(iterator: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
    """:func:`stepped` for an async iterator (left early, the event loop finalizes ``iterator``, as without us)."""
    while True:
        with attached(context):
            try:
                item = await iterator.__anext__()
            except StopAsyncIteration:
                return
        yield item
