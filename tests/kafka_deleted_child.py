"""Child process: a store reads a log, its topics are deleted, the store reads again.

Usage: python kafka_deleted_child.py BOOTSTRAP CLIENT. Prints ``ERROR <type>`` when the
second read fails with an exception, ``READ <n>`` when it reads (the process may also
die of a signal: the point of the test that runs it).
"""

from __future__ import annotations

import sys
import uuid

from kafka import KafkaAdminClient

from pyspark_durable.log import Record, open_store


def main() -> None:
    bootstrap, client = sys.argv[1:3]
    namespace = f"gone{uuid.uuid4().hex[:8]}"
    store = open_store("kafka", namespace, bootstrap_servers=bootstrap, client=client)
    log = store.open_region(0)
    log.append([Record(b"k", b"v")])
    assert [e.value for e in log.read(0)] == [b"v"]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.delete_topics([t for t in admin.list_topics() if t.startswith(namespace + "_")])
    admin.close()
    print("DELETED", flush=True)
    try:
        print("READ", len(list(log.read(0))), flush=True)
    except Exception as exc:  # noqa: BLE001 - the child reports whatever the read raised
        print("ERROR", type(exc).__name__, flush=True)


if __name__ == "__main__":
    main()
