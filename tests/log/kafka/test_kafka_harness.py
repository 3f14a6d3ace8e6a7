"""The test suite's own Kafka harness: what it hands the broker's tools is well formed."""

from __future__ import annotations

import base64

from kafka_broker import random_cluster_id


def test_cluster_ids_are_kafka_uuids_that_never_read_as_an_option():
    """This tests that every KRaft cluster id the harness makes is 16 bytes in URL-safe
    base64 and never starts with '-' (one in 64 raw ids does, and ``kafka-storage
    format -t -xyz`` then fails to parse: CI lost four cluster tests to it)."""
    ids = [random_cluster_id() for _ in range(20_000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)


def test_free_ports_are_distinct_and_never_ephemeral():
    """This tests that the ports the harness hands out (to brokers that are killed and
    restarted on them) are never the kernel's ephemeral ports, which any outgoing
    connection may take meanwhile, and never the same twice in a session."""
    from helpers import _ephemeral_ports, free_port

    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert not [p for p in ports if p in _ephemeral_ports()]
