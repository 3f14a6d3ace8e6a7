"""A process that opens, reads, checks or cleans a WAL never imports pandas.

pyarrow's converter from Python values imports pandas to ask about its input (~0.2 s and
~50 MB); the package builds its own arrays from buffers (codec/arrays.py), so a CLI
command or a Python-API process pays for pandas only if it uses it itself."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from pyspark_durable.codec.arrays import (
    bytes_array,
    int_array,
    int_list_array,
    scalar_of,
    string_array,
)
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace

CHILD = textwrap.dedent('''
    import contextlib, io, json, sys
    from pyspark_durable.cli import main
    from pyspark_durable.endpoint import read_steps
    from pyspark_durable.log import open_store
    from pyspark_durable.wal import Namespace

    path = sys.argv[1]
    ns = Namespace(open_store("file", "shop", path=path), create=False)
    steps = list(ns.steps())
    rows = read_steps(ns, "orders").num_rows
    ns.read_step(steps[-1])
    ns.close()
    codes = {}
    for command in (["steps"], ["tables"], ["regions"], ["check"], ["lag"],
                    ["tail", "--table", "orders"], ["clean", "--grace-ms", "0"]):
        with contextlib.redirect_stdout(io.StringIO()):
            codes[command[0]] = main([*command, path, "--namespace", "shop"])
    print(json.dumps({"steps": len(steps), "rows": rows, "codes": codes,
                      "pandas": sorted(m for m in sys.modules if m.split(".")[0] == "pandas")}))
''')


def test_open_read_check_and_clean_import_no_pandas(tmp_path):
    """This tests that a fresh process that opens a namespace from a snapshot, lists and
    reads its steps, and runs steps, tables, regions, check, lag, tail and clean on it
    gets every answer (all 12 steps, 60 rows, exit 0) without importing pandas."""
    rows = pa.table({"id": pa.array(range(5), pa.int64()), "item": ["a", "b", "c", "d", "e"]})
    ns = Namespace(open_store("file", "shop", path=str(tmp_path)))
    for i in range(12):
        attempt = ns.begin("w", i)
        attempt.write("orders", rows, region_id=0)
        attempt.commit()
        if i == 8:
            Cleaner(ns, grace_ms=0).run_once()  # a snapshot, and records after it
    ns.close()
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"steps": 12, "rows": 60, "pandas": [],
                   "codes": dict.fromkeys(["steps", "tables", "regions", "check", "lag",
                                           "tail", "clean"], 0)}


def test_arrays_built_from_buffers_equal_pyarrows_own():
    """This tests that the arrays the package builds from buffers equal what pyarrow's
    converter makes of the same values (nulls, empty lists, multi-byte text, every
    integer width, 64-bit extremes), and that an out-of-range value is refused."""
    cases = [
        (int_array([0, -1, 2**63 - 1, -2**63]), pa.array([0, -1, 2**63 - 1, -2**63], pa.int64())),
        (int_array([0, 2**64 - 1], pa.uint64()), pa.array([0, 2**64 - 1], pa.uint64())),
        (int_array([1, 2], pa.int32()), pa.array([1, 2], pa.int32())),
        (int_array([], pa.int16()), pa.array([], pa.int16())),
        (int_list_array([[1, 2], None, [], [2**64 - 1]]),
         pa.array([[1, 2], None, [], [2**64 - 1]], pa.list_(pa.uint64()))),
        (int_list_array([None] * 9), pa.array([None] * 9, pa.list_(pa.uint64()))),
        (string_array(["a", "", "naïve ✓"]), pa.array(["a", "", "naïve ✓"], pa.string())),
        (bytes_array([b"\x00", b""]), pa.array([b"\x00", b""], pa.binary())),
    ]
    for built, expected in cases:
        built.validate(full=True)
        assert built.equals(expected), (built, expected)
    utc = pa.timestamp("us", tz="UTC")
    assert scalar_of(7, utc).equals(pa.scalar(7, utc))
    assert scalar_of(None, utc).equals(pa.scalar(None, utc))
    assert scalar_of("x", pa.string()).equals(pa.scalar("x", pa.string()))
    with pytest.raises(OverflowError):
        int_array([2**63], pa.int64())
