"""Network partitions between a client and a Kafka broker, on both clients.

The broker's advertised listener goes through a TCP proxy the test switches
(tests/netproxy.py), so the client reaches the broker only through it. Every operation
that cannot finish must fail with a typed, retriable error within the bound
docs/backends.md states (derived from the client timeouts), never hang; and a commit
whose answer never came (indeterminate) is resolved by the retry rule: the same writer
step again gives exactly one step. The table that classifies the clients' errors as
transient is checked here against every code both clients have.
"""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import BackendUnavailable, DurableWalError
from pyspark_durable.log.kafka import transient
from tests.kafka_broker import KafkaCluster

REQUEST_MS = 3000
CONNECT_MS = 2000


def config(cluster: KafkaCluster, client: str, namespace: str, **timeouts: int) -> dict:
    return {"backend": "kafka", "namespace": namespace,
            "options": {"bootstrap_servers": cluster.client_bootstrap, "client": client,
                        "request_timeout_ms": REQUEST_MS, "connect_timeout_ms": CONNECT_MS,
                        **timeouts}}


def prepared(cluster: KafkaCluster, client: str) -> dict:
    """A namespace with its topics and writer step 0, made with the clients' default
    timeouts (a loaded machine's broker may take seconds to create a topic); returns
    the config of the short timeouts the partition is measured with."""
    namespace = f"p{uuid.uuid4().hex[:10]}"
    ns = open_namespace(config(cluster, client, namespace, request_timeout_ms=30_000,
                               connect_timeout_ms=10_000))
    try:
        write_step(ns, "w", 0, {"t": rows(0)})
    finally:
        ns.close()
    return config(cluster, client, namespace)


def rows(step: int) -> pa.Table:
    ids = list(range(step * 10, step * 10 + 10))
    return pa.table({"id": ids, "payload": [f"row-{i}" for i in ids]})


# -- the one table of transient errors --------------------------------------------------


def test_every_librdkafka_code_is_classified_and_transient_ones_are_retriable():
    """This tests that every error code librdkafka has is classified by the one table:
    its local (negative) codes each transient or not, the broker codes Kafka calls
    retriable each transient or excluded with a reason; that a transient code becomes a
    retriable BackendUnavailable (``_TIMED_OUT_QUEUE`` included) and a refusal never does."""
    import kafka.errors as kerr
    from confluent_kafka import KafkaError

    from pyspark_durable.log.kafka.confluent.errors import typed

    codes = {n: v for n, v in vars(KafkaError).items()
             if n.lstrip("_").isupper() and isinstance(v, int)}
    local = {n for n, v in codes.items() if v < 0 and n != "UNKNOWN" and n != "_END"}
    unclassified = local - transient.TRANSIENT_LOCAL - transient.NOT_TRANSIENT_LOCAL
    assert not unclassified, f"librdkafka codes in neither table: {sorted(unclassified)}"
    assert not transient.TRANSIENT_LOCAL & transient.NOT_TRANSIENT_LOCAL
    # Kafka's own classification of broker codes (kafka-python mirrors the Java client's)
    kafka_retriable = {v for n, v in codes.items() if v > 0
                       and getattr(kerr.for_code(v), "retriable", False)}
    missing = kafka_retriable - set(transient.TRANSIENT_BROKER) - set(transient.NOT_RETRIED_BROKER)
    assert not missing, f"retriable broker codes not in the table: {sorted(missing)}"
    for number, name in transient.TRANSIENT_BROKER.items():
        if hasattr(KafkaError, name):
            assert getattr(KafkaError, name) == number, name
    assert "_TIMED_OUT_QUEUE" in transient.TRANSIENT_LOCAL
    address = "127.0.0.1:1"  # refuses connections: the message's probe is quick
    for name in sorted(transient.TRANSIENT_LOCAL):
        err = typed(KafkaError(getattr(KafkaError, name)), "append", address, topic="t")
        assert isinstance(err, BackendUnavailable) and err.retriable, (name, err)
    for number in transient.TRANSIENT_BROKER:
        err = typed(KafkaError(number), "append", address, topic="t")
        assert isinstance(err, BackendUnavailable) and err.retriable, (number, err)
    refusals = {v for n, v in codes.items() if "AUTHORIZATION_FAILED" in n or "SASL" in n
                or n in ("_AUTHENTICATION", "DELEGATION_TOKEN_AUTH_DISABLED")}
    assert refusals - {v for v in codes.values() if v < 0} <= set(transient.REFUSED_BROKER)
    for code in refusals:
        assert code not in transient.TRANSIENT_BROKER
        err = typed(KafkaError(code, "refused", retriable=True), "append", address, topic="t")
        assert not err.retriable, (code, err)


