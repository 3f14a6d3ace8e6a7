"""Child process of the Spark crash tests: runs two streaming queries until done or killed.

Usage: python spark_child.py SINK_WAL_JSON SOURCE_WAL_JSON FOLDER
The sink query: JSON files of FOLDER/in (one per micro-batch) -> durablewal (SINK_WAL).
The source query: durablewal (SOURCE_WAL, one step per micro-batch) -> parquet FOLDER/out.
Both run at once in one Spark application, so one kill lands in both; each has its own
checkpoint (FOLDER/ckpt-sink, FOLDER/ckpt-source). Prints ``BATCH <id>`` after each
micro-batch of either query and ``DONE`` when both ended (flushed).
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
    sink_wal, source_wal = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    folder = sys.argv[3]
    spark = spark_builder(short_lived=True).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(spark)
    spark.streams.addListener(Progress())
    stream = (spark.readStream.schema("id long, payload string")
              .option("maxFilesPerTrigger", 1).json(f"{folder}/in"))
    sink = (stream.writeStream.format("durablewal").options(**sink_wal)
            .option("checkpointLocation", f"{folder}/ckpt-sink")
            .trigger(availableNow=True).start())
    steps = (spark.readStream.format("durablewal").options(**source_wal)
             .option("maxStepsPerTrigger", 1).load())
    rows = steps.select("id", "payload", "_step", "_region", "_table", "_sequence", "_row")
    source = (rows.writeStream.format("parquet")
              .option("checkpointLocation", f"{folder}/ckpt-source")
              .trigger(availableNow=True).start(f"{folder}/out"))
    for query in (sink, source):
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
