"""The report of bench/soak.py: each series' first, last and largest value and its
trend after the warm-up, the table of samples, the verdict, and the plot.

Apart from the run because it is also written on its own from a samples file
(``python bench/soak.py --report-from bench/out/soak-<time>.jsonl``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# -- the report -----------------------------------------------------------------------


def verdict_line(v: dict) -> str:
    restarts = v.get("restarts") or []
    also = (f"; {len(restarts)} query restart(s) from the checkpoint after a Python process "
            f"of Spark's missed its 10 s to connect back ({', '.join(restarts)})"
            if restarts else "")
    if v.get("ok"):
        return (f"soak verdict: OK: {v['rows']:,} rows delivered, each id once, exactly ids "
                f"0..{v['committed_rows'] - 1} of committed steps [0, {v['steps'][1]}), every "
                f"step read; retention had expired steps [0, {v['steps'][0]}){also}")
    return "soak verdict: FAILED: " + "; ".join(v.get("problems", ["?"])) + also


# (key, label, unit, a trend to judge: counters that grow by design are not judged)
SERIES = [
    ("heap_used_mb", "JVM heap used", "MB", True),
    ("heap_committed_mb", "JVM heap committed", "MB", True),
    ("old_used_mb", "JVM old generation used", "MB", True),
    ("metaspace_mb", "JVM metaspace used", "MB", True),
    ("jvm_rss_mb", "JVM RSS", "MB", True),
    ("jvm_threads", "JVM threads", "", True),
    ("jvm_fds", "JVM open fds", "", True),
    ("driver_py_rss_mb", "Python driver RSS", "MB", True),
    ("driver_py_fds", "Python driver open fds", "", True),
    ("workers_py_rss_mb", "Spark's Python processes RSS (sum)", "MB", True),
    ("workers_py_n", "Spark's Python processes", "", True),
    ("workers_py_fds", "Spark's Python processes open fds (sum)", "", True),
    ("wal_mb", "WAL bytes", "MB", True),
    ("wal_alloc_mb", "WAL bytes allocated", "MB", True),
    ("wal_files", "WAL files", "", True),
    ("young_gcs", "young GCs", "", False),
    ("full_gcs", "full GCs", "", False),
    ("rows_written", "rows written", "", False),
    ("rows_read", "rows read", "", False),
]
COLUMNS = [  # the per-sample table: (header, format of one sample)
    ("min", lambda s: f"{s['t_s'] / 60:.1f}"),
    ("rows written / read", lambda s: f"{s['rows_written']:,} / {s['rows_read']:,}"),
    ("steps kept, reader at", lambda s: "—" if s["steps_next"] < 0 else
     f"[{s['steps_first']}, {s['steps_next']}), {s['reader_next']}"),
    ("heap used / committed MB", lambda s: f"{s['heap_used_mb']:.0f} / {s['heap_committed_mb']:.0f}"),
    ("old gen MB", lambda s: f"{s['old_used_mb']:.0f}"),
    ("metaspace MB", lambda s: f"{s['metaspace_mb']:.0f}"),
    ("GCs young / full", lambda s: f"{s['young_gcs']} / {s['full_gcs']}"),
    ("JVM RSS MB", lambda s: f"{s['jvm_rss_mb']:.0f}"),
    ("JVM threads / fds", lambda s: f"{s['jvm_threads']} / {s['jvm_fds']}"),
    ("Py driver RSS MB / fds", lambda s: f"{s['driver_py_rss_mb']:.0f} / {s['driver_py_fds']}"),
    ("Py workers RSS MB (n) / fds",
     lambda s: f"{s['workers_py_rss_mb']:.0f} ({s['workers_py_n']}) / {s['workers_py_fds']}"),
    ("WAL MB (alloc) / files",
     lambda s: f"{s['wal_mb']:.1f} ({s['wal_alloc_mb']:.1f}) / {s['wal_files']}"),
    ("load", lambda s: f"{s['load1']:.1f}"),
]
# The trend is fitted over the second half of the run: the first minutes hold the JVM's
# start, the first micro-batches (a minute or more on a loaded machine) and the heap
# growing to its working size, which a fit over them would take for a leak.
WARMUP_SHARE = 0.5


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value), per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 0.0 if not var else sum((t - mx) * (v - my) for t, v in points) / var * 3600


def trend(samples: list[dict], key: str) -> tuple[float, str]:
    """The slope per hour over the second half of the run, and a word for it: flat
    (within 5% of the series' level, or 2 units, per hour), within noise (what the fit
    moves over the window is less than twice the samples' scatter around it: a sawtooth
    such as the heap between GCs), bounded (it rises, but never above what the first
    half already reached: a series settling at the top of its range), else growing or
    shrinking."""
    start = samples[-1]["t_s"] * WARMUP_SHARE
    pts = [(s["t_s"], float(s[key])) for s in samples if s["t_s"] >= start]
    before = [float(s[key]) for s in samples if s["t_s"] < start]
    slope = slope_per_hour(pts)
    level = max(abs(v) for _, v in pts) if pts else 0.0
    if abs(slope) <= max(0.05 * level, 2.0):
        return slope, "flat"
    mt = sum(t for t, _ in pts) / len(pts)
    mv = sum(v for _, v in pts) / len(pts)
    scatter = (sum((v - mv - slope / 3600 * (t - mt)) ** 2 for t, v in pts) / len(pts)) ** 0.5
    moved = abs(slope) / 3600 * (pts[-1][0] - pts[0][0])
    if moved < 2 * scatter:
        return slope, "within noise"
    if slope > 0 and before and max(v for _, v in pts) <= max(before):
        return slope, "bounded"
    return slope, "growing" if slope > 0 else "shrinking"


def num(v: float, unit: str) -> str:
    if unit == "MB":
        return f"{v:,.1f}"
    return f"{v:,.0f}"


def load_jsonl(path: Path) -> tuple[dict, list[dict], dict, dict]:
    meta: dict = {}
    samples: list[dict] = []
    verdict: dict = {}
    live: dict = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        kind = rec.get("kind")
        if kind == "meta":
            meta = rec
        elif kind == "sample":
            samples.append(rec)
        elif kind == "verdict":
            verdict = rec
        elif kind == "live_heap":
            live = rec
    return meta, samples, verdict, live


def kept_notes(md: Path) -> str:
    """The hand-written ``## Notes`` section of an earlier report, kept as it is."""
    if not md.exists():
        return ""
    text = md.read_text()
    at = text.find("\n## Notes")
    return text[at:] if at >= 0 else ""


