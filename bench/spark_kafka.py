"""Spark's own Kafka connector (``format("kafka")``) as the peer of durablewal on Kafka.

The connector's jars and spark-avro's are resolved by ``jars/spark-kafka/pom.xml``
into ``jars/spark-kafka/libs/`` (git-ignored) once, and go on the bench session with
``spark.jars``. Its queries run on the benchmark's broker (or 3-broker cluster) with
the bench's rows (``id`` + the same 92-byte payload as the rate peer) as Kafka values
in the forms a Spark user picks (:data:`VALUES`):

* Avro (``to_avro`` / ``from_avro`` of ``id long, payload bytes``, ~96 B): how typed
  rows travel in Kafka, the headline peer;
* JSON (``to_json`` / ``from_json``, ~120 B): what needs no extra jar;
* raw (source only): the Avro topic's ``value`` bytes as they are, no decode at all,
  the most the connector's source gives.

The sink writes ``rate-micro-batch`` rows into a fresh topic of 2 partitions (rate has
2 partitions, the WAL 2 regions); the source reads a topic of 2 partitions prefilled
once per broker with the same rows. Topics take the cluster's replication (3 on the
3-broker cluster) and every write asks for ``acks=all`` and lz4 batches, as
durablewal's appends do by default. Otherwise both use the connector's defaults, as a
user who picks it gets them.
"""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common import uid
from pyspark.sql import DataFrame, SparkSession

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "jars" / "spark-kafka" / "pom.xml"
LIBS = POM.parent / "libs"
PARTITIONS = 2
JSON_SCHEMA = "id long, payload string"
AVRO_SCHEMA = json.dumps({"type": "record", "name": "row", "fields": [
    {"name": "id", "type": "long"}, {"name": "payload", "type": "bytes"}]})
# the rate peer's payload (bench/spark_queries.PAYLOAD_EXPR) as a 92-character string
PAYLOAD_STR = "concat(lpad(cast({col} as string), 20, '0'), repeat('x', 72))"
# value form -> (how the rows are carried, the source query's decode, the sink's encode)
VALUES = {
    "avro": ("Avro values of ~96 B", "kafka→from_avro→noop", "rate→to_avro→Spark's Kafka sink"),
    "json": ("JSON values of ~120 B", "kafka→from_json→noop", "rate→to_json→Spark's Kafka sink"),
    "raw": ("the Avro topic's value bytes, not decoded",
            "kafka→value bytes→noop, the connector's ceiling", ""),
}
SOURCE_VALUES = ("avro", "raw", "json")
SINK_VALUES = ("avro", "json")
# what each Kafka write asks for (the prefill and the sink peer): durablewal forces acks
# and compresses with lz4 unless told otherwise, so the peer gets the same
WRITE_OPTIONS = {"kafka.acks": "all", "kafka.compression.type": "lz4"}


@dataclass
class Connector:
    """The resolved connector: its jars, or why there are none."""

    jars: list[str] = field(default_factory=list)
    why_not: str = ""

    @property
    def version(self) -> str:
        for jar in self.jars:
            m = re.search(r"spark-sql-kafka-0-10_[\d.]+-([\w.-]+)\.jar$", jar)
            if m:
                return m.group(1)
        return "?"

    def label(self) -> str:
        import pyspark

        return f"spark-sql-kafka {self.version} in pyspark {pyspark.__version__}"


def resolve() -> Connector:
    """The connector's jars from ``jars/spark-kafka/libs``, resolved with Maven when the
    folder is missing or older than the pom (file-locked like tests/kafka_broker.py)."""
    stamp = LIBS / ".resolved"
    try:
        with open(POM.parent / ".resolve.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not stamp.exists() or stamp.stat().st_mtime < POM.stat().st_mtime:
                if LIBS.exists():
                    for old in LIBS.glob("*.jar"):
                        old.unlink()
                done = subprocess.run(["mvn", "-q", "-B", "-f", str(POM),
                                       "dependency:copy-dependencies"],
                                      capture_output=True, text=True, timeout=900)
                if done.returncode != 0:
                    tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
                    return Connector(why_not=f"resolving {POM.relative_to(ROOT)} failed: "
                                     + " / ".join(tail))
                stamp.touch()
    except (OSError, subprocess.SubprocessError) as exc:
        return Connector(why_not=f"resolving {POM.relative_to(ROOT)} failed: {exc}")
    jars = sorted(str(j) for j in LIBS.glob("*.jar"))
    if not any("spark-sql-kafka" in j for j in jars):
        return Connector(why_not=f"no spark-sql-kafka jar in {LIBS.relative_to(ROOT)}")
    return Connector(jars)


def create_topic(bootstrap: str, replication: int = 1, partitions: int = PARTITIONS) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = uid("sparkkafka")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, replication)]).values():
        fut.result(60)
    return topic


def delete_topic(bootstrap: str, topic: str) -> None:
    """Frees the broker's disk (and page cache) between rounds; outside the timing."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics([topic]).values():
        fut.result(60)


def encoded(df: DataFrame, id_col: str, values: str) -> DataFrame:
    """``df``'s rows as the Kafka ``value`` column of form ``values`` (avro or json)."""
    if values == "json":
        return df.selectExpr(f"to_json(named_struct('id', {id_col}, 'payload', "
                             f"{PAYLOAD_STR.format(col=id_col)})) as value")
    from pyspark.sql.avro.functions import to_avro
    from pyspark.sql.functions import col

    rows = df.selectExpr(f"named_struct('id', {id_col}, 'payload', "
                         f"cast({PAYLOAD_STR.format(col=id_col)} as binary)) as r")
    return rows.select(to_avro(col("r"), AVRO_SCHEMA).alias("value"))


def prefill(spark: SparkSession, bootstrap: str, n: int, values: str,
            replication: int = 1) -> str:
    """A topic of 2 partitions holding the bench's ``n`` rows as ``values`` (Spark's
    batch Kafka sink), for the source peer."""
    topic = create_topic(bootstrap, replication)
    rows = spark.range(n, numPartitions=PARTITIONS)
    encoded(rows, "id", values).write.format("kafka").options(**WRITE_OPTIONS) \
        .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
    return topic


def source_df(spark: SparkSession, bootstrap: str, topic: str, values: str) -> DataFrame:
    """Spark's Kafka source over ``topic`` → ``id long, payload binary`` (``raw``: the
    ``value`` bytes as they are)."""
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    if values == "raw":
        return df.select("value")
    if values == "json":
        return (df.selectExpr(f"from_json(cast(value as string), '{JSON_SCHEMA}') as r")
                .selectExpr("r.id as id", "cast(r.payload as binary) as payload"))
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import col

    return df.select(from_avro(col("value"), AVRO_SCHEMA).alias("r")) \
        .selectExpr("r.id as id", "r.payload as payload")


def sink_fn(spark: SparkSession, bootstrap: str, n: int, values: str,
            run: Callable[[DataFrame, str, dict[str, str]], float],
            replication: int = 1) -> Callable[[], float]:
    """rate → ``values`` → Spark's Kafka sink into a fresh 2-partition topic; ``run`` runs
    the availableNow query and returns rows/s (spark_pairs' own timing)."""
    def measure() -> float:
        topic = create_topic(bootstrap, replication)
        try:
            rate = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", n)
                    .option("numPartitions", PARTITIONS).load())
            return run(encoded(rate, "value", values), "kafka",
                       {"kafka.bootstrap.servers": bootstrap, "topic": topic, **WRITE_OPTIONS})
        finally:
            delete_topic(bootstrap, topic)
    return measure
