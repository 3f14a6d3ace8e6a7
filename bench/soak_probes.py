"""What bench/soak.py samples, read from outside the processes it measures: the
process tree under /proc, the driver JVM through ``jstat`` and ``jcmd``, the WAL
folder's size and the steps its namespace retains.

Nothing here attaches to the JVM or runs code in the measured processes; run
``python bench/soak.py``, not this.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soak_child import READER_ID, wal_config

# -- the sampler (this process) -------------------------------------------------------


def proc_tree() -> dict[int, list[int]]:
    """Children of every process, from /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid: int, tree: dict[int, list[int]]) -> Iterator[int]:
    todo = list(tree.get(pid, ()))
    while todo:
        p = todo.pop()
        yield p
        todo.extend(tree.get(p, ()))


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def find_jvm(driver: int) -> int | None:
    """The driver JVM: the java process PySpark's gateway started below the child."""
    tree = proc_tree()
    for pid in descendants(driver, tree):
        cmd = cmdline(pid)
        if cmd and os.path.basename(cmd[0]) == "java":
            return pid
    return None


def python_below(jvm: int) -> list[int]:
    """Spark's Python processes: the daemon, its forked workers, the streaming source and
    sink runners, whatever the JVM started (they run this interpreter)."""
    exe = os.path.realpath(sys.executable)
    out = []
    for pid in descendants(jvm, proc_tree()):
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == exe:
                out.append(pid)
        except OSError:
            continue
    return out


def roles(pids: list[int]) -> dict[str, list[float]]:
    """Spark's Python processes by what they run (``-m`` module and argument; a worker
    forked by a daemon carries its command line, hence "forked"): [count, RSS MB, fds]."""
    out: dict[str, list[float]] = {}
    members = set(pids)
    tree = proc_tree()
    parent = {c: p for p, cs in tree.items() for c in cs}
    for pid in pids:
        cmd = cmdline(pid)
        role = " ".join(cmd[cmd.index("-m") + 1:]) if "-m" in cmd else " ".join(cmd[1:])
        if parent.get(pid) in members:
            role += " (forked)"
        got = out.setdefault(role.removeprefix("pyspark."), [0, 0.0, 0])
        got[0] += 1
        got[1] = round(got[1] + status_fields(pid)["VmRSS"] / 1024, 1)
        got[2] += fd_count(pid)
    return out


def status_fields(pid: int) -> dict[str, int]:
    """VmRSS (kB) and Threads of a process (0 when it is gone)."""
    got = {"VmRSS": 0, "Threads": 0}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in got:
                    got[key] = int(line.split()[1])
    except OSError:
        pass
    return got


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def jstat_gc(pid: int) -> dict[str, float]:
    """``jstat -gc``'s columns (capacities and usage in kB, GC counts and seconds)."""
    res = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True,
                         timeout=60, check=False)
    lines = res.stdout.split("\n")
    if res.returncode or len(lines) < 2:
        return {}
    values = [float(v) if v != "-" else 0.0 for v in lines[1].split()]
    return dict(zip(lines[0].split(), values, strict=False))


def wal_size(path: Path) -> tuple[int, int, int]:
    """Bytes (apparent), bytes allocated (punched holes excluded) and files of a folder."""
    size = blocks = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue  # deleted by a cleaner meanwhile
            size += st.st_size
            blocks += st.st_blocks * 512
            files += 1
    return size, blocks, files


def wal_steps(run: Path, args: argparse.Namespace) -> tuple[int, int, int]:
    """Retained steps [first, next) and the reader's next step (-1: not there yet)."""
    from pyspark_durable.endpoint import open_namespace

    try:
        ns = open_namespace(wal_config(run, args), create=False)
    except Exception:  # noqa: BLE001 - the writer has not created it yet
        return -1, -1, -1
    try:
        steps = ns.steps()
        reader = ns.info.readers().get(READER_ID)
        return steps.start, steps.stop, reader.next_step if reader else -1
    finally:
        ns.close()


def read_status(run: Path) -> dict[str, Any]:
    try:
        return json.loads((run / "status.json").read_text())
    except (OSError, ValueError):
        return {}


MB = 1024 * 1024


