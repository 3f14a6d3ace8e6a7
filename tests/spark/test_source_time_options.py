"""The source's time options as a Spark user writes them: maxTriggerDelay (a Spark
duration) and startingTimestamp/endingTimestamp (ms since the epoch, or ISO-8601)."""

from __future__ import annotations

import pytest

from pyspark_durable.errors import ConfigError
from pyspark_durable.spark.options import WalOptions

BASE = {"path": "/tmp/wal"}


@pytest.mark.parametrize(("text", "millis"), [
    ("2s", 2_000), ("500ms", 500), ("15m", 900_000), ("1min", 60_000), ("1h", 3_600_000),
    ("250", 250), (" 3 S ", 3_000), ("1500us", 1)])
def test_max_trigger_delay_reads_spark_durations(text: str, millis: int):
    """This tests that maxTriggerDelay reads durations as Spark's Kafka source does
    (a unit, or none for milliseconds)."""
    opts = WalOptions.parse({**BASE, "minRowsPerTrigger": "10", "maxTriggerDelay": text})
    assert opts.max_trigger_delay_ms == millis


def test_max_trigger_delay_defaults_to_fifteen_minutes():
    """This tests that minRowsPerTrigger alone waits at most 15 minutes, Spark's default."""
    assert WalOptions.parse({**BASE, "minRowsPerTrigger": "10"}).max_trigger_delay_ms == 900_000


@pytest.mark.parametrize("text", ["fast", "2 seconds", "-1s", "1.5s", ""])
def test_a_bad_max_trigger_delay_is_a_config_error(text: str):
    """This tests that a duration Spark would not read fails naming the option and the units."""
    with pytest.raises(ConfigError, match=r"option maxTriggerDelay=.* is not a duration.*'15m'"):
        WalOptions.parse({**BASE, "minRowsPerTrigger": "10", "maxTriggerDelay": text})


def test_max_trigger_delay_without_min_rows_is_a_config_error():
    """This tests that maxTriggerDelay alone, which would bound nothing, is refused."""
    with pytest.raises(ConfigError, match="minRowsPerTrigger, which is not set"):
        WalOptions.parse({**BASE, "maxTriggerDelay": "2s"})


@pytest.mark.parametrize(("text", "millis"), [
    ("1767225600000", 1_767_225_600_000),
    ("2026-01-01T00:00:00Z", 1_767_225_600_000),
    ("2026-01-01T00:00:00", 1_767_225_600_000),  # no zone: UTC
    ("2026-01-01T01:00:00.250+01:00", 1_767_225_600_250)])
def test_timestamps_are_millis_or_iso(text: str, millis: int):
    """This tests that startingTimestamp and endingTimestamp take ms since the epoch or
    ISO-8601 (UTC without a zone)."""
    opts = WalOptions.parse({**BASE, "startingTimestamp": text, "endingTimestamp": text})
    assert (opts.starting_timestamp_ms, opts.ending_timestamp_ms) == (millis, millis)


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "-5", "1.5"])
def test_a_bad_timestamp_is_a_config_error(text: str):
    """This tests that a timestamp that is neither form fails naming the option and both forms."""
    with pytest.raises(ConfigError, match=r"option startingTimestamp=.*ISO-8601"):
        WalOptions.parse({**BASE, "startingTimestamp": text})


@pytest.mark.parametrize(("by_step", "by_time"), [("startingStep", "startingTimestamp"),
                                                  ("endingStep", "endingTimestamp")])
def test_a_step_and_a_timestamp_together_are_a_config_error(by_step: str, by_time: str):
    """This tests that a read given both a step and a timestamp for one end is refused."""
    with pytest.raises(ConfigError, match=f"{by_step}='3' and {by_time}='1000' both"):
        WalOptions.parse({**BASE, by_step: "3", by_time: "1000"})
