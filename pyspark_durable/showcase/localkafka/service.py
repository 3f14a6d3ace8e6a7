"""The local broker of ``durablewal kafka start|stop|status``: one KRaft node on 127.0.0.1
and the files that let later commands find it.

Its folder (``--dir``, default ``$XDG_STATE_HOME/durablewal/kafka``) holds the node's
data and logs, ``broker.json`` (the PID and listeners: what ``stop`` and ``status``
read) and ``client.properties`` (what a client needs: the ``--kafka-config`` file of
the CLI, and :func:`client_settings` for Spark and the Python API; with SASL it holds
the password, so it is private to the user and never printed).

A broker started detached outlives the command and is stopped by ``stop``, by its PID,
after checking that the PID is still that broker's JVM (a PID can be reused). One
started attached (``--foreground``) is tied to the command (see :mod:`.cluster`).

The broker's data outlives it: a ``start`` after ``stop``, a crash or a reboot runs
the same node on the same ``log.dirs`` (topics, and so every WAL on it, kept), with
the SASL password it had; ``fresh=True`` deletes them first. The running broker is
found by its JVM's command line (this folder's ``server.properties``), so a stale or
edited ``broker.json`` never hides one; a ``broker.json`` whose broker is gone is how
``status`` tells that it died rather than was stopped.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import signal
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pyspark_durable.errors import ConfigError, DurableWalError
from pyspark_durable.showcase.localkafka.cluster import KafkaCluster, start_cluster
from pyspark_durable.showcase.localkafka.ports import port_free
from pyspark_durable.showcase.localkafka.settings import Auth

DEFAULT_PORT = 9092
DEFAULT_SASL_PORT = 9094
SASL_USER = "durablewal"
STATE_FILE = "broker.json"
CLIENT_FILE = "client.properties"
STOP_TIMEOUT_S = 30.0


def default_folder() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "durablewal" / "kafka"


@dataclass(frozen=True)
class BrokerState:
    """What ``broker.json`` records of a running local broker."""

    pid: int
    folder: str
    bootstrap: str
    sasl_bootstrap: str | None
    sasl_user: str | None
    attached: bool
    started_ms: int

    @property
    def client_file(self) -> Path:
        return Path(self.folder) / CLIENT_FILE

    @property
    def server_properties(self) -> Path:
        return Path(self.folder) / "node1" / "server.properties"


def _pick_port(wanted: int | None, default: int, flag: str) -> int:
    port = default if wanted is None else wanted
    if not port_free(port):
        raise ConfigError(
            f"port {port} on 127.0.0.1 is taken (another Kafka broker?): give {flag} N with a free port"
        )
    return port


def _write_private(path: Path, text: str) -> None:
    """Written readable by the user only: it may hold the SASL password."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


@dataclass(frozen=True)
class Started:
    """What a ``start`` did to the data of the broker before it."""

    kept: bool  # the node's data was there and is served again
    deleted: bool  # ``fresh``: it was there and was deleted
    data: Path


def start(
    folder: Path,
    *,
    port: int | None = None,
    sasl: bool = False,
    sasl_port: int | None = None,
    attached: bool = False,
    fresh: bool = False,
) -> tuple[KafkaCluster, BrokerState, Started]:
    """Start the folder's broker (refused while one runs there) on the data it kept, or
    (``fresh``) empty; record how to reach it."""
    folder = folder.resolve()
    running = find_running(folder)
    if running is not None:
        raise ConfigError(
            f"a local Kafka broker already runs from {folder} (pid {running.pid}, "
            f"{running.bootstrap}): durablewal kafka stop --dir {folder}"
        )
    chosen = _pick_port(port, DEFAULT_PORT, "--port")
    chosen_sasl = _pick_port(sasl_port, DEFAULT_SASL_PORT, "--sasl-port") if sasl else None
    data = folder / "node1" / "data"
    had = (data / "meta.properties").exists()
    if fresh:
        shutil.rmtree(folder / "node1", ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    password = _kept_password(folder) if had and not fresh else None
    auth = Auth(user=SASL_USER, password=password or secrets.token_hex(16)) if sasl else None
    cluster = start_cluster(
        folder, 1, sasl=sasl, auth=auth, attached=attached, port=chosen, sasl_port=chosen_sasl,
        keep_data=True,
    )
    node = cluster.nodes[0]
    assert node.pid is not None
    state = BrokerState(
        node.pid,
        str(folder),
        node.address,
        f"127.0.0.1:{node.sasl_port}" if sasl else None,
        SASL_USER if sasl else None,
        attached,
        int(time.time() * 1000),
    )
    props = {"bootstrap.servers": state.sasl_bootstrap or state.bootstrap}
    if auth is not None:
        props.update(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.plain.username": auth.user,
                "sasl.plain.password": auth.password,
            }
        )
    _write_private(state.client_file, "".join(f"{k}={v}\n" for k, v in props.items()))
    (folder / STATE_FILE).write_text(json.dumps(asdict(state), indent=1) + "\n")
    return cluster, state, Started(had and not fresh, had and fresh, data)


def _kept_password(folder: Path) -> str | None:
    """The SASL password the broker before had, so clients' saved settings still work."""
    try:
        text = (folder / CLIENT_FILE).read_text()
    except FileNotFoundError:
        return None
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return props.get("sasl.plain.password") if props.get("sasl.plain.username") == SASL_USER \
        else None


