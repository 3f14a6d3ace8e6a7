"""``durablewal tail --format jsonl|arrow [--follow]``: a table's committed rows as a
stream other programs read, from a step or a commit time, exactly once across restarts.

Every row carries the read API's metadata columns
(:func:`~pyspark_durable.endpoint.api.read_batches`: ``_step``, ``_region``,
``_sequence``, ``_row``, ...), so a consumer's position is a step: it restarts with
``--from-step <last complete step + 1>``. Output is written a whole step at a time and
flushed after each, so a consumer sees a step as soon as it committed; what marks a
step complete is format-specific (a killed tail may leave a step half written):

* ``jsonl``: one JSON object per row; the last row of each step has
  ``"_step_end": true`` (every other row ``false``). Values a JSON number or string
  cannot hold as they are get one documented form (:func:`json_value`).
* ``arrow``: an Arrow IPC stream, one record batch per step with rows of the table; a
  batch is whole or the stream ends with an error, so a batch read is a complete step.

Following polls the namespace's commits log (``Namespace.steps()``: one read of what
was appended since the last poll) every ``--poll-ms``, as ``tail -f`` does. SIGTERM
and SIGINT end it after the step being written, exit 0; a second one ends it at once.
A closed stdout (``| head``) ends it quietly, exit 0.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import decimal
import json
import math
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import pyarrow as pa

from pyspark_durable.endpoint.api import read_batches
from pyspark_durable.endpoint.step_times import first_step_since
from pyspark_durable.errors import StepNotCommitted
from pyspark_durable.times import timestamp_ms
from pyspark_durable.wal import Namespace, TableInfo
from pyspark_durable.wal.metadata import METADATA_FIELDS, METADATA_NAMES

from .shared import CliError, opened_namespace

STEP_END = "_step_end"
DEFAULT_POLL_MS = 500


# -- JSON values ------------------------------------------------------------------------


def _utc_text(value: dt.datetime) -> str:
    if value.tzinfo is None:  # a timestamp without a zone (Spark's TIMESTAMP_NTZ): as it is
        return value.isoformat()
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def json_value(value: Any) -> Any:
    """One Arrow value (as ``to_pylist`` gives it) in the form the ``jsonl`` format writes.

    JSON has no bytes, dates, decimals or non-finite floats, and a JavaScript reader (jq
    too) holds numbers as doubles, so: binary is base64 text; timestamps ISO-8601 text
    (``Z`` when the type has a zone, none without one), dates and times ISO-8601 text;
    decimals exact text (``"12.30"``); NaN and infinities the text ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``; durations integer microseconds; maps a list of
    ``[key, value]`` pairs; structs objects, lists arrays. Integers stay numbers, exact
    in the text however large."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.datetime):
        return _utc_text(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value // dt.timedelta(microseconds=1)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return str(value)


# -- output formats ---------------------------------------------------------------------


class JsonlOut:
    """One JSON object per row: the metadata columns first, then ``_step_end``, then the
    table's columns; a step's lines are built, then written and flushed together."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    def step(self, batches: list[pa.RecordBatch]) -> None:
        rows = [row for batch in batches for row in batch.to_pylist()]
        if not rows:
            return
        lines = []
        for i, row in enumerate(rows):
            meta = {k: json_value(row[k]) for k in METADATA_NAMES}
            meta[STEP_END] = i == len(rows) - 1
            meta.update((k, json_value(v)) for k, v in row.items() if k not in meta)
            lines.append(json.dumps(meta, ensure_ascii=False, separators=(",", ":")))
        self.stream.write(("\n".join(lines) + "\n").encode("utf-8"))
        self.stream.flush()

    def close(self) -> None:
        self.stream.flush()


class ArrowOut:
    """An Arrow IPC stream (``RecordBatchStreamWriter``), one batch per step. The schema
    is the table's when the stream starts: a schema version added while following ends
    the stream with an error naming the step to restart from."""

    def __init__(self, stream: BinaryIO, schema: pa.Schema) -> None:
        self.stream = stream
        self.schema = schema
        self.writer = pa.ipc.new_stream(stream, schema)
        stream.flush()  # a reader learns the schema before the first step

    def step(self, batches: list[pa.RecordBatch]) -> None:
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        if not all(b.schema.equals(self.schema) for b in batches):
            raise CliError(f"the table's schema changed at step "
                           f"{batches[0].column('_step')[0].as_py()}: an Arrow stream has one "
                           "schema; restart the tail with --from-step at that step")
        self.writer.write_batch(pa.concat_batches(batches))
        self.stream.flush()

    def close(self) -> None:
        self.writer.close()
        self.stream.flush()


# -- where to start ---------------------------------------------------------------------


def _start(ns: Namespace, info: TableInfo, args: argparse.Namespace) -> tuple[int, int]:
    """The first step to write and how many of its rows to skip: ``--from-step``,
    ``--from-time`` (the first step committed at or after it, as ``startingTimestamp``),
    else the step holding the last ``-n`` rows (``-n 0``: the next step)."""
    steps = ns.steps()
    if args.from_step is not None:
        if args.from_step > steps.stop and not args.follow:
            raise StepNotCommitted(f"--from-step {args.from_step} is not committed yet; "
                                   f"committed steps are [{steps.start}, {steps.stop})",
                                   namespace=ns.name, step=args.from_step)
        return args.from_step, 0
    since = args.from_time if args.from_time is not None else args.since
    if since is not None:
        return first_step_since(ns, timestamp_ms("--from-time", since), "--from-time",
                                stream=args.follow), 0
    missing = args.n
    for step in reversed(steps):
        if missing <= 0:
            return step + 1, 0
        rows = sum(r.rows for r in ns.step_commit(step).runs if r.table_id == info.table_id)
        if rows >= missing:
            return step, rows - missing
        missing -= rows
    return steps.start, 0


def _steps(ns: Namespace, info: TableInfo, steps: range,
           skip: int) -> Iterator[list[pa.RecordBatch]]:
    """The rows of ``steps`` with their metadata, a list of batches per step holding
    rows of the table, the first ``skip`` rows left out; one read of the whole range
    (a read refreshes the namespace once)."""
    held: list[pa.RecordBatch] = []
    for batch in read_batches(ns, info.table_id, steps.start, steps.stop):
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        batch, skip = batch.slice(skip), 0
        if held and _step_of(held[0]) != _step_of(batch):
            yield held
            held = []
        held.append(batch)
    if held:
        yield held


def stream_schema(info: TableInfo) -> pa.Schema:
    """The Arrow stream's schema: the table's columns, then the metadata columns, as
    :func:`~pyspark_durable.endpoint.api.read_batches` gives them."""
    schema = info.schema
    for field in METADATA_FIELDS:
        schema = schema.append(field)
    return schema


def _step_of(batch: pa.RecordBatch) -> int:
    return batch.column("_step")[0].as_py()


class Stop:
    """SIGINT and SIGTERM as a request to stop after the step being written (a second
    one stops at once); the previous handlers come back on leaving."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def _handler(self, signum: int, frame: Any) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()

    @contextmanager
    def installed(self) -> Iterator[Stop]:
        if threading.current_thread() is not threading.main_thread():
            yield self  # signals reach the main thread only: nothing to install
            return
        before = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, handler in before.items():
                signal.signal(s, handler)


def stream_rows(ns: Namespace, info: TableInfo, args: argparse.Namespace,
                out: JsonlOut | ArrowOut, stop: Stop) -> None:
    """Write the rows of every committed step from the start on; with ``--follow``, wait
    for new steps every ``--poll-ms`` until stopped, else end at the last committed step."""
    step, skip = _start(ns, info, args)
    while not stop.event.is_set():
        committed = ns.steps()  # the cheap call: replays only what was appended since
        if step < committed.stop:
            for batches in _steps(ns, info, range(step, committed.stop), skip):
                out.step(batches)
                if stop.event.is_set():
                    return
            step, skip = committed.stop, 0
        if not args.follow or reader_gone(out.stream):
            return  # a reader gone is a stop, as a broken pipe is
        stop.event.wait(args.poll_ms / 1000)


def reader_gone(stream: BinaryIO) -> bool:
    """Whether ``stream`` is a pipe whose reader closed it (``| head`` done), seen without
    writing: a follow that waits for steps would otherwise notice only at its next write,
    which may never come. A file or a terminal is never gone."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), 0)  # POLLERR and POLLHUP are always reported
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no fileno (tests), or no poll
        return False


def _quiet_stdout() -> None:
    """After a broken pipe: stdout to /dev/null, so that the exit's flush writes nothing
    and prints no second error."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def cmd_tail_stream(args: argparse.Namespace) -> int:
    """``tail`` in a machine format, and ``--follow``: rows as JSON lines or an Arrow
    stream on stdout; 0 when stopped by a signal or a closed stdout too."""
    if args.format == "text":
        raise CliError("--follow writes a machine format: give --format jsonl or --format "
                       "arrow")
    if args.json:
        raise CliError("--json is one document; a stream is --format jsonl")
    if args.since is not None and args.from_time is not None:
        raise CliError("give --since or --from-time, not both")
    stdout = sys.stdout.buffer
    out: JsonlOut | ArrowOut | None = None
    try:
        with opened_namespace(args) as ns, Stop().installed() as stop:
            info = ns.tables.lookup(args.table if args.table_id is None else args.table_id)
            if args.format == "arrow":
                out = ArrowOut(stdout, stream_schema(info))
            else:
                out = JsonlOut(stdout)
            stream_rows(ns, info, args, out, stop)
            out.close()
    except BrokenPipeError:
        _quiet_stdout()
    return 0
