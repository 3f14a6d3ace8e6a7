"""What verified replay costs a Spark read (at most 5% of source throughput).

Two namespaces of the file log hold the same rows (``bench/run.py``'s pair-1 rows: ~100 B
each, steps of 50,000 rows over two regions): one written as the product writes
(a content digest per entry in each step record, so every read re-hashes what it
gets), one written with the digest left out (its steps read unverified, as steps
written before digests do). A ``readStream ... availableNow`` → ``noop`` query reads
each in turn, alternated every repetition after warm-ups; rows/s is N over the sum of
``durationMs.triggerExecution``, as pair 1 measures it, and the cost is the median of
each round's verified/unverified ratio::

    python bench/verified_replay_cost.py --rows 1000000 --reps 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--step-rows", type=int, default=50_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmups", type=int, default=2)
    args = p.parse_args()

    from common import prefill_steps

    import pyspark_durable.wal.attempt as attempt_module
    from pyspark_durable.endpoint import open_namespace
    from pyspark_durable.showcase.session import local_session

    with tempfile.TemporaryDirectory(prefix="verified-", dir=os.environ.get("TMPDIR")) as root:
        wal = os.path.join(root, "wal")
        digest = attempt_module.entry_digest
        for name, hashed in (("digests", True), ("plain", False)):
            attempt_module.entry_digest = digest if hashed else (lambda key, value: "")
            ns = open_namespace({"backend": "file", "namespace": name, "options": {"path": wal}})
            try:
                for step, parts in enumerate(prefill_steps(args.rows, args.step_rows)):
                    attempt = ns.begin("prefill", step)
                    for region, rows in parts:
                        attempt.write(f"t{region}", rows, region)
                    attempt.commit()
                runs = [r for s in ns.steps() for r in ns.step_commit(s).runs]
                assert all(bool(r.digests) == hashed for r in runs), name
            finally:
                ns.close()
        attempt_module.entry_digest = digest

        spark = local_session("durablewal-verified-replay-cost")

        def read(name: str) -> float:
            q = (spark.readStream.format("durablewal").option("path", wal)
                 .option("namespace", name).load().writeStream.format("noop")
                 .option("checkpointLocation", os.path.join(root, f"ckpt-{time.time_ns()}"))
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            assert q.exception() is None, q.exception()
            progress = q.recentProgress
            assert sum(e.numInputRows for e in progress) == args.rows
            return args.rows / (sum(e.durationMs["triggerExecution"] for e in progress) / 1000)

        rates: dict[str, list[float]] = {"digests": [], "plain": []}
        for rep in range(args.warmups + args.reps):
            order = ("digests", "plain") if rep % 2 == 0 else ("plain", "digests")
            for name in order:
                rate = read(name)
                if rep >= args.warmups:
                    rates[name].append(rate)
        spark.stop()

    verified, plain = (statistics.median(rates[n]) for n in ("digests", "plain"))
    # the machine drifts between rounds: each round's own ratio is the steadier figure
    paired = statistics.median(v / u for v, u in zip(rates["digests"], rates["plain"], strict=True))
    print(f"{args.rows:,} rows, steps of {args.step_rows:,} over 2 regions, local[2]; median of "
          f"{args.reps} after {args.warmups} warm-up(s), alternated\n")
    print("| read | rows/s | samples |\n|---|---:|---|")
    for name, label in (("digests", "verified (each entry re-hashed, XXH3-64)"),
                        ("plain", "unverified (steps without digests)")):
        samples = ", ".join(f"{r:,.0f}" for r in rates[name])
        print(f"| {label} | {statistics.median(rates[name]):,.0f} | {samples} |")
    print(f"\nverified / unverified: {verified / plain:.3f} of the medians, {paired:.3f} the median "
          f"of each round's ratio: verification costs {1 - paired:.1%} of source throughput")


if __name__ == "__main__":
    main()