def read_state(folder: Path) -> BrokerState | None:
    try:
        return BrokerState(**json.loads((folder / STATE_FILE).read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise DurableWalError(
            f"{folder / STATE_FILE} is not a local broker's state ({exc}): delete it"
        ) from None


def _is_broker_of(pid: int, server_properties: Path) -> bool:
    """The PID is alive and is the JVM started on this ``server.properties``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline and str(server_properties).encode() in cmdline


def _search(server_properties: Path) -> int | None:
    """The PID of a broker JVM started on this ``server.properties``, from /proc."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _is_broker_of(int(entry.name), server_properties):
            return int(entry.name)
    return None


def find_running(folder: Path) -> BrokerState | None:
    """The folder's broker if it runs: by the PID its state file names, else by its
    command line (a stale or edited PID; the state file is then corrected)."""
    state = read_state(folder)
    if state is not None and _is_broker_of(state.pid, state.server_properties):
        return state
    pid = _search(folder.resolve() / "node1" / "server.properties")
    if pid is None:
        return None
    if state is None:
        raise DurableWalError(
            f"a Kafka broker (pid {pid}) runs from {folder} but {folder / STATE_FILE} is "
            f"missing: stop it with kill {pid}, then durablewal kafka start")
    found = replace(state, pid=pid)
    (folder / STATE_FILE).write_text(json.dumps(asdict(found), indent=1) + "\n")
    return found


def died(folder: Path) -> str | None:
    """For a folder where :func:`find_running` found no broker: why, though
    ``broker.json`` says one was started (``stop`` removes it): when it started, that
    it ended without ``stop``, and its log; None when the state file is absent. Its exit
    status is not known: it was no process's child here."""
    state = read_state(folder)
    if state is None:
        return None
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.started_ms / 1000))
    log = Path(state.folder) / "node1" / "server.log"
    why = "killed, crashed, or the machine restarted"
    if state.started_ms / 1000 < _boot_time():
        why = "the machine restarted since"
    text = (f"the local Kafka broker of {folder} (pid {state.pid}, started {started}) is not "
            f"running: it ended without durablewal kafka stop ({why}); its data is kept, "
            f"and durablewal kafka start runs it again")
    if log.exists():
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(log.stat().st_mtime))
        text += f"; its log: {log} (last written {last})"
    return text


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def forget(folder: Path) -> None:
    (folder / STATE_FILE).unlink(missing_ok=True)


def _wait_exit(pid: int, timeout_s: float) -> bool:
    """Wait for a process that is not our child to end (a pidfd becomes readable)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready)
    finally:
        os.close(fd)


def stop(folder: Path, timeout_s: float = STOP_TIMEOUT_S) -> BrokerState | None:
    """Stop the folder's broker by its PID: SIGTERM (Kafka's clean shutdown), then
    SIGKILL after ``timeout_s``. None when no broker ran there."""
    folder = folder.resolve()
    state = find_running(folder)
    if state is None:
        return None
    os.killpg(state.pid, signal.SIGTERM)  # its own process group: the JVM and nothing else
    if not _wait_exit(state.pid, timeout_s):
        os.killpg(state.pid, signal.SIGKILL)
        _wait_exit(state.pid, timeout_s)
    forget(folder)
    return state


def client_settings(folder: Path | str | None = None) -> dict[str, str]:
    """The Kafka client settings of the local broker (``bootstrap.servers``, and with
    SASL the protocol, mechanism and credentials), read from its ``client.properties``:
    ``{"backend": "kafka", "options": client_settings()}`` for the Python API, and
    ``.options(**{"kafka." + k: v for k, v in client_settings().items()})`` for Spark."""
    path = Path(folder or default_folder()) / CLIENT_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"no local Kafka broker's settings at {path}: start one with durablewal kafka start"
        ) from None
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def paste_lines(state: BrokerState, folder_flag: str) -> list[str]:
    """The options to paste, for Spark, the Python API and the CLI (never the password)."""
    bootstrap = state.sasl_bootstrap or state.bootstrap
    where = f"client_settings({state.folder!r})" if folder_flag else "client_settings()"
    lines = ["Spark:", f'  .option("backend", "kafka").option("kafka.bootstrap.servers", "{bootstrap}")']
    if state.sasl_bootstrap:
        lines += [
            '  .option("kafka.security.protocol", "SASL_PLAINTEXT").option("kafka.sasl.mechanism", "PLAIN")',
            f'  .option("kafka.sasl.plain.username", "{state.sasl_user}")'
            '.option("kafka.sasl.plain.password", ...)  # the password: '
            f"{state.client_file} (not shown)",
            "  or all of them: from pyspark_durable.showcase.localkafka.service import client_settings",
            f'  .option("backend", "kafka").options(**{{"kafka." + k: v for k, v in {where}.items()}})',
        ]
    lines += [
        "Python API:",
        "  from pyspark_durable.showcase.localkafka.service import client_settings",
        f'  open_namespace({{"backend": "kafka", "namespace": "shop", "options": {where}}})',
        "CLI:",
        f"  durablewal namespaces --kafka-config {state.client_file}"
        if state.sasl_bootstrap
        else f"  durablewal namespaces --bootstrap-servers {bootstrap}",
    ]
    return lines