def test_every_kafka_python_retriable_error_is_retriable_and_refusals_never():
    """This tests that every exception class kafka-python marks retriable is transient in
    the one table (or excluded there with a reason), becomes a retriable error through
    the client's translation, and that no authorization or login failure does."""
    import kafka.errors as kerr

    from pyspark_durable.log.kafka.kafka_python.errors import as_typed

    address = "127.0.0.1:1"
    classes = [c for c in vars(kerr).values()
               if isinstance(c, type) and issubclass(c, kerr.KafkaError)]
    for cls in classes:
        errno = getattr(cls, "errno", None)
        if not cls.retriable or (isinstance(errno, int) and errno in transient.NOT_RETRIED_BROKER):
            continue
        err = as_typed(cls("partitioned"), "append", address, topic="t")
        assert isinstance(err, BackendUnavailable) and err.retriable, (cls.__name__, err)
    refused = [c for c in classes if "Authorization" in c.__name__
               or "Authentication" in c.__name__ or "Sasl" in c.__name__]
    assert len(refused) >= 4, [c.__name__ for c in refused]
    for cls in refused:
        assert isinstance(as_typed(cls("refused"), "append", address, topic="t"),
                          DurableWalError)
        assert not as_typed(cls("refused"), "append", address, topic="t").retriable, cls


# -- a dead link, on both clients ------------------------------------------------------


def bound_s(ns) -> float:
    """docs/backends.md's bound on an operation that cannot finish: the delivery timeout
    (request_timeout_ms + linger + 1 s), plus 2 s: the broker probe of the message (a
    connect and a Kafka request, 0.5 s each) and librdkafka's once-a-second scan for
    timed-out messages."""
    return ns.store.settings.delivery_timeout_ms / 1000 + 2.0


def timed_failure(what: str, call, limit_s: float) -> tuple[float, BackendUnavailable]:
    start = time.monotonic()
    with pytest.raises(BackendUnavailable) as info:
        call()
    took = time.monotonic() - start
    assert info.value.retriable, (what, info.value)
    assert "accept connections" not in str(info.value), str(info.value)
    assert took <= limit_s, f"{what} failed after {took:.1f}s, past the bound {limit_s:.1f}s"
    return took, info.value


def steps_and_rows(ns, want_steps: int) -> int:
    """The namespace holds exactly ``want_steps`` steps whose rows are those written,
    each once: returns the rows checked."""
    ns.refresh()
    assert len(ns.steps()) == want_steps, ns.steps()
    got = read_steps(ns, "t").select(["id", "payload"]).to_pylist()
    want = [r for s in range(want_steps) for r in rows(s).to_pylist()]
    assert sorted(got, key=lambda r: r["id"]) == want
    return len(got)


