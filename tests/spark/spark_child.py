"""Child process of the Spark crash tests: runs one streaming query until done or killed.

Usage: python spark_child.py MODE WAL_OPTIONS_JSON IN_DIR OUT_DIR CHECKPOINT
MODE ``sink``: JSON files (one per micro-batch) -> durablewal.
MODE ``source``: durablewal (one step per micro-batch) -> parquet.
Prints ``BATCH <id>`` after each micro-batch and ``DONE`` at the end (flushed).
"""

from __future__ import annotations

import json
import sys

from pyspark.sql.streaming import StreamingQueryListener
from spark_settings import spark_builder

import pyspark_durable


class Progress(StreamingQueryListener):
    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        print(f"BATCH {event.progress.batchId}", flush=True)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


def main() -> None:
    mode, wal_json, in_dir, out_dir, checkpoint = sys.argv[1:6]
    wal = json.loads(wal_json)
    spark = spark_builder().getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(spark)
    spark.streams.addListener(Progress())
    if mode == "sink":
        stream = (spark.readStream.schema("id long, payload string")
                  .option("maxFilesPerTrigger", 1).json(in_dir))
        writer = stream.writeStream.format("durablewal").options(**wal)
        query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    else:
        stream = (spark.readStream.format("durablewal").options(**wal)
                  .option("maxStepsPerTrigger", 1).load())
        rows = stream.select("id", "payload", "_step", "_region", "_table", "_sequence", "_row")
        query = (rows.writeStream.format("parquet")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True)
                 .start(out_dir))
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