def sample(t_s: float, driver: int, jvm: int, run: Path, args: argparse.Namespace) -> dict:
    """One sample of every series."""
    gc = jstat_gc(jvm)
    workers = python_below(jvm)
    w_status = [status_fields(p) for p in workers]
    wal_bytes, wal_alloc, wal_files = wal_size(run / "wal")
    first, nxt, reader_next = wal_steps(run, args)
    st = read_status(run)
    jvm_status, drv_status = status_fields(jvm), status_fields(driver)
    kb = 1024
    return {
        "kind": "sample", "t_s": round(t_s, 1),
        "wall": datetime.now(UTC).strftime("%H:%M:%S"),
        "heap_used_mb": round(sum(gc.get(k, 0) for k in ("S0U", "S1U", "EU", "OU")) / kb, 1),
        "heap_committed_mb": round(sum(gc.get(k, 0) for k in ("S0C", "S1C", "EC", "OC")) / kb, 1),
        "old_used_mb": round(gc.get("OU", 0) / kb, 1),
        "metaspace_mb": round(gc.get("MU", 0) / kb, 1),
        "young_gcs": int(gc.get("YGC", 0)), "full_gcs": int(gc.get("FGC", 0)),
        "gc_s": round(gc.get("GCT", 0), 2),
        "jvm_rss_mb": round(jvm_status["VmRSS"] / kb, 1), "jvm_threads": jvm_status["Threads"],
        "jvm_fds": fd_count(jvm),
        "driver_py_rss_mb": round(drv_status["VmRSS"] / kb, 1), "driver_py_fds": fd_count(driver),
        "workers_py_rss_mb": round(sum(s["VmRSS"] for s in w_status) / kb, 1),
        "workers_py_n": len(workers), "workers_py_fds": sum(fd_count(p) for p in workers),
        "wal_mb": round(wal_bytes / MB, 2), "wal_alloc_mb": round(wal_alloc / MB, 2),
        "wal_files": wal_files, "steps_first": first, "steps_next": nxt,
        "reader_next": reader_next,
        "rows_written": st.get("writer_rows", 0), "rows_read": st.get("reader_rows", 0),
        "load1": round(os.getloadavg()[0], 2), "workers_by_role": roles(workers),
        "nmt_mb": native_memory(jvm) if args.nmt else {},
    }


def jvm_facts(jvm: int) -> dict[str, str]:
    """The heap limit and the collector the driver JVM really runs with."""
    flags = subprocess.run(["jcmd", str(jvm), "VM.flags"], capture_output=True, text=True,
                           timeout=60, check=False).stdout
    max_heap = re.search(r"-XX:MaxHeapSize=(\d+)", flags)
    gc = re.search(r"-XX:\+Use(\w+GC)\b", flags)
    xmx = [a for a in cmdline(jvm) if a.startswith("-Xmx")]
    return {"max_heap_mb": str(int(max_heap.group(1)) // MB) if max_heap else "?",
            "gc": gc.group(1) if gc else "?", "xmx_arg": xmx[-1] if xmx else "none"}


NMT_LINE = re.compile(r"^-\s+(.+?) \(reserved=(\d+)KB, committed=(\d+)KB\)")


def native_memory(jvm: int) -> dict[str, float]:
    """The JVM's committed memory by Native Memory Tracking category (MB), which says
    where an RSS that grows goes: heap, metaspace (Class), threads, code, GC, malloc."""
    res = subprocess.run(["jcmd", str(jvm), "VM.native_memory", "summary"],
                         capture_output=True, text=True, timeout=60, check=False)
    out: dict[str, float] = {}
    for line in res.stdout.splitlines():
        line = line.strip()
        if line.startswith("Total: reserved="):
            out["Total"] = round(int(re.findall(r"committed=(\d+)KB", line)[0]) / 1024, 1)
        elif m := NMT_LINE.match(line):
            out[m.group(1)] = round(int(m.group(3)) / 1024, 1)
    return out


def live_heap_mb(jvm: int) -> float | None:
    """Heap used right after a full GC (``jcmd GC.run``): the live set. Only at the end,
    since a forced GC during the run would change what the soak measures."""
    subprocess.run(["jcmd", str(jvm), "GC.run"], capture_output=True, timeout=120, check=False)
    gc = jstat_gc(jvm)
    return round(sum(gc.get(k, 0) for k in ("S0U", "S1U", "EU", "OU")) / 1024, 1) if gc else None