@pytest.mark.kafka
@pytest.mark.parametrize("mode", ["blackhole", "reset"])
@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_dead_link_fails_typed_within_the_bound(proxied, link, client, mode):
    """This tests that with the only link to the broker dead (``blackhole``: connections
    taken, nothing answered; ``reset``: every connection reset), an append, a namespace
    open and a read each fail with a retriable BackendUnavailable within the documented
    bound, whose message says what the probe saw (never "accept connections"); and that
    after healing the same writer step, written by the retry rule, commits exactly once
    within one bound."""
    cluster, _ = proxied
    cfg = prepared(cluster, client)
    ns = open_namespace(cfg)
    try:
        limit = bound_s(ns)
        link.set(mode)
        took = {"append": timed_failure("append", lambda: write_step(ns, "w", 1, {"t": rows(1)}),
                                        limit)}
        took["read"] = timed_failure("read", lambda: read_steps(ns, "t", 0, 1), limit)
        took["open"] = timed_failure("open", lambda: open_namespace(cfg).close(), limit)
        print(f"\n{client} {mode}: bound {limit:.1f}s; "
              + ", ".join(f"{k} {t:.1f}s" for k, (t, _) in took.items())
              + f"\n  append error: {took['append'][1]}")
        link.set("forward")
        assert healed_write(ns, 1, bound_s(ns)) == 1
        assert steps_and_rows(ns, 2) == 20
    finally:
        link.set("forward")
        ns.close()


def healed_write(ns, writer_step: int, limit_s: float) -> int:
    """Writer step ``writer_step`` of writer ``w`` written by the retry rule once the link
    is back: written again while it fails retriably (a client's first request after the
    heal may still meet its own reconnect backoff, or a stall of a loaded machine), at
    most ``limit_s`` after the heal. Returns the step it committed as."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            return write_step(ns, "w", writer_step, {"t": rows(writer_step)})
        except BackendUnavailable as exc:
            assert exc.retriable, exc
            if time.monotonic() >= deadline:
                raise
            print(f"  written again after a healed link: {exc}")


@pytest.mark.kafka
@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_an_indeterminate_commit_is_resolved_by_retrying_the_writer_step(proxied, link, client):
    """This tests the retry rule on an indeterminate commit: the commit record reaches the
    broker, its answer and every later one never come back
    (``answers_lost_after_produce``), and the commit fails with a
    retriable error within the bound. After healing, the same writer step written again,
    in the same namespace object and in a newly opened one, gives exactly one step."""
    cluster, _ = proxied
    cfg = prepared(cluster, client)
    ns = open_namespace(cfg)
    try:
        attempt = ns.begin("w", 1)
        attempt.write_batches("t", [rows(1)])
        attempt.receipt()  # its entries acknowledged: only the commit record is left
        link.set("answers_lost_after_produce")
        took, error = timed_failure("commit", attempt.commit, bound_s(ns))
        assert link.mode == "requests_only", "the commit sent no Produce request"
        link.set("forward")
        landed = committed_directly(cluster, client, cfg["namespace"])
        assert landed, "the commit record did not reach the broker: not indeterminate"
        print(f"\n{client} indeterminate commit: failed after {took:.1f}s "
              f"(bound {bound_s(ns):.1f}s), commit record landed: {landed}\n  {error}")
        assert write_step(ns, "w", 1, {"t": rows(1)}) == 1
        again = open_namespace(cfg)
        try:
            assert write_step(again, "w", 1, {"t": rows(1)}) == 1
            assert steps_and_rows(again, 2) == 20
        finally:
            again.close()
        assert steps_and_rows(ns, 2) == 20
    finally:
        link.set("forward")
        ns.close()


def committed_directly(cluster: KafkaCluster, client: str, namespace: str) -> bool:
    """Did writer step 1 commit, asked over the nodes' own listener (no proxy)?"""
    node = cluster.nodes[0]
    cfg = {"backend": "kafka", "namespace": namespace,
           "options": {"bootstrap_servers": f"127.0.0.1:{node.internal_port}",
                       "client": client}}
    ns = open_namespace(cfg, create=False)
    try:
        return ns.committed_step("w", 1) is not None
    finally:
        ns.close()
