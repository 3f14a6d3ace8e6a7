"""Crash tests of the WAL with real processes killed by SIGKILL at random moments."""

from __future__ import annotations

import random

import pytest

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from tests.wal_crash_tools import check_namespace, run_child, run_writer_here

pytestmark = pytest.mark.crash
KILLS = {"file": 14, "kafka": 6, "s3": 6}  # a Kafka child and the check after it cost ~7 s
# steps written in all: a commit on S3 takes several round trips, and a cleaner pass after
# each step many more, so S3 writes fewer, enough for its kills to land mid-step
TOTAL_STEPS = {"write": 300, "clean": 300, "s3-write": 120, "s3-clean": 50}


# each Kafka client gets one of the two modes
@pytest.mark.backends(("file", "write"), ("file", "clean"), ("kafka-confluent", "write"),
                      ("kafka-python", "clean"), ("s3", "write"), ("s3", "clean"), paired_with="mode")
def test_writer_killed_at_random_points(make_store, store_config, namespace, mode):
    """This tests that a writer (and cleaner) killed by SIGKILL ≥ 14 times (≥ 6 on Kafka and S3)
    loses and duplicates nothing."""
    backend, config = store_config
    total = TOTAL_STEPS.get(f"{backend}-{mode}", TOTAL_STEPS[mode])
    make_store().close()  # the namespace exists before the first child
    rng = random.Random(0xD0AB1E)
    acked: dict[int, int] = {}
    kills = 0
    for _ in range(KILLS[backend] * 3):
        if kills >= KILLS[backend]:
            break
        acks, done = run_child(backend, config, namespace, mode, total,
                               (rng.randint(1, 6), rng.uniform(0.0, 0.05)))
        for ws, step in acks:
            assert acked.setdefault(ws, step) == step, f"ws={ws} acknowledged as two steps"
        if done:
            break
        kills += 1
        # after every kill, a fresh process recovers a consistent namespace
        check_namespace(Namespace(open_store(backend, namespace, **config)), acked,
                        retained_only=mode == "clean")
    assert kills >= KILLS[backend], f"only {kills} kills happened before the writer finished"
    acks, done = run_writer_here(backend, config, namespace, mode, total)
    assert done
    acked.update(acks)
    ns = Namespace(open_store(backend, namespace, **config))
    check_namespace(ns, acked, retained_only=mode == "clean")
    assert sorted(acked) == list(range(total))
    if mode == "write":
        assert ns.steps() == range(0, total)
