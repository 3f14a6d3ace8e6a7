"""Event time per step: a writer's eventTimeColumn span, recorded in the
step's commit, read back as metadata columns, used by startingEventTime."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from pyspark_durable.endpoint.api import read_steps
from pyspark_durable.endpoint.step_times import first_step_reaching
from pyspark_durable.errors import ConfigError, StepNotCommitted
from pyspark_durable.log import open_store
from pyspark_durable.spark.sink import check_event_time_column, event_time_of
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.format.records import StepCommit

UTC = dt.UTC


def us(*args: int) -> int:
    return int(dt.datetime(*args, tzinfo=UTC).timestamp() * 1_000_000)


def test_event_time_of_takes_timestamps_dates_and_skips_nulls():
    """This tests that the span of a batch's event-time column is its min and max in µs,
    for zoned and zone-less timestamps of any unit and for dates, that nulls are skipped,
    that an all-null column gives no span, and that other types are refused by name."""
    t0, t1 = dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(2026, 1, 2, 3, tzinfo=UTC)
    for kind in (pa.timestamp("us", "UTC"), pa.timestamp("ms", "UTC"), pa.timestamp("s")):
        values = [t1, None, t0] if kind.tz else [t1.replace(tzinfo=None), None,
                                                 t0.replace(tzinfo=None)]
        batch = pa.record_batch({"e": pa.array(values, kind)})
        assert event_time_of(batch, "e") == (us(2026, 1, 1), us(2026, 1, 2, 3))
    dates = pa.record_batch({"e": pa.array([dt.date(2026, 3, 2), dt.date(2026, 3, 1)])})
    assert event_time_of(dates, "e") == (us(2026, 3, 1), us(2026, 3, 2))
    assert event_time_of(pa.record_batch({"e": pa.nulls(3, pa.timestamp("us"))}), "e") is None
    with pytest.raises(ConfigError, match="eventTimeColumn 'name' has type string"):
        check_event_time_column(pa.schema([("name", pa.string())]), "name")
    with pytest.raises(ConfigError, match="eventTimeColumn 'nope' is not a column"):
        check_event_time_column(pa.schema([("name", pa.string())]), "nope")


def test_steps_record_their_span_and_readers_see_and_select_by_it(tmp_path):
    """This tests that a step commits the span covering all its attempts' event times
    (a step without one records none), that the span survives a reopen (replay of the
    commit record), that reads carry it as _event_time_min/_event_time_max, and that
    first_step_reaching picks the first step whose max reaches a time."""
    ns = Namespace(open_store("file", "et", path=str(tmp_path)))
    spans = [[(us(2026, 1, 5), us(2026, 1, 6)), (us(2026, 1, 1), us(2026, 1, 3))], [],
             [(us(2026, 1, 2), us(2026, 1, 9))]]
    for step, attempt_spans in enumerate(spans):
        receipts = []
        for i, span in enumerate(attempt_spans or [None]):
            attempt = ns.begin("w", step, f"a{step}-{i}")
            attempt.write("t", pa.table({"id": [step * 10 + i]}))
            if span:
                attempt.note_event_time(*span)
            receipts.append(attempt.receipt())
        ns.commit("w", step, receipts)
    ns.close()
    ns = Namespace(open_store("file", "et", path=str(tmp_path)), create=False)
    assert [ns.step_commit(s).event_time for s in range(3)] == [
        (us(2026, 1, 1), us(2026, 1, 6)), None, (us(2026, 1, 2), us(2026, 1, 9))]
    rows = read_steps(ns, "t").to_pylist()
    assert {(r["_step"], r["_event_time_min"], r["_event_time_max"]) for r in rows} == {
        (0, dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(2026, 1, 6, tzinfo=UTC)),
        (1, None, None),
        (2, dt.datetime(2026, 1, 2, tzinfo=UTC), dt.datetime(2026, 1, 9, tzinfo=UTC))}
    assert first_step_reaching(ns, us(2026, 1, 4), "t") == 0
    assert first_step_reaching(ns, us(2026, 1, 7), "t") == 2
    assert first_step_reaching(ns, us(2026, 2, 1), "t", stream=True) == 3
    with pytest.raises(StepNotCommitted, match="no retained step"):
        first_step_reaching(ns, us(2026, 2, 1), "option startingEventTime")
    ns.close()
    doc = StepCommit("w", 0, ("a",), (), 1, event_time=(1, 2)).to_json()
    assert doc["et"] == [1, 2] and StepCommit.from_json(doc).event_time == (1, 2)
    assert "et" not in StepCommit("w", 0, ("a",), (), 1).to_json()
