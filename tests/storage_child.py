"""Runs inside its own mount namespace (``unshare -rm``): a WAL on a small tmpfs.

Usage: unshare -rm python storage_child.py MODE DIR
MODE ``readonly``: write steps and clean, remount the tmpfs read-only, then read every
step, recover a fresh handle and run ``check``. MODE ``full``: fill a 1 MiB tmpfs with
steps until the disk is full. Prints one JSON document with what happened.
"""

from __future__ import annotations

import json
import subprocess
import sys

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import DurableWalError
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner
from pyspark_durable.wal.check import Checker


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def main() -> None:
    mode, folder = sys.argv[1:3]
    mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", folder)
    config = {"backend": "file", "namespace": "shop", "options": {"path": folder + "/wal"}}
    ns = open_namespace(config)
    out: dict = {"acked": {}}
    if mode == "readonly":
        for ws in range(6):
            out["acked"][ws] = write_step(ns, "w", ws, {"t": [{"id": ws, "s": "x" * ws}]})
        ns.expire(2)
        Cleaner(ns, grace_ms=0).run_once()
        ns.close()
        mount("-o", "remount,ro", folder)
        try:
            fresh = open_namespace(config)
            out["ids"] = read_steps(fresh, "t").column("id").to_pylist()
            out["steps"] = [fresh.steps().start, fresh.steps().stop]
            report = Checker(open_store("file", "shop", path=folder + "/wal")).run()
            out["problems"] = [p.text() for p in report.problems]
            try:
                write_step(fresh, "w", 9, {"t": [{"id": 9, "s": ""}]})
            except DurableWalError as exc:
                out["write_error"] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            out["error"] = f"{type(exc).__name__}: {exc}"
    else:
        ws = 0
        try:
            while ws < 10_000:
                out["acked"][ws] = write_step(ns, "w", ws, {"t": [{"id": ws, "s": "y" * 2000}]})
                ws += 1
        except DurableWalError as exc:
            out["write_error"] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            out["error"] = f"{type(exc).__name__}: {exc}"
        fresh = open_namespace(config)
        out["ids"] = read_steps(fresh, "t").column("id").to_pylist()
        out["problems"] = [p.text() for p in Checker(
            open_store("file", "shop", path=folder + "/wal")).run().problems]
        out["tmp_files"] = subprocess.run(["find", folder, "-name", "*.tmp"], check=True,
                                          capture_output=True, text=True).stdout.split()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
