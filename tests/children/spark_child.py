"""Child process of the Spark crash tests: runs streaming queries until done or killed.

Usage: python spark_child.py PAIRS_JSON FOLDER
PAIRS_JSON is a list of {"name", "sink", "source"}: for each, a sink query (JSON files of
FOLDER/in, one per micro-batch -> durablewal SINK) and a source query (durablewal
SOURCE, one step per micro-batch -> parquet FOLDER/NAME/out). All run together in one
Spark application, so one kill lands in every backend's queries; each has its own
checkpoint (FOLDER/NAME/ckpt-sink, FOLDER/NAME/ckpt-source). Prints ``BATCH <id>`` after
each micro-batch of any query and ``DONE`` when all ended (flushed).
"""

from __future__ import annotations

import json
import sys
import threading
from collections import defaultdict

from pyspark.sql.streaming import StreamingQueryListener

import pyspark_durable
from tests.spark.spark_settings import spark_builder


class Progress(StreamingQueryListener):
    """Prints each micro-batch, and marks a query as under way once it has triggered (or
    ended), keyed by query id."""

    def __init__(self) -> None:
        self.under_way: defaultdict[str, threading.Event] = defaultdict(threading.Event)

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        print(f"BATCH {event.progress.batchId}", flush=True)
        self.under_way[str(event.progress.id)].set()

    def onQueryIdle(self, event) -> None:
        self.under_way[str(event.id)].set()

    def onQueryTerminated(self, event) -> None:
        self.under_way[str(event.id)].set()


START_BOUND_S = 300.0


def started(progress: Progress, query):
    """Wait for ``query``'s first trigger (or its end) before the next query starts: each
    start spawns Python workers on the driver, and Spark gives each a fixed 10 s to connect
    back, which several at once on a loaded machine can miss."""
    if not progress.under_way[str(query.id)].wait(timeout=START_BOUND_S):
        raise SystemExit(f"query {query.name or query.id} did not trigger in {START_BOUND_S} s")
    return query


def main() -> None:
    pairs, folder = json.loads(sys.argv[1]), sys.argv[2]
    spark = spark_builder().getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(spark)
    progress = Progress()
    spark.streams.addListener(progress)
    queries = []
    for pair in pairs:
        own = f"{folder}/{pair['name']}"
        stream = (spark.readStream.schema("id long, payload string")
                  .option("maxFilesPerTrigger", 1).json(f"{folder}/in"))
        queries.append(started(progress, stream.writeStream.format("durablewal")
                               .options(**pair["sink"])
                               .option("checkpointLocation", f"{own}/ckpt-sink")
                               .trigger(availableNow=True).start()))
        steps = (spark.readStream.format("durablewal").options(**pair["source"])
                 .option("maxStepsPerTrigger", 1).option("metadataColumns", "all").load())
        rows = steps.select("id", "payload", "_step", "_region", "_table", "_sequence", "_row")
        queries.append(started(progress, rows.writeStream.format("parquet")
                               .option("checkpointLocation", f"{own}/ckpt-source")
                               .trigger(availableNow=True).start(f"{own}/out")))
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
