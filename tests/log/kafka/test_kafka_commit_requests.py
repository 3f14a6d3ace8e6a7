"""What a commit asks a Kafka broker, counted on the wire (tests/netproxy.py).

The rule (docs/protocol.md, "Catching up after a commit"): a commit that finds other
writers' records between its replay and its own record reads them on from where its
replay stopped, up to its own record's end. Its append's acknowledgement (acks=all)
puts that end below the high watermark, so the read asks for no bounds: no ListOffsets
for the commits topic's ends, none for the registry's logical low watermark. Each is a
broker round trip and broker CPU, per commit and per writer: with many writers, every
commit catches up.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.wal import failpoints

PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2  # Kafka api keys


def rows(writer: int, step: int) -> pa.Table:
    ids = [writer * 1000 + step * 10 + i for i in range(10)]
    return pa.table({"id": ids, "payload": [f"row-{i}" for i in ids]})


@pytest.mark.kafka
@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_commit_reads_other_writers_records_without_asking_for_bounds(proxied, link, client):
    """This tests that a commit that must catch up asks no ListOffsets. Writer ``a``'s
    commit stops after its checks (failpoint ``commit.checked``) while another handle
    commits three steps of writer ``b``; then ``a`` appends its record, reads ``b``'s
    three records and its own, and numbers its step after them. On the wire from then
    on: Produce and Fetch requests, no ListOffsets. Every row of the five steps reads
    back once, in a handle opened afterwards too."""
    cluster, _ = proxied
    cfg = {"backend": "kafka", "namespace": f"q{uuid.uuid4().hex[:10]}",
           "options": {"bootstrap_servers": cluster.client_bootstrap, "client": client}}
    a = open_namespace(cfg)
    b = open_namespace(cfg, create=False)
    paused: list[str] = []
    try:
        assert write_step(a, "a", 0, {"t": rows(1, 0)}) == 0

        def others_commit(point: str) -> None:
            if point == "commit.checked" and not paused:
                paused.append(point)  # once: b's own commits pass this point too
                for s in range(3):
                    write_step(b, "b", s, {"t": rows(2, s)})
                link.requests.clear()  # b's requests have all been answered

        failpoints.install(others_commit)
        try:
            step = write_step(a, "a", 1, {"t": rows(1, 1)})
        finally:
            failpoints.install(None)
        asked = dict(link.requests)
        assert step == 4, "a's step is numbered after b's three"
        assert asked.get(LIST_OFFSETS, 0) == 0, f"requests by api key: {asked}"
        assert asked.get(PRODUCE, 0) >= 1 and asked.get(FETCH, 0) >= 1, asked
        want = sorted([*rows(1, 0).to_pylist(), *rows(1, 1).to_pylist(),
                       *(r for s in range(3) for r in rows(2, s).to_pylist())],
                      key=lambda r: r["id"])
        fresh = open_namespace(cfg, create=False)
        try:
            for ns in (a, b, fresh):
                ns.refresh()
                assert len(ns.steps()) == 5
                got = read_steps(ns, "t").select(["id", "payload"]).to_pylist()
                assert sorted(got, key=lambda r: r["id"]) == want
            assert [fresh.step_commit(s).writer_id for s in range(5)] == ["a", "b", "b", "b", "a"]
        finally:
            fresh.close()
    finally:
        a.close()
        b.close()