def write_report(samples_path: Path, md: Path) -> None:
    """``RESULTS-soak.md`` (and a chart beside it) from a samples file."""
    meta, samples, verdict, live = load_jsonl(samples_path)
    if not samples:
        print(f"soak: no samples in {samples_path}; no report", flush=True)
        return
    a = meta["args"]
    minutes = samples[-1]["t_s"] / 60
    rel = os.path.relpath(samples_path, REPO)
    lines = [
        "# Soak: a streaming writer with retention and a holding reader",
        "",
        f"`{meta['command']}` — {minutes:.1f} min sampled every {a['sample_s']:g} s, started "
        f"{meta['started']}; file backend, local[2], {meta['cores']} cores, driver "
        f"`spark.driver.memory={a['xmx']}` ({meta['xmx_arg']}, max heap "
        f"{meta['max_heap_mb']} MB, {meta['gc']}), {meta['java']}, Python {meta['python']}, "
        f"pyspark {meta['pyspark']}, product at {meta['commit']}. Writer: `rate` "
        f"{a['rows_per_second']:,} rows/s (2 partitions) → durablewal, trigger "
        f"{a['writer_trigger_s']:g} s, `retentionSteps={a['retention_steps']}`, "
        f"`cleanIntervalMs={a['clean_interval_ms']}`, `cleanGraceMs={a['clean_grace_ms']}`, "
        f"segments of {a['segment_bytes'] // 1024:,} KiB; reader: durablewal "
        f"(`readerId`, `holdRetention`) → parquet, trigger {a['reader_trigger_s']:g} s. "
        f"Load averages (1 / 5 / 15 min) at start "
        f"{' / '.join(f'{x:.2f}' for x in meta['load_start'])}, at end "
        f"{' / '.join(f'{x:.2f}' for x in verdict.get('load_end', [0, 0, 0]))}. Samples: "
        f"`{rel}` (git-ignored).",
        "",
        f"**{verdict_line(verdict).removeprefix('soak verdict: ')}**"
        + (f" (writer {verdict['writer_batches']} micro-batches with rows, reader "
           f"{verdict['reader_batches']})" if verdict.get("writer_batches") else ""),
        "",
        "## Samples",
        "",
        "| " + " | ".join(h for h, _ in COLUMNS) + " |",
        "|" + "|".join("---:" for _ in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(f(s) for _, f in COLUMNS) + " |" for s in samples]
    lines += [
        "",
        "## Each series",
        "",
        f"Trend: least-squares slope per hour over the samples after the first "
        f"{WARMUP_SHARE:.0%} of the run (JVM start, first micro-batches, the heap growing to "
        "its working size), extrapolated to an hour; flat when within 5% of the series' "
        "level (or 2 units) per hour, within noise when what the fit moves over that half "
        "is less than twice the samples' scatter around it (a sawtooth, as the heap "
        "between GCs), bounded when it rises but never above what the first half reached.",
        "",
        "| series | first | last | max | last - first | trend per hour | reading |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for key, label, unit, judged in SERIES:
        vals = [float(s[key]) for s in samples]
        slope, word = trend(samples, key)
        name = f"{label} ({unit})" if unit else label
        lines.append(f"| {name} | {num(vals[0], unit)} | {num(vals[-1], unit)} | "
                     f"{num(max(vals), unit)} | {num(vals[-1] - vals[0], unit)} | "
                     f"{'+' if slope >= 0 else ''}{num(slope, unit)} | "
                     f"{word if judged else 'counter'} |")
    if live.get("heap_after_full_gc_mb") is not None:
        lines += ["", f"Heap used right after a full GC at the end (`jcmd GC.run`, the live "
                      f"set): {live['heap_after_full_gc_mb']:.1f} MB."]
    nmt_first, nmt_last = samples[0].get("nmt_mb") or {}, samples[-1].get("nmt_mb") or {}
    if nmt_last:
        lines += ["", "Driver JVM native memory by category (Native Memory Tracking, "
                      "committed MB; `jcmd PID VM.native_memory summary` each sample):", "",
                  "| category | first | last | max | last - first | trend per hour |",
                  "|---|---:|---:|---:|---:|---:|"]
        for cat in sorted(nmt_last, key=lambda c: -nmt_last[c]):
            seen = [smp["nmt_mb"][cat] for smp in samples if cat in (smp.get("nmt_mb") or {})]
            if max(seen) < 0.5:
                continue
            first = nmt_first.get(cat, 0.0)
            flat = [{"t_s": smp["t_s"], "v": (smp.get("nmt_mb") or {}).get(cat, 0.0)}
                    for smp in samples]
            lines.append(f"| {cat} | {first:,.1f} | {nmt_last[cat]:,.1f} | {max(seen):,.1f} | "
                         f"{nmt_last[cat] - first:+,.1f} | {trend(flat, 'v')[0]:+,.1f} |")
    role_names = sorted(set(samples[0].get("workers_by_role", {}))
                        | set(samples[-1].get("workers_by_role", {})))
    if role_names:
        lines += ["", "Spark's Python processes by role, first and last sample (count, RSS "
                      "MB summed, fds):", "",
                  "| role | first | last |", "|---|---:|---:|"]
        for role in role_names:
            cells = []
            for smp in (samples[0], samples[-1]):
                n, rss, fds = smp.get("workers_by_role", {}).get(role, [0, 0.0, 0])
                cells.append(f"{n}, {rss:.0f} MB, {fds}" if n else "—")
            lines.append(f"| `{role}` | {cells[0]} | {cells[1]} |")
    growing = [label for key, label, _u, judged in SERIES if judged
               and trend(samples, key)[1] not in ("flat", "within noise")]
    lines += ["", "Computed reading: " + (
        "every judged series is flat." if not growing else
        f"not flat: {', '.join(growing)}; every other judged series is flat or within "
        "noise.")]
    chart = md.with_name(md.stem.lower() + ".png")
    if plot(samples, chart):
        lines += ["", f"![soak series]({chart.name})"]
    md.write_text("\n".join(lines) + "\n" + kept_notes(md))
    print(f"soak: wrote {md}", flush=True)


def plot(samples: list[dict], path: Path) -> bool:
    """A chart of the memory, fd and WAL series, if matplotlib is installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    t = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    panels = [
        ("JVM heap (MB)", ["heap_used_mb", "heap_committed_mb", "old_used_mb", "metaspace_mb"]),
        ("RSS (MB)", ["jvm_rss_mb", "driver_py_rss_mb", "workers_py_rss_mb"]),
        ("open fds, threads", ["jvm_fds", "driver_py_fds", "workers_py_fds", "jvm_threads"]),
        ("WAL (MB; files on the right)", ["wal_mb", "wal_alloc_mb", "wal_files"]),
    ]
    for ax, (title, keys) in zip(axes.flat, panels, strict=True):
        for key in keys:
            if key == "wal_files":  # a count beside megabytes: its own axis
                twin = ax.twinx()
                twin.plot(t, [s[key] for s in samples], label=key, marker=".", color="C2")
                twin.set_ylim(bottom=0)
                twin.set_ylabel(key)
                continue
            ax.plot(t, [s[key] for s in samples], label=key, marker=".")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
