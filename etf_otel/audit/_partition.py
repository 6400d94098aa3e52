"""Grouping the audit's items by trace, with bounded memory: :class:`Partitioner`.

Spans of one trace may be spread over any number of files, services and positions, in any
order. Up to ``memory_spans`` items are grouped in memory. Beyond that they are spilled to
temporary files partitioned by trace id (:class:`_Spill`), and each bucket is then grouped on
its own, so memory is bounded by the largest bucket (about ``spans / buckets`` items) plus
the largest single trace, not by the input. A :class:`LinkProbe` goes to the bucket of the
trace it links into.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import IO

from etf_otel.audit._model import Item, LinkProbe

__all__ = [
    "DEFAULT_BUCKET_SPANS",
    "DEFAULT_MEMORY_SPANS",
    "MAX_BUCKETS",
    "Partitioner",
]

DEFAULT_MEMORY_SPANS = 200_000
"""Records grouped in memory before spilling to partitioned temporary files."""
DEFAULT_BUCKET_SPANS = 100_000
"""Target records per spill bucket (the memory bound of the second phase)."""
MAX_BUCKETS = 1024
SPILL_BATCH = 4096
"""Items of one bucket kept in memory before they are appended to its file."""

TraceGroups = list[tuple[str, list[Item]]]


def _bucket_of(trace_id: str, buckets: int) -> int:
    try:
        return int(trace_id[-8:], 16) % buckets
    except ValueError:
        return sum(trace_id.encode()) % buckets


def _pickled_batches(source: IO[bytes]) -> Iterator[list[Item]]:
    while True:
        try:
            batch = pickle.load(source)  # our own spill file
        except EOFError:
            return
        yield batch


class _Spill:
    """The temporary directory of a spilling :class:`Partitioner`: one pickle file per bucket.

    Spill files hold pickled batches of items written by this process only.
    """

    def __init__(self, buckets: int, directory: str | None) -> None:
        self.buckets = buckets
        self._directory = tempfile.mkdtemp(prefix="etf-otel-audit-", dir=directory)
        self._pending: list[list[Item]] = [[] for _ in range(buckets)]

    def add(self, trace_id: str, item: Item) -> None:
        index = _bucket_of(trace_id, self.buckets)
        batch = self._pending[index]
        batch.append(item)
        if len(batch) >= SPILL_BATCH:
            self.flush(index)

    def extend(self, trace_id: str, items: list[Item]) -> None:
        """Queue ``items`` for the bucket of ``trace_id`` (written by the next :meth:`flush`)."""
        self._pending[_bucket_of(trace_id, self.buckets)].extend(items)

    def _path(self, index: int) -> str:
        return os.path.join(self._directory, f"bucket-{index:04d}.pickle")

    def flush(self, index: int) -> None:
        batch = self._pending[index]
        if not batch:
            return
        with open(self._path(index), "ab") as out:
            pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)
        self._pending[index] = []

    def flush_all(self) -> None:
        for index in range(self.buckets):
            self.flush(index)

    def groups(self) -> Iterator[TraceGroups]:
        """Each bucket's items grouped by trace (a bucket's file is removed once read)."""
        self.flush_all()
        for index in range(self.buckets):
            traces: dict[str, list[Item]] = {}
            path = self._path(index)
            if os.path.exists(path):
                with open(path, "rb") as source:
                    for batch in _pickled_batches(source):
                        for item in batch:
                            key = item.target_trace if isinstance(item, LinkProbe) else item.trace_id
                            traces.setdefault(key, []).append(item)
                os.remove(path)
            yield list(traces.items())

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)


class Partitioner:
    """Groups items by trace: in memory up to ``memory_spans``, then spilled by trace id."""

    def __init__(
        self,
        *,
        memory_spans: int = DEFAULT_MEMORY_SPANS,
        bucket_spans: int = DEFAULT_BUCKET_SPANS,
        expected_spans: Callable[[int], int] | None = None,
        directory: str | None = None,
    ) -> None:
        self._memory_spans = memory_spans
        self._bucket_spans = bucket_spans
        self._expected = expected_spans
        self._directory = directory
        self._traces: dict[str, list[Item]] = {}
        self._count = 0
        self._spill: _Spill | None = None
        self._buckets = 0

    @property
    def spilled(self) -> bool:
        return self._spill is not None

    @property
    def buckets(self) -> int:
        return self._buckets

    def add(self, trace_id: str, item: Item) -> None:
        self._count += 1
        if self._spill is None:
            self._traces.setdefault(trace_id, []).append(item)
            if self._count > self._memory_spans:
                self._start_spill()
            return
        self._spill.add(trace_id, item)

    def _start_spill(self) -> None:
        expected = self._expected(self._count) if self._expected is not None else self._count * 4
        self._buckets = max(8, min(MAX_BUCKETS, -(-max(expected, self._count) // self._bucket_spans)))
        spill = self._spill = _Spill(self._buckets, self._directory)
        traces, self._traces = self._traces, {}
        for trace_id, items in traces.items():
            spill.extend(trace_id, items)
        spill.flush_all()

    def groups(self) -> Iterator[TraceGroups]:
        """Trace groups, one batch per bucket (all of memory when nothing was spilled)."""
        if self._spill is None:
            in_memory, self._traces = self._traces, {}
            yield list(in_memory.items())
            return
        yield from self._spill.groups()

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None
