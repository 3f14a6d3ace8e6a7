"""Durations and points in time as users write them, parsed in one place.

Durations follow Spark's own options (``JavaUtils.timeStringAsMs``, as in the Kafka
source's ``maxTriggerDelay``): an integer with an optional unit, ``us``, ``ms``, ``s``,
``m``/``min``, ``h`` or ``d``; no unit means milliseconds. Timestamps follow the Kafka
source's ``startingTimestamp``: milliseconds since the epoch, or (cheaper to type) an
ISO-8601 date-time; one without a zone is UTC, never the machine's local time, so a
driver and a CLI in different zones name the same instant.
"""

from __future__ import annotations

import datetime as dt
import re

from pyspark_durable.errors import ConfigError

_DURATION = re.compile(r"\s*([0-9]+)\s*(us|ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_UNIT_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "min": 60_000_000,
            "h": 3_600_000_000, "d": 86_400_000_000}


def duration_ms(name: str, value: str) -> int:
    """``value`` (``"2s"``, ``"500ms"``, ``"15m"``) in milliseconds; ``name`` says where."""
    found = _DURATION.fullmatch(str(value))
    if found is None:
        raise ConfigError(f"option {name}={value!r} is not a duration: write an integer and a "
                          "unit, us, ms, s, m (or min), h or d, e.g. '2s', '500ms', '15m' "
                          "(no unit: milliseconds)")
    unit = (found.group(2) or "ms").lower()
    return int(found.group(1)) * _UNIT_US[unit] // 1_000


def timestamp_ms(name: str, value: object) -> int:
    """``value`` as milliseconds since the epoch: an integer, or ISO-8601 (no zone: UTC)."""
    if isinstance(value, int) and not isinstance(value, bool):
        millis = value
    elif isinstance(value, dt.datetime):
        millis = _iso_ms(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
        millis = int(value)
    elif isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is None:
            raise ConfigError(f"{name}={value!r} is not a timestamp: give milliseconds since "
                              "the epoch (1767225600000) or an ISO-8601 date-time "
                              "('2026-01-01T00:00:00Z'; no zone means UTC)")
        millis = _iso_ms(parsed)
    else:
        raise ConfigError(f"{name}={value!r} is a {type(value).__name__}, not a timestamp "
                          "(milliseconds since the epoch, or an ISO-8601 string)")
    if millis < 0:
        raise ConfigError(f"{name}={value!r} is before 1970: a commit time is never negative")
    return millis


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _iso_ms(moment: dt.datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return (moment - _EPOCH) // dt.timedelta(milliseconds=1)  # exact: no float


def iso(millis: int) -> str:
    """A commit time for messages: ISO-8601 UTC with milliseconds, and the raw number."""
    try:
        moment = dt.datetime.fromtimestamp(millis / 1000, dt.UTC)
    except (ValueError, OverflowError, OSError):  # past year 9999: the number alone
        return f"{millis} ms"
    return f"{moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} ({millis} ms)"
