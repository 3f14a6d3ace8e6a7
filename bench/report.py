"""Writes bench/RESULTS.md and bench/results.png; prints the table."""

from __future__ import annotations

import platform
import re
from pathlib import Path

from common import WARMUPS, Result

HERE = Path(__file__).resolve().parent


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit in ("rows/s",):
        return f"{value:,.0f}"
    if unit.startswith("s"):
        return f"{value:.3f}"
    if unit == "CPU-s":
        return f"{value:.2f}"
    return f"{value:,.1f}"


def _met(r: Result) -> str:
    return "—" if r.met is None else ("yes" if r.met else "**NO**")


def table(results: list[Result]) -> str:
    lines = ["| pair | ours | peer | unit | ratio | target | met? | note |",
             "|---|---:|---:|---|---:|---|---|---|"]
    for r in results:
        ratio = "—" if r.ratio is None else (
            f"{r.ratio:+.3f} s" if r.target.startswith("<= +") else f"{r.ratio:.2f}")
        lines.append(f"| {r.pair} | {_num(r.ours, r.unit)} | {_num(r.peer, r.unit)} | "
                     f"{r.unit} | {ratio} | {r.target or '—'} | {_met(r)} | {r.note} |")
    return "\n".join(lines)


# the headline comparisons with Spark's Kafka connector: (row, pair-name pattern)
HEADLINE = (
    ("**source vs Spark's Kafka source, Avro** (kafka → from_avro → noop)",
     r"7 source \[{b}\]: durablewal→noop vs Spark's Kafka source, Avro "),
    ("source vs Spark's Kafka source, raw value bytes (no decode: the connector's ceiling)",
     r"7 source \[{b}\]: durablewal→noop vs Spark's Kafka source, raw "),
    ("source vs Spark's Kafka source, JSON (kafka → from_json → noop)",
     r"7 source \[{b}\]: durablewal→noop vs Spark's Kafka source, JSON "),
    ("**sink vs Spark's Kafka sink, Avro** (rate → to_avro → kafka, at-least-once)",
     r"7 sink \[{b}\]: rate→durablewal vs Spark's Kafka sink, Avro "),
    ("sink vs Spark's Kafka sink, JSON (rate → to_json → kafka)",
     r"7 sink \[{b}\]: rate→durablewal vs Spark's Kafka sink, JSON "),
    ("CPU-s per query, durablewal vs the Avro source (bench's processes + brokers)",
     r"7 source CPU \[{b}\]: .* vs Spark's Kafka source, Avro "),
    ("CPU-s per query, durablewal vs the Avro sink (bench's processes + brokers)",
     r"7 sink CPU \[{b}\]: .* vs Spark's Kafka sink, Avro "),
    ("brokers' CPU-s per query, durablewal vs the Avro source / sink",
     r"7 (source|sink) broker CPU \[{b}\]: .* Avro "),
)


def headline(results: list[Result]) -> str:
    """durablewal against Spark's own Kafka connector, Avro first (how typed rows travel
    in Kafka), per Kafka run: the table docs/performance.md carries."""
    labels = list(dict.fromkeys(m.group(1) for r in results
                                if (m := re.match(r"7 \w+ \[([^\]]+)\]: ", r.pair))))
    if not labels:
        return ""
    lines = ["| durablewal vs Spark's Kafka connector (ratio ours / peer; CPU-s ours vs peer) | "
             + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for row, pattern in HEADLINE:
        cells = []
        for b in labels:
            found = [r for r in results
                     if re.match(pattern.format(b=re.escape(b)), r.pair) and r.ratio is not None]
            cells.append(" / ".join(
                f"{r.ours:.2f} vs {r.peer:.2f}" if r.unit == "CPU-s"
                else f"{r.ratio:.2f}" for r in found))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def kept_sections(md: Path) -> str:
    """The ``## `` sections of ``md`` that other benchmarks wrote (history, many regions,
    many writers), to keep below this run's table: a run rewrites only its own part."""
    if not md.exists():
        return ""
    old = md.read_text()
    at = old.find("\n## ")
    return "" if at < 0 else "\n" + old[at + 1:]


def write(results: list[Result], args_line: str, elapsed_s: float, tag: str = "") -> Path:
    suffix = f"-{tag}" if tag else ""
    md = HERE / f"RESULTS{suffix}.md"
    png = HERE / f"results{suffix}.png"
    text = [
        "# Benchmark results",
        "",
        f"`python bench/run.py {args_line}` — {elapsed_s / 60:.1f} min, "
        f"{platform.node()}, Python {platform.python_version()}. Values are medians of the "
        f"repetitions after {WARMUPS[0]} warm-up round(s); ratio = ours / peer (for latency: ours - peer in "
        "seconds). See `bench/README.md` for what each pair measures.",
        "",
    ]
    top = headline(results)
    if top:
        text += ["Headline: durablewal on Kafka against Spark's own Kafka connector on the same "
                 "brokers, in the same rounds; Avro is how a Spark user carries typed rows in "
                 "Kafka, raw bytes the connector's ceiling (no decode), JSON what needs no "
                 "extra jar. CPU: durablewal vs the connector.", "", top, ""]
    text += [
        table(results),
        "",
        f"![ratios vs targets]({png.name})",
        "",
        "Samples (every repetition):",
        "",
    ]
    for r in results:
        if r.samples:
            parts = "; ".join(f"{k}: " + ", ".join(f"{v:.4g}" for v in vals)
                              for k, vals in r.samples.items())
            text.append(f"- {r.pair}: {parts}")
    md.write_text("\n".join(text) + "\n" + kept_sections(md))
    chart(results, png)
    return md


def chart(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [r for r in results if r.ratio is not None and (
        r.target.startswith((">=", "~")) or (r.target == "report" and r.unit == "rows/s"))]
    lat = [r for r in results if r.ratio is not None and r.target.startswith("<= +")
           and r.unit == "s/batch"]  # the restart differences are in the table only
    fig, axes = plt.subplots(2, 1, figsize=(11, 0.45 * (len(ratios) + len(lat)) + 3.5),
                             gridspec_kw={"height_ratios": [max(len(ratios), 1),
                                                            max(len(lat), 1)]})
    ax = axes[0]
    labels = [r.pair for r in ratios]
    ys = range(len(ratios))
    colors = ["tab:gray" if r.met is None else "tab:green" if r.met else "tab:red"
              for r in ratios]
    ax.barh(list(ys), [r.ratio for r in ratios], color=colors)
    for y, r in zip(ys, ratios, strict=True):
        m = re.search(r"[\d.]+", r.target)
        goal = 1.0 if r.target.startswith("~") else float(m.group()) if m else None
        if goal is not None:
            ax.plot([goal, goal], [y - 0.4, y + 0.4], color="black", lw=2)
        ax.text(r.ratio, y, f" {r.ratio:.2f}", va="center", fontsize=8)
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ratio (ours / peer); black tick = target; gray = explains the others")
    ax.set_title("throughput / memory ratios")
    ax = axes[1]
    ax.barh(range(len(lat)), [r.ratio for r in lat],
            color=["tab:green" if r.met else "tab:red" for r in lat])
    ax.axvline(0.5, color="black", lw=2)
    ax.set_xlim(min([0.0] + [r.ratio for r in lat]) - 0.05,
                max([0.6] + [r.ratio + 0.1 for r in lat]))
    ax.set_yticks(list(range(len(lat))), [r.pair for r in lat], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per 10-row batch above rate→noop (black line = 0.5 s target)")
    ax.set_title("per-batch latency over the JVM floor")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
