"""Apache Kafka's jars, as ``jars/kafka-broker/pom.xml`` of a source checkout lists
them: resolved from Maven Central into ``jars/kafka-broker/libs/`` (ignored by git) the
first time a broker starts, once for every process that asks at the same time."""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

from pyspark_durable.showcase.localkafka.node import BrokerStartError

ROOT = Path(__file__).resolve().parents[3]  # the checkout: pyspark_durable/showcase/localkafka/
POM = ROOT / "jars" / "kafka-broker" / "pom.xml"
LIBS = POM.parent / "libs"


def kafka_classpath() -> str:
    """``libs/*`` of Apache Kafka's jars, resolved from Maven Central once (file-locked,
    so parallel processes resolve it once)."""
    if not POM.is_file():
        raise BrokerStartError(
            f"no {POM}: a local Kafka broker is started from a source "
            "checkout of pyspark_durable (its jars/kafka-broker/pom.xml)"
        )
    stamp = LIBS / ".resolved"
    with open(POM.parent / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.stat().st_mtime < POM.stat().st_mtime:
            try:
                done = subprocess.run(
                    [
                        "mvn",
                        "-q",
                        "-B",
                        "-f",
                        str(POM),
                        "dependency:copy-dependencies",
                        f"-DoutputDirectory={LIBS}",
                        "-DincludeScope=runtime",
                    ],
                    capture_output=True,
                    text=True,
                )
            except FileNotFoundError:
                raise BrokerStartError(
                    "resolving Apache Kafka's jars needs Maven ('mvn') and Java 17 on the PATH"
                ) from None
            if done.returncode != 0:
                raise BrokerStartError(
                    f"resolving Apache Kafka's jars with {POM} failed:\n"
                    f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
                )
            stamp.touch()
    return f"{LIBS}/*"
