"""The JVM's ceiling for pair 1: Spark's own vectorized parquet reader on one core.

Run by ``spark_pairs.py`` as a child process (a second SparkSession, ``local[1]``, cannot
share the bench's ``local[2]`` one): ``python bench/parquet_ceiling.py FOLDER ROWS REPS
WARMUPS`` reads the parquet files pair 1's peer reads (``id long, payload binary``) with
``readStream.format("parquet")`` → ``noop``, ``availableNow``, WARMUPS + REPS times, and
prints one JSON line: the rows/s of each repetition after the warm-ups. The bench runs it
while nothing else of its own runs, so the one core it asks for is its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SCRATCH
from spark_queries import rows_of, run_available_now

from pyspark_durable.showcase.session import local_session

SCHEMA = "id long, payload binary"


def main() -> None:
    folder, rows, reps, warmups = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        int(sys.argv[4])
    # the queries' checkpoints go beside the parquet folder, in the bench run's work dir,
    # which the run deletes (by default they would pile up in bench/out)
    SCRATCH[0] = Path(folder).parent
    spark = local_session("durablewal-bench-ceiling", **{
        "spark.master": "local[1]", "spark.sql.shuffle.partitions": "1",
        "spark.sql.parquet.enableVectorizedReader": "true"})
    try:
        rates = []
        for rep in range(warmups + reps):
            secs, _, progress = run_available_now(
                spark.readStream.format("parquet").schema(SCHEMA).load(folder), "noop")
            if rows_of(progress) != rows:
                raise SystemExit(f"the parquet read gave {rows_of(progress):,} rows, "
                                 f"not {rows:,}")
            if rep >= warmups:
                rates.append(rows / secs)
        print(json.dumps({"rows_per_s": rates,
                          "master": spark.sparkContext.master}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
