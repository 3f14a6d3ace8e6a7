"""One KRaft node (combined broker and controller): its folder, ports and process,
and how that process is started, tied to its caller or not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pyspark_durable.errors import DurableWalError

HEAP = ("-Xms256m", "-Xmx768m")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class BrokerStartError(DurableWalError):
    """A broker did not come up in time (the message holds its log's tail)."""


@dataclass
class Node:
    node_id: int
    port: int
    controller_port: int
    folder: Path
    sasl_port: int | None = None
    ssl_port: int | None = None
    process: subprocess.Popen | None = None
    # with a proxy in front (start_cluster's ``advertise``): the port clients are told
    # to use, and the listener the nodes use among themselves
    advertised_port: int | None = None
    internal_port: int | None = None

    @property
    def address(self) -> str:
        """The node's own PLAINTEXT listener (the harness's way in, never proxied)."""
        return f"127.0.0.1:{self.port}"

    @property
    def client_address(self) -> str:
        """Where clients reach the node: its proxy's port when it has one."""
        return f"127.0.0.1:{self.advertised_port or self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        texts = []
        for name in ("server.log", "stdout.log"):
            try:
                texts.append((self.folder / name).read_text(errors="replace")[-chars:])
            except OSError as exc:
                texts.append(f"<no {name}: {exc}>")
        return "\n".join(texts)


# Armed in a ``preexec_fn``, the signal would need Python code between fork and exec in
# a process that may have other threads (a Kafka client's, Spark's): the interpreter's
# fork hooks and that code can wait on a lock another thread held at the fork. So a
# fresh interpreter arms it and then execs the command (the death signal survives
# exec), and ``Popen`` itself runs no Python around its fork.
_ARM_THEN_EXEC = (
    "import ctypes, os, sys\n"
    f"if ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0)"
    " != 0 or os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def die_with_caller(argv: list[str]) -> list[str]:
    """``argv`` made to be SIGKILLed by the kernel when the thread that starts it ends
    (``PR_SET_PDEATHSIG``), whatever ends it: the guarantee that an attached broker never
    outlives a crashed caller. A caller already gone by the time the signal is armed (it
    would never come) makes the command exit with 1 before it runs. Start the result from
    the thread whose end should end it."""
    if not sys.platform.startswith("linux"):
        raise BrokerStartError(
            "an attached broker needs Linux (prctl PR_SET_PDEATHSIG); "
            "start it detached and stop it by its PID"
        )
    return [sys.executable, "-I", "-S", "-c", _ARM_THEN_EXEC, str(os.getpid()), *argv]


def launch(node: Node, classpath: str, heap: tuple[str, ...], attached: bool,
           jvm: tuple[str, ...] = ()) -> None:
    """Start the node's JVM on the files its folder holds, in a process group of its own
    (``attached``: killed by the kernel with its caller), its stdout appended to
    ``stdout.log``."""
    argv = [
        "java",
        *heap,
        *jvm,
        "-XX:+UseSerialGC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={node.folder / 'log4j2.properties'}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(node.folder / "server.properties"),
    ]
    with open(node.folder / "stdout.log", "ab") as out:
        node.process = subprocess.Popen(
            die_with_caller(argv) if attached else argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: kill -9 reaches all of it
        )
