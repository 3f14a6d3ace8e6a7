"""Child process: a store reads a log, its topics are deleted (one is created again
with PARTITIONS partitions, as a broker that auto-creates with num.partitions would),
then the store reads again.

Usage: python kafka_deleted_child.py BOOTSTRAP CLIENT PARTITIONS. Prints ``DELETED``,
then ``ERROR <type> <message>`` when the second read fails with an exception, ``READ
<n>`` when it reads (the process may also die of a signal: what the test looks for).
"""

from __future__ import annotations

import sys
import uuid

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from pyspark_durable.log import Record, open_store
from tests.helpers import wait_until


def main() -> None:
    bootstrap, client, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    namespace = f"gone{uuid.uuid4().hex[:8]}"
    store = open_store("kafka", namespace, bootstrap_servers=bootstrap, client=client,
                       request_timeout_ms=5000)
    log = store.open_region(0)
    log.append([Record(b"k", b"v")])
    assert [e.value for e in log.read(0)] == [b"v"]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    topics = [t for t in admin.list_topics() if t.startswith(namespace + "_")]
    admin.delete_topics(topics)
    # deletion completes asynchronously
    wait_until(lambda: not set(topics) & set(admin.list_topics()), f"{topics} to be deleted",
               60, interval_s=0.1)
    if partitions:
        admin.create_topics([NewTopic(f"{namespace}_region_0", partitions, -1)])
    admin.close()
    print("DELETED", flush=True)
    try:
        print("READ", len(list(log.read(0))), flush=True)
    except Exception as exc:  # noqa: BLE001 - the child reports whatever the read raised
        print("ERROR", type(exc).__name__, str(exc).replace("\n", " ")[:500], flush=True)


if __name__ == "__main__":
    main()
