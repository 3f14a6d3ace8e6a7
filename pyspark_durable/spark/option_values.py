"""What the text of one ``durablewal`` option becomes: the parsers the option table
(:mod:`pyspark_durable.spark.option_table`) gives each option.

A parser takes the option's name, its text as Spark hands it and the table's minimum
(None: no minimum), and returns the typed value; a value it cannot take is a
:class:`~pyspark_durable.errors.ConfigError` naming the option, the text and what is
allowed. Parsing is strict where a lax reading would silently change the meaning:
``int()`` alone would read an Arabic-Indic 7 or ``1_0``, and many tools read a
retention limit of 0 as "no limit".
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from typing import Any

from pyspark_durable.errors import ConfigError
from pyspark_durable.times import duration_ms, timestamp_ms
from pyspark_durable.wal.metadata import METADATA_NAMES

Parser = Callable[[str, str, "int | None"], Any]

_DECIMAL = re.compile(r"\s*[+-]?[0-9]+\s*")  # ASCII decimals only


def text(name: str, value: str, minimum: int | None) -> str:
    """A name (namespace, table, column, reader id): taken as written."""
    return str(value)


def integer(name: str, value: str, minimum: int | None) -> int:
    """A decimal integer, at least ``minimum``."""
    if not _DECIMAL.fullmatch(str(value)):
        raise ConfigError(f"option {name}={value!r} is not an integer")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ConfigError(f"option {name}={value!r} must be >= {minimum}")
    return number


def integers(name: str, value: str, minimum: int | None) -> tuple[int, ...] | None:
    """A comma list of integers, each at least ``minimum``; blank: every one (None)."""
    items = _names(value)
    return None if items is None else tuple(integer(name, item, minimum) for item in items)


def retention_limit(name: str, value: str, minimum: int | None) -> int:
    """A retention limit: below ``minimum`` (1) it would expire every step at the next
    clean, where many tools read 0 as "no limit"; the error says how to keep every step."""
    number = integer(name, value, None)
    if minimum is not None and number < minimum:
        raise ConfigError(
            f"option {name}={value!r} would expire every step: 0 is not "
            f"'no limit'; leave {name} out to keep every step"
        )
    return number


def boolean(name: str, value: str, minimum: int | None) -> bool:
    """``true`` or ``false``, in any case."""
    lowered = str(value).strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError(f"option {name}={value!r} is not true or false")


def choice(*allowed: str) -> Parser:
    """A parser taking one of ``allowed`` words, in any case."""

    def parse(name: str, value: str, minimum: int | None) -> str:
        word = str(value).strip().lower()
        if word not in allowed:
            raise ConfigError(f"option {name}={word!r}; valid: {', '.join(allowed)}")
        return word

    return parse


def step_or(*words: str) -> Parser:
    """A parser taking one of ``words`` or a step number at least ``minimum``, as text."""

    def parse(name: str, value: str, minimum: int | None) -> str:
        word = str(value).strip().lower()
        if word in words:
            return word
        if not _DECIMAL.fullmatch(word):
            raise ConfigError(f"option {name}={word!r} is not an integer (a step), {' or '.join(words)}")
        return str(integer(name, word, minimum))

    return parse


def timestamp(name: str, value: str, minimum: int | None) -> int:
    """Milliseconds since the epoch, or ISO-8601 (no zone: UTC)."""
    return timestamp_ms(f"option {name}", value)


def duration(name: str, value: str, minimum: int | None) -> int:
    """A Spark duration (``500ms``, ``2s``, ``15m``; no unit: ms), in milliseconds."""
    return duration_ms(name, value)


def tables(name: str, value: str, minimum: int | None) -> tuple[str | int, ...] | None:
    """Table names, never numbers read as ids.

    A comma list (``a, b``) gives names stripped of spaces; a JSON list (``["a,b", " c ",
    7]``) gives strings as names exactly as written and integers as table ids (tables an
    older version created from numeric names), so every name a writer can create can be
    selected.
    """
    if not str(value).lstrip().startswith("["):
        return _names(value)
    try:
        listed = json.loads(value)
    except ValueError as exc:
        raise ConfigError(
            f"option {name}={value!r} starts with '[' but is not a JSON list "
            f"({exc}); write it as a JSON list of names and ids, e.g. "
            '["a,b", " c ", 7], or as a comma list of names'
        ) from None
    if not isinstance(listed, list) or not listed:
        raise ConfigError(
            f"option {name}={value!r} is not a non-empty JSON list of table "
            "names (strings) and ids (integers)"
        )
    for item in listed:
        is_id = isinstance(item, int) and not isinstance(item, bool) and 0 <= item < 1 << 64
        if not (is_id or (isinstance(item, str) and item)):
            raise ConfigError(
                f"option {name}={value!r}: {item!r} is neither a table name (a "
                "non-empty string) nor a table id (an integer in [0, 2**64))"
            )
    return tuple(listed)


def metadata_names(name: str, value: str, minimum: int | None) -> tuple[str, ...]:
    """``none``, ``all``, or a comma list of metadata column names (``_step,
    _commit_timestamp``), kept in :data:`METADATA_NAMES` order whatever order they are
    written in, so one set of names is one schema. An unknown name fails with the
    closest one and the valid names."""
    word = str(value).strip()
    if word.lower() in ("none", ""):
        return ()
    if word.lower() == "all":
        return METADATA_NAMES
    given = _names(word) or ()
    unknown = [n for n in given if n not in METADATA_NAMES]
    if unknown:
        close = difflib.get_close_matches(unknown[0], METADATA_NAMES, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"option {name}={value!r}: {unknown[0]!r} is no metadata column{hint} "
                          f"(give none, all, or a comma list of {', '.join(METADATA_NAMES)})")
    return tuple(n for n in METADATA_NAMES if n in given)


def _names(value: str) -> tuple[str, ...] | None:
    """A comma list, spaces stripped and empty items dropped; blank: None (every one)."""
    if not str(value).strip():
        return None
    return tuple(v.strip() for v in str(value).split(",") if v.strip())
