"""A new Spark session that never calls ``pyspark_durable.register``: writes and reads
``format("durablewal")`` (batch and streaming). Prints ``ROWS <n>`` and ``STREAMED <n>``.

Run with the package importable from a plain ``sys.path`` entry, as an installed
package is; ``argv[1]`` is a fresh folder for the WAL and the checkpoint."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

root = sys.argv[1]
spark = (SparkSession.builder.master("local[1]").appName("durablewal-no-register")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=error").getOrCreate())
assert "pyspark_durable" not in sys.modules, "nothing imported the package in the driver"
wal = {"namespace": "auto", "path": f"{root}/wal"}
spark.range(5).selectExpr("id", "id * 2 AS twice").write.format("durablewal") \
    .options(**wal).mode("append").save()
rows = spark.read.format("durablewal").options(**wal).load().select("id", "twice").collect()
print("ROWS", sorted((r.id, r.twice) for r in rows), flush=True)
query = (spark.readStream.format("durablewal").options(**wal).load().select("id")
         .writeStream.format("memory").queryName("streamed")
         .option("checkpointLocation", f"{root}/ckpt").trigger(availableNow=True).start())
query.awaitTermination()
print("STREAMED", spark.sql("SELECT count(*) AS n FROM streamed").collect()[0].n, flush=True)
spark.stop()
