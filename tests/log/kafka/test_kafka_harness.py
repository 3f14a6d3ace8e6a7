"""The test suite's own Kafka harness: what it hands the broker's tools is well formed."""

from __future__ import annotations

import base64
import logging
import subprocess
import threading

from pyspark_durable.showcase.localkafka.node import die_with_caller
from tests.kafka_broker import random_cluster_id

BOUND_S = 60.0  # far beyond a process start: reaching it means the start hung


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
    from tests.helpers import _ephemeral_ports, free_port

    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert not [p for p in ports if p in _ephemeral_ports()]


def test_an_attached_process_dies_when_the_thread_that_started_it_ends():
    """This tests that a command made attached is SIGKILLed by the kernel once the thread
    that started it ends (the guarantee that an attached broker never outlives its
    caller), and that it runs as the command itself (its PID is the one to kill)."""
    started: dict[str, subprocess.Popen] = {}

    def start() -> None:
        started["proc"] = subprocess.Popen(
            die_with_caller(["sh", "-c", "echo $$; exec sleep 600"]), stdout=subprocess.PIPE,
            text=True)
        started["pid"] = int(started["proc"].stdout.readline())

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(BOUND_S)
    proc = started["proc"]
    try:
        assert started["pid"] == proc.pid, "the command does not run under the started PID"
        assert proc.wait(BOUND_S) == -9, "the process outlived the thread that started it"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_attached_start_runs_no_python_fork_hooks_while_another_thread_holds_a_lock():
    """This tests that an attached start does not wait on locks other threads of the caller
    hold: a thread making a logger (it holds logging's module lock, which logging also
    takes around a fork whose child runs Python code) at the moment of the start
    does not hang it; the started command runs and exits normally."""
    held, release = threading.Event(), threading.Event()

    class SlowLogger(logging.Logger):  # made by getLogger under logging's module lock
        def __init__(self, name: str) -> None:
            held.set()
            release.wait(BOUND_S)
            super().__init__(name)

    manager = logging.Manager(logging.getLogger())  # its own: no logger of the suite changes
    manager.setLoggerClass(SlowLogger)
    holder = threading.Thread(target=manager.getLogger, args=("durablewal-slow",))
    holder.start()
    assert held.wait(BOUND_S)
    outcome: dict[str, object] = {}

    def start() -> None:
        proc = subprocess.Popen(die_with_caller(["sh", "-c", "exit 7"]))
        outcome["code"] = proc.wait(BOUND_S)

    starter = threading.Thread(target=start, daemon=True)
    starter.start()
    starter.join(BOUND_S)
    still_held = holder.is_alive()
    release.set()
    holder.join(BOUND_S)
    starter.join(BOUND_S)
    assert still_held and outcome == {"code": 7}, f"the start waited on the lock: {outcome}"
