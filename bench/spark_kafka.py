"""Spark's own Kafka connector (``format("kafka")``) as the peer of durablewal on Kafka.

The connector's jars are resolved by ``jars/spark-kafka/pom.xml`` into
``jars/spark-kafka/libs/`` (git-ignored) once, and go on the bench session with
``spark.jars``. Its queries run on the benchmark's broker with the bench's rows
(``id`` + the same 92-byte payload as the rate peer) as JSON values of ~120 bytes:

* sink: ``rate-micro-batch`` → ``to_json(struct(id, payload))`` → ``format("kafka")``
  into a fresh topic of 2 partitions (rate has 2 partitions, the WAL 2 regions);
* source: ``format("kafka")`` → ``from_json`` → ``id long, payload binary`` → ``noop``
  over a topic of 2 partitions prefilled once per run with the same rows.

Both use the connector's defaults, as a user who picks it gets them.
"""

from __future__ import annotations

import fcntl
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
# the rate peer's payload (bench/spark_pairs.PAYLOAD_EXPR) as a 92-character string
PAYLOAD_STR = "concat(lpad(cast({col} as string), 20, '0'), repeat('x', 72))"


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


def create_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = uid("sparkkafka")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(60)
    return topic


def delete_topic(bootstrap: str, topic: str) -> None:
    """Frees the broker's disk (and page cache) between rounds; outside the timing."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics([topic]).values():
        fut.result(60)


def json_value(df: DataFrame, id_col: str, payload: str) -> DataFrame:
    return df.selectExpr(f"to_json(named_struct('id', {id_col}, 'payload', {payload})) "
                         "as value")


def prefill(spark: SparkSession, bootstrap: str, n: int) -> str:
    """A topic of 2 partitions holding the bench's ``n`` rows as JSON (Spark's batch
    Kafka sink), for the source peer."""
    topic = create_topic(bootstrap)
    rows = spark.range(n, numPartitions=PARTITIONS)
    json_value(rows, "id", PAYLOAD_STR.format(col="id")).write.format("kafka") \
        .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
    return topic


def source_df(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .selectExpr(f"from_json(cast(value as string), '{JSON_SCHEMA}') as r")
            .selectExpr("r.id as id", "cast(r.payload as binary) as payload"))


def sink_fn(spark: SparkSession, bootstrap: str, n: int,
            run: Callable[[DataFrame, str, dict[str, str]], float]) -> Callable[[], float]:
    """rate → to_json → Spark's Kafka sink into a fresh 2-partition topic; ``run`` runs
    the availableNow query and returns rows/s (spark_pairs' own timing)."""
    def measure() -> float:
        topic = create_topic(bootstrap)
        try:
            rate = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", n)
                    .option("numPartitions", PARTITIONS).load())
            df = json_value(rate, "value", PAYLOAD_STR.format(col="value"))
            return run(df, "kafka", {"kafka.bootstrap.servers": bootstrap, "topic": topic})
        finally:
            delete_topic(bootstrap, topic)
    return measure
