"""Child processes for ``tests/log/test_file_log.py``: real appenders, a reader and a crash victim.

Run as ``python tests/children/file_log_child.py MODE ...`` (the test sets ``PYTHONPATH`` to the
repository root). Every record's content is a pure function of ``(tag, seq)``
(:func:`make_record`), so the parent test can recompute the expected bytes of any entry
it finds, and can tell which writer appended it.

Modes:

* ``append PATH NS LOG WRITER COUNT SEGSIZE THREADS``: print ``ready``, wait for a line
  on stdin (so that all appenders start together), append ``COUNT`` records with
  ``THREADS`` threads in random batches of 1..8, then print one JSON line
  ``{"acks": [[tag, seq, offset], ...]}``.
* ``read PATH NS LOG TOTAL SEGSIZE``: print ``ready``, then follow the log (high
  watermark, then the new entries) until ``TOTAL`` entries were read; check every entry
  decodes to the record its key names; print one JSON line with the high watermarks it
  saw, the entries it read and any problem.
* ``crash PATH NS LOG RUN SEGSIZE THREADS``: append forever (batches of 1..50 records,
  values up to 4 KiB) and, after each append returned, print and flush
  ``A tag seq0 n offset0``: the records ``(tag, seq0 .. seq0+n-1)`` are acknowledged at
  ``offset0 ..``. The parent kills it with SIGKILL.
* ``share PATH NS LOG WRITER COUNT SEGSIZE``: one of several appender processes sharing
  syncs, each batch announced and acknowledged on stdout (:func:`run_share`).
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
import sys
import threading
import time

from pyspark_durable.log import Record
from pyspark_durable.log.file import FileLogStore
from tests.children import without_pandas  # noqa: F401 - pyarrow finds no pandas to import (see there)

KEY = struct.Struct(">QQ")


def make_record(tag: int, seq: int, max_value: int) -> Record:
    """The one record a writer with ``tag`` appends as its ``seq``-th: pure function."""
    digest = hashlib.blake2b(KEY.pack(tag, seq), digest_size=32).digest()
    size = int.from_bytes(digest[:4], "big") % (max_value + 1)
    value = (digest * (size // len(digest) + 1))[:size]
    headers = (("tag", str(tag).encode()), ("seq", str(seq).encode()))
    return Record(key=KEY.pack(tag, seq), value=value, headers=headers)


def parse_key(key: bytes) -> tuple[int, int]:
    return KEY.unpack(key)


def _open(path: str, namespace: str, name: str, segment_size: int):
    store = FileLogStore(namespace, path=path, segment_size_bytes=segment_size)
    return store, store.open_log(name)


def run_append(path: str, ns: str, name: str, writer: int, count: int, seg: int,
               threads: int) -> None:
    store, log = _open(path, ns, name, seg)
    print("ready", flush=True)
    sys.stdin.readline()  # the parent releases every appender at once
    acks: list[list[int]] = []
    acks_lock = threading.Lock()
    errors: list[str] = []

    def work(t: int) -> None:
        rng = random.Random(writer * 1000 + t)
        seqs = list(range(t, count, threads))
        try:
            while seqs:
                n = rng.randint(1, 8)
                batch, seqs = seqs[:n], seqs[n:]
                offsets = log.append([make_record(writer, s, 300) for s in batch])
                with acks_lock:
                    acks.extend([writer, s, o] for s, o in zip(batch, offsets, strict=True))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails
            errors.append(repr(exc))

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    store.close()
    print(json.dumps({"acks": acks, "errors": errors}), flush=True)


def run_read(path: str, ns: str, name: str, total: int, seg: int) -> None:
    store, log = _open(path, ns, name, seg)
    print("ready", flush=True)
    samples: list[int] = []
    entries: list[list[int]] = []
    problems: list[str] = []
    pos = 0
    deadline = time.monotonic() + 60
    while pos < total and time.monotonic() < deadline and len(problems) < 20:
        try:
            high = log.high_watermark()
            if not samples or high != samples[-1]:
                samples.append(high)
            for entry in log.read(pos, high):
                tag, seq = parse_key(entry.key)
                want = make_record(tag, seq, 300)
                same = (entry.value, entry.headers) == (want.value, want.headers)
                if entry.offset != pos or not same:
                    problems.append(f"offset {entry.offset} (expected {pos}): bad content")
                entries.append([entry.offset, tag, seq])
                pos = entry.offset + 1
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails
            problems.append(repr(exc))
        if not samples or pos == samples[-1]:
            time.sleep(0.001)  # caught up: let the writers run (this is the follower's poll)
    if pos < total:
        problems.append(f"stopped at offset {pos} of {total}")
    store.close()
    print(json.dumps({"samples": samples, "entries": entries, "problems": problems}),
          flush=True)


def run_crash(path: str, ns: str, name: str, run: int, seg: int, threads: int) -> None:
    _, log = _open(path, ns, name, seg)
    out_lock = threading.Lock()

    def work(t: int) -> None:
        tag = run * 16 + t
        rng = random.Random(tag)
        seq = 0
        while True:
            n = rng.randint(1, 50)
            offsets = log.append([make_record(tag, seq + i, 4096) for i in range(n)])
            if offsets != list(range(offsets[0], offsets[0] + n)):
                line = f"E offsets of one append are not dense: {offsets}\n"
            else:
                line = f"A {tag} {seq} {n} {offsets[0]}\n"
            with out_lock:
                sys.stdout.write(line)
                sys.stdout.flush()
            seq += n

    for t in range(threads):
        threading.Thread(target=work, args=(t,), daemon=True).start()
    threading.Event().wait()  # until SIGKILL


def run_share(path: str, ns: str, name: str, writer: int, count: int, seg: int) -> None:
    """One appender among several processes: batches of 1..8 records, each announced
    before it is appended (``B tag seq0 n``) and reported once acknowledged
    (``A tag seq0 n offset0``), so the parent knows which batch a kill left in flight; a
    failed append is reported (``E tag seq0 n error``) and the same records appended
    again, as a caller retries."""
    store, log = _open(path, ns, name, seg)
    print("ready", flush=True)
    sys.stdin.readline()  # the parent releases every appender at once
    rng = random.Random(writer)
    seq = 0
    while seq < count:
        n = min(rng.randint(1, 8), count - seq)
        records = [make_record(writer, seq + i, 300) for i in range(n)]
        print(f"B {writer} {seq} {n}", flush=True)
        try:
            offsets = log.append(records)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, then retried
            print(f"E {writer} {seq} {n} {type(exc).__name__}: {exc}", flush=True)
            continue
        print(f"A {writer} {seq} {n} {offsets[0]}", flush=True)
        seq += n
    stats = log.sync_stats
    store.close()
    print(f"S {stats['synced']} {stats['joined']}", flush=True)


def main(argv: list[str]) -> None:
    mode, path, ns, name, *rest = argv
    nums = [int(x) for x in rest]
    if mode == "append":
        run_append(path, ns, name, *nums)
    elif mode == "read":
        run_read(path, ns, name, *nums)
    elif mode == "crash":
        run_crash(path, ns, name, *nums)
    elif mode == "share":
        run_share(path, ns, name, *nums)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
