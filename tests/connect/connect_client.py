"""A Spark Connect client in its own process, driven by JSON lines on stdin.

``SparkSession.builder.remote(...)`` sets SPARK_CONNECT_MODE_ENABLED in the process
environment, which would turn the classic session of tests/spark into a Connect one
for the rest of a pytest run; so the Connect client lives here. One session serves
every request (a new Connect session pays the server's Python worker start-up again).

Each request is ``{"op": NAME, "args": {...}}``; each answer is one line
``@@ {"ok": true, "result": ...}`` or ``@@ {"ok": false, "error": TYPE, "message": ...}``.
"""

from __future__ import annotations

import json
import sys
import traceback

RESULT = "@@ "
spark = None


def op_connect(url: str, artifact_zip: str | None = None, register: bool = True) -> dict:
    global spark
    from pyspark.sql import SparkSession

    import pyspark_durable

    spark = SparkSession.builder.remote(url).getOrCreate()
    if artifact_zip:
        spark.addArtifacts(artifact_zip, pyfile=True)
    if register:
        pyspark_durable.register(spark)
    return {"session": f"{type(spark).__module__}.{type(spark).__name__}"}


def _writer(df, wal: dict):
    w = df.write.format("durablewal")
    for k, v in wal.items():
        if k != "path":
            w = w.option(k, v)
    return w


def _reader(reader, wal: dict):
    for k, v in wal.items():
        if k != "path":
            reader = reader.option(k, v)
    return reader


def _load(reader, wal: dict):
    return reader.load(wal["path"]) if "path" in wal else reader.load()


def _rows(df, cols: list[str]) -> list[list]:
    return sorted([list(r) for r in df.select(*cols).collect()])


def op_batch(wal: dict) -> list[list]:
    """Batch write, then batch read of the same namespace."""
    df = spark.range(6).selectExpr("id", "concat('n', cast(id as string)) as name")
    w = _writer(df, wal).option("table", "orders").mode("append")
    w.save(wal["path"]) if "path" in wal else w.save()
    back = _load(_reader(spark.read.format("durablewal").option("metadataColumns", "_table"),
                         wal), wal)
    return _rows(back, ["id", "name", "_table"])


def op_stream(wal: dict, work: str, sink: str) -> list[list]:
    """JSON files -> durablewal -> memory or parquet, both with availableNow."""
    spark.range(8).selectExpr("id", "concat('e', cast(id as string)) as name") \
        .write.mode("overwrite").json(f"{work}/in")
    w = (spark.readStream.schema("id long, name string").json(f"{work}/in")
         .writeStream.format("durablewal").option("table", "events")
         .option("checkpointLocation", f"{work}/ckpt_in").trigger(availableNow=True))
    w = _reader(w, wal)
    q = w.start(wal["path"]) if "path" in wal else w.start()
    q.awaitTermination()
    src = _load(_reader(spark.readStream.format("durablewal").option("tables", "events")
                        .option("metadataColumns", "_table"), wal), wal)
    out = (src.writeStream.format(sink).option("checkpointLocation", f"{work}/ckpt_out")
           .trigger(availableNow=True))
    if sink == "memory":
        name = "durablewal_" + work.rsplit("/", 1)[-1].replace("-", "_")
        out.queryName(name).start().awaitTermination()
        back = spark.sql(f"select * from {name}")
    else:
        out.start(f"{work}/out").awaitTermination()
        back = spark.read.parquet(f"{work}/out")
    return _rows(back, ["id", "name", "_table"])


def op_stream_read(wal: dict, work: str) -> list[list]:
    """durablewal -> parquet with availableNow (the WAL was written before)."""
    src = _load(_reader(spark.readStream.format("durablewal")
                        .option("metadataColumns", "_table"), wal), wal)
    (src.writeStream.format("parquet").option("checkpointLocation", f"{work}/ckpt_read")
     .trigger(availableNow=True).start(f"{work}/read_out").awaitTermination())
    return _rows(spark.read.parquet(f"{work}/read_out"), ["id", "name", "_table"])


OPS = {"connect": op_connect, "batch": op_batch, "stream": op_stream, "stream_read": op_stream_read}


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # anything else printed goes to the log, not the protocol
    for line in sys.stdin:
        req = json.loads(line)
        try:
            answer = {"ok": True, "result": OPS[req["op"]](**req.get("args", {}))}
        except Exception as exc:  # noqa: BLE001 - every failure is an answer to the test
            answer = {"ok": False, "error": type(exc).__name__, "message": str(exc),
                      "traceback": traceback.format_exc()}
        out.write(RESULT + json.dumps(answer) + "\n")
        out.flush()
    if spark is not None:
        spark.stop()


if __name__ == "__main__":
    main()
