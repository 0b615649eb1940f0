"""Metric families whose updates take no lock: per-thread cells summed into each family when
scraped.

A prometheus-client child takes a lock per update and a histogram walks its buckets in Python;
the families every call and every trim update are these instead. Each cell is written only by
its own thread; a scrape sums them. The exposition is prometheus-client's: names, help, labels,
buckets, values and `_created` samples (each label set's first use).
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]


def _created_samples() -> bool:
    """Whether `_created` samples are exposed: prometheus-client's own switch
    (PROMETHEUS_DISABLE_CREATED_SERIES, `disable_created_metrics()`), read as its collectors do."""
    return bool(getattr(prometheus_metrics, "_use_created", True))


class CounterCell:
    """One thread's part of one counter series; only that thread adds to it."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class HistogramCell:
    """One thread's part of one histogram series: a count per bucket (not cumulative; the last is
    +Inf) and the sum. Only that thread observes into it."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        # The first bucket whose bound is >= amount, as prometheus-client's `amount <= bound`.
        self.counts[bisect.bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class _Family(Collector):
    """A family of series, each the sum of its threads' cells. `declare` shows a series (at zero)
    before its first update; a series' `_created` is its first declaration or cell."""

    kind = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._created: dict[Labels, float] = {}  # in first-use order, as prometheus-client's
        self._cells: list[tuple[Labels, Any]] = []
        self._local = threading.local()
        if not self.labelnames:  # its one series shows from the start, as prometheus-client's
            self.declare(())

    def declare(self, labels: Labels) -> None:
        with self._lock:
            self._created.setdefault(labels, time.time())

    def _cell(self, labels: Labels) -> Any:
        """The calling thread's cell of the series `labels` (made on its first use there)."""
        try:
            mine: dict[Labels, Any] = self._local.cells
        except AttributeError:
            mine = self._local.cells = {}
        cell = mine.get(labels)
        if cell is None:
            cell = mine[labels] = self._new_cell()
            with self._lock:
                self._created.setdefault(labels, time.time())
                self._cells.append((labels, cell))
        return cell

    def _new_cell(self) -> Any:
        raise NotImplementedError

    def _snapshot(self) -> tuple[list[tuple[Labels, float]], list[tuple[Labels, Any]]]:
        with self._lock:
            return list(self._created.items()), list(self._cells)

    def _family(self) -> Metric:
        raise NotImplementedError

    def describe(self) -> Iterable[Metric]:
        # The registry takes the names from here (clashes, `?name[]=` filtering) without a scrape.
        return [self._family()]


class CounterFamily(_Family):
    def cell(self, labels: Labels) -> CounterCell:
        cell: CounterCell = self._cell(labels)
        return cell

    def inc(self, amount: float = 1) -> None:
        """Adds to the one series of a family without labels (prometheus-client's `inc`)."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self._cell(()).value += amount

    def _new_cell(self) -> CounterCell:
        return CounterCell()

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterable[Metric]:
        created, cells = self._snapshot()
        totals = dict.fromkeys((labels for labels, _ in created), 0)
        for labels, cell in cells:
            totals[labels] += cell.value
        family = self._family()
        with_created = _created_samples()
        for labels, first in created:
            family.add_metric(labels, float(totals[labels]), first if with_created else None)
        return [family]


class HistogramFamily(_Family):
    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        super().__init__(name, documentation, labelnames)
        self.bounds = (*(float(bound) for bound in buckets), math.inf)
        # The `le` labels as prometheus-client writes them (it ships no hints for this one).
        self._les: list[str] = [
            floatToGoString(bound)  # type: ignore[no-untyped-call]
            for bound in self.bounds
        ]

    def cell(self, labels: Labels) -> HistogramCell:
        cell: HistogramCell = self._cell(labels)
        return cell

    def _new_cell(self) -> HistogramCell:
        return HistogramCell(self.bounds)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterable[Metric]:
        created, cells = self._snapshot()
        size = len(self.bounds)
        counts = {labels: [0] * size for labels, _ in created}
        sums = dict.fromkeys(counts, 0.0)
        for labels, cell in cells:
            sums[labels] += cell.sum
            total = counts[labels]
            for index, count in enumerate(list(cell.counts)):
                total[index] += count
        family = self._family()
        with_created = _created_samples()
        for labels, first in created:
            cumulative = 0.0
            buckets = []
            for le, count in zip(self._les, counts[labels], strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(labels, buckets, sums[labels])
            if with_created:
                series = dict(zip(self.labelnames, labels, strict=True))
                family.samples.append(Sample(f"{self.name}_created", series, first))
        return [family]
