"""Filters a batch read takes over from Spark: whole steps, regions and tables pruned
before any entry is read.

Every row of a step shares its ``_step`` and ``_commit_timestamp``, every row of an
entry its ``_region`` and ``_table``. So a comparison of one of these columns with a
constant holds for a whole step, region or table or for none of its rows, and the
reader can apply it exactly by not planning what fails it: the filter is then not
handed back to Spark. Anything else (another column, ``OR``, ``NOT``, a null test)
is handed back untouched and Spark evaluates it as before.

Spark pushes filters only with ``spark.sql.python.filterPushdown.enabled`` set (off by
default in Spark 4.3), in a planning worker of its own; with the flag off it refuses
any reader that implements ``pushFilters``. A data source cannot read that flag, so it
asks :func:`spark_is_pushing` which worker is planning it and hands the pushing one a
reader with ``pushFilters``; any other worker (or a future Spark whose worker is named
differently) gets the plain reader, which reads everything, as before.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

PRUNING_COLUMNS = ("_step", "_commit_timestamp", "_region", "_table")
PUSHING_WORKER = "data_source_pushdown_filters.py"  # pyspark/sql/worker/, Spark 4.1+
_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, In)


@dataclass(frozen=True)
class Bounds:
    """What one column may hold: the AND of the comparisons pushed on it."""

    low: Any = None
    low_open: bool = False
    high: Any = None
    high_open: bool = False
    values: frozenset | None = None  # from = and IN

    def admits(self, value: Any) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or
                                      (self.high_open and value == self.high)):
            return False
        return self.values is None or value in self.values

    def and_(self, f: Filter, value: Any) -> Bounds:
        if isinstance(f, EqualTo | In):
            new = frozenset(value if isinstance(f, In) else (value,))
            return replace(self, values=new if self.values is None else self.values & new)
        if isinstance(f, GreaterThan | GreaterThanOrEqual):
            open_ = isinstance(f, GreaterThan)
            if self.low is None or value > self.low or (value == self.low and open_):
                return replace(self, low=value, low_open=open_)
            return self
        open_ = isinstance(f, LessThan)
        if self.high is None or value < self.high or (value == self.high and open_):
            return replace(self, high=value, high_open=open_)
        return self


def _micros(value: Any) -> int | None:
    """A timestamp filter's constant as microseconds since the epoch (Spark hands a
    ``datetime``; a naive one is in UTC, as Spark's Python worker converts it)."""
    if not isinstance(value, dt.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _constant(column: str, value: Any) -> Any:
    """The filter's constant in the form the pruning compares, or None to hand it back."""
    if column == "_commit_timestamp":
        return _micros(value)
    if column == "_table":
        return value if isinstance(value, str) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Pruning:
    """The pushed filters, per pruning column (none pushed: everything is admitted)."""

    columns: dict[str, Bounds] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.columns)

    def admits(self, column: str, value: Any) -> bool:
        bounds = self.columns.get(column)
        return bounds is None or bounds.admits(value)

    def admits_step(self, step: int, commit_timestamp_ms: int) -> bool:
        return self.admits("_step", step) and self.admits("_commit_timestamp",
                                                          commit_timestamp_ms * 1000)


def push(filters: Iterable[Filter], with_metadata: bool) -> tuple[Pruning, list[Filter]]:
    """(what the reader prunes, the filters handed back to Spark). Only a read that has
    the metadata columns can be filtered on them."""
    columns: dict[str, Bounds] = {}
    rest: list[Filter] = []
    for f in filters:
        path = getattr(f, "attribute", None)
        column = path[0] if isinstance(path, tuple) and len(path) == 1 else None
        if not with_metadata or column not in PRUNING_COLUMNS or not isinstance(f, _COMPARISONS):
            rest.append(f)
            continue
        raw = f.value if isinstance(f, In) else (f.value,)
        values = [_constant(column, v) for v in raw]
        if any(v is None for v in values):
            rest.append(f)
            continue
        columns[column] = columns.get(column, Bounds()).and_(
            f, tuple(values) if isinstance(f, In) else values[0])
    return Pruning(columns), rest


def spark_is_pushing(depth: int = 8) -> bool:
    """Whether the caller runs inside Spark's filter-pushdown planning worker (which
    calls ``DataSource.reader`` and then ``pushFilters`` on what it gets)."""
    frame = sys._getframe(1)  # noqa: SLF001 - CPython's documented frame access
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code.co_filename.endswith(PUSHING_WORKER):
            return True
        frame = frame.f_back
    return False
