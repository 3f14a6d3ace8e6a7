"""What a commit among many writers pays to catch up with the others' records.

A committer among N writers finds about N - 1 records the others appended since its last
look, and replays them before it can answer (docs/protocol.md, step 8). This measures
that catch-up on the file log alone, with nothing else running: one handle appends
``--others`` step records (10 rows each, ``--others`` writer ids, 4 regions), then a
second handle refreshes; repeated ``--rounds`` times. Reported: the refresh's thread CPU,
median and 10th percentile over the rounds, and per record. The cyclic GC is off during
the rounds (a committer's heap is small; this measures the replay, not the collector).

CPU time on a shared VM drifts by a fifth within minutes. For a side-by-side comparison
of two trees, count instructions instead: ``--callgrind`` runs each refresh inside
``itertools.starmap``, so callgrind counts only those calls, and the count repeats to
within a fraction of a percent::

    python bench/catch_up.py --others 31 --rounds 200
    valgrind --tool=callgrind --toggle-collect=starmap_next --callgrind-out-file=/dev/null \\
        python bench/catch_up.py --rounds 20 --callgrind

(run the second in each tree; bench/RESULTS.md, "Many writers", has both.)
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--others", type=int, default=31, help="records to catch up with")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--callgrind", action="store_true",
                        help="refresh inside itertools.starmap (callgrind --toggle-collect)")
    args = parser.parse_args()
    from pyspark_durable.endpoint import open_namespace

    with tempfile.TemporaryDirectory() as folder:
        config = {"backend": "file", "namespace": "ns", "options": {"path": folder}}
        writers = open_namespace(config)
        follower = open_namespace(config, create=False)
        rows = pa.table({"id": pa.array(range(10), pa.int64()),
                         "payload": pa.array([b"x" * 92] * 10, pa.binary())})
        seconds: list[float] = []
        gc.disable()
        try:
            for r in range(args.rounds + 1):  # round 0 defines the table: not measured
                for w in range(args.others):
                    attempt = writers.begin(f"w{w}", r)
                    attempt.write("t", rows, w % 4)
                    attempt.commit()
                if r == 0:
                    follower.refresh()
                    continue
                before = follower.ledger.state.replayed
                t0 = time.thread_time()
                if args.callgrind:
                    list(itertools.starmap(follower.refresh, [()]))
                else:
                    follower.refresh()
                seconds.append(time.thread_time() - t0)
                assert follower.ledger.state.replayed - before == args.others
        finally:
            gc.enable()
        assert list(follower.steps(refresh=False)) == list(range((args.rounds + 1) * args.others))
        follower.close()
        writers.close()
    seconds.sort()
    median, p10 = statistics.median(seconds), seconds[len(seconds) // 10]
    print(f"catch-up of {args.others} records, {args.rounds} rounds: median {median * 1e3:.3f} ms "
          f"({median / args.others * 1e6:.1f} us a record), p10 {p10 * 1e3:.3f} ms "
          f"({p10 / args.others * 1e6:.1f} us a record)")


if __name__ == "__main__":
    main()
