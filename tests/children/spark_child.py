"""Child process of the Spark crash tests: runs streaming queries until done or killed.

Usage: python spark_child.py PAIRS_JSON FOLDER
PAIRS_JSON is a list of {"name", "sink", "source"}: for each, a sink query (JSON files of
FOLDER/in, one per micro-batch -> durablewal SINK) and a source query (durablewal
SOURCE, one step per micro-batch -> parquet FOLDER/NAME/out). All run at once in one
Spark application, so one kill lands in every backend's queries; each has its own
checkpoint (FOLDER/NAME/ckpt-sink, FOLDER/NAME/ckpt-source). Prints ``BATCH <id>`` after
each micro-batch of any query and ``DONE`` when all ended (flushed).
"""

from __future__ import annotations

import json
import sys

from pyspark.sql.streaming import StreamingQueryListener

import pyspark_durable
from tests.spark.spark_settings import spark_builder


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
    pairs, folder = json.loads(sys.argv[1]), sys.argv[2]
    spark = spark_builder().getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(spark)
    spark.streams.addListener(Progress())
    queries = []
    for pair in pairs:
        own = f"{folder}/{pair['name']}"
        stream = (spark.readStream.schema("id long, payload string")
                  .option("maxFilesPerTrigger", 1).json(f"{folder}/in"))
        queries.append(stream.writeStream.format("durablewal").options(**pair["sink"])
                       .option("checkpointLocation", f"{own}/ckpt-sink")
                       .trigger(availableNow=True).start())
        steps = (spark.readStream.format("durablewal").options(**pair["source"])
                 .option("maxStepsPerTrigger", 1).option("metadataColumns", "all").load())
        rows = steps.select("id", "payload", "_step", "_region", "_table", "_sequence", "_row")
        queries.append(rows.writeStream.format("parquet")
                       .option("checkpointLocation", f"{own}/ckpt-source")
                       .trigger(availableNow=True).start(f"{own}/out"))
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
