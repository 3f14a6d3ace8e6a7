"""``durablewal kafka start|stop|status``: a local Apache Kafka broker in one command
(and ``kafka acls``, the rights of a role: :mod:`.kafka_acls`).

``start`` returns once the broker serves, printing the options to paste; the broker
runs on until ``stop`` (by its PID). ``start --foreground`` keeps the broker tied to
the command instead: it stops when the command ends, by Ctrl-C, a signal or a crash
(even ``kill -9``). ``status`` exits 0 while it runs, 1 when it does not (saying so when
it died rather than was stopped). Its data outlives it; ``start --fresh`` deletes it.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from .kafka_acls import add_action as add_acls_action
from .render import emit, emit_json


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "kafka",
        help="start, stop or show a local Apache Kafka broker; print a role's ACLs",
        description="a local Apache Kafka broker in one command",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, help_ in (
        ("start", "start a one-node KRaft broker on 127.0.0.1"),
        ("stop", "stop the broker started from --dir, by its PID"),
        ("status", "is it running, and how to reach it"),
    ):
        a = actions.add_parser(name, help=help_, description=help_)
        a.add_argument(
            "--dir",
            type=Path,
            default=None,
            help="the broker's folder: data, logs, PID and client settings "
            "(default $XDG_STATE_HOME/durablewal/kafka)",
        )
        a.add_argument("--json", action="store_true", help="print one JSON document")
        a.set_defaults(handler=cmd_kafka, parser=a, verbose=0)
        if name == "start":
            a.add_argument("--port", type=int, help="PLAINTEXT listener (default 9092)")
            a.add_argument(
                "--sasl",
                action="store_true",
                help="add a SASL_PLAINTEXT listener (PLAIN, user 'durablewal', a "
                "generated password kept in DIR/client.properties)",
            )
            a.add_argument("--sasl-port", type=int, help="SASL listener (default 9094)")
            a.add_argument(
                "--fresh",
                action="store_true",
                help="delete the data the broker kept (every topic, so every WAL on it) "
                "and start empty; without it a start serves the data of the broker before",
            )
            a.add_argument(
                "--foreground",
                action="store_true",
                help="stay attached: the broker stops when this command ends, however it ends",
            )
    add_acls_action(actions)


def _folder(args: argparse.Namespace) -> Path:
    from pyspark_durable.showcase.localkafka.service import default_folder

    return (args.dir or default_folder()).resolve()


def _data_line(started: Any) -> str:
    if started.kept:
        return (f"  data: the broker's data from before, kept ({started.data}); "
                "--fresh starts empty")
    if started.deleted:
        return (f"  data: --fresh deleted the data of the broker before ({started.data}: every "
                "topic, so every WAL on it); a new, empty broker")
    return f"  data: a new, empty broker ({started.data}); kept across stop and start"


def _describe(state: Any, args: argparse.Namespace, head: str, started: Any = None) -> None:
    from pyspark_durable.showcase.localkafka.service import paste_lines

    doc = {
        "running": True,
        "pid": state.pid,
        "folder": state.folder,
        "bootstrap_servers": state.bootstrap,
        "sasl_bootstrap_servers": state.sasl_bootstrap,
        "kafka_config": str(state.client_file),
        "attached": state.attached,
    }
    if started is not None:
        doc["data_kept"], doc["data_deleted"] = started.kept, started.deleted
    if args.json:
        emit_json(doc)
        return
    stop = (
        "Ctrl-C"
        if state.attached
        else "durablewal kafka stop" + (f" --dir {state.folder}" if args.dir else "")
    )
    listeners = f"PLAINTEXT {state.bootstrap}" + (
        f", SASL_PLAINTEXT {state.sasl_bootstrap} (PLAIN, user {state.sasl_user})"
        if state.sasl_bootstrap
        else ""
    )
    emit(
        head,
        f"  {listeners}; pid {state.pid}; folder {state.folder}; stop: {stop}",
        *([_data_line(started)] if started is not None else []),
        *paste_lines(state, str(args.dir or "")),
    )


def _foreground(cluster: Any, folder: Path) -> int:
    """Wait on the broker; SIGTERM, SIGHUP and Ctrl-C stop it (so does our death)."""
    from pyspark_durable.showcase.localkafka.service import forget

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    try:
        code = cluster.nodes[0].process.wait()
        sys.stderr.write(
            f"durablewal: error: the Kafka broker exited with {code}; its log: "
            f"{cluster.nodes[0].folder / 'server.log'}\n"
        )
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("durablewal: stopping the Kafka broker\n")
        cluster.stop()
        return 0
    finally:
        forget(folder)


def cmd_kafka(args: argparse.Namespace) -> int:
    from pyspark_durable.showcase.localkafka import service

    folder = _folder(args)
    if args.action == "start":
        cluster, state, started = service.start(
            folder, port=args.port, sasl=args.sasl, sasl_port=args.sasl_port,
            attached=args.foreground, fresh=args.fresh,
        )
        _describe(state, args, "Kafka is running (one KRaft node on 127.0.0.1):", started)
        sys.stdout.flush()
        return _foreground(cluster, folder) if args.foreground else 0
    if args.action == "stop":
        state = service.stop(folder)
        text = (
            f"stopped the Kafka broker (pid {state.pid}) of {folder}"
            if state
            else f"no local Kafka broker runs from {folder}"
        )
        emit_json({"stopped": state is not None, "folder": str(folder)}) if args.json else emit(text)
        return 0
    state = service.find_running(folder)
    if state is None:
        died = service.died(folder)
        text = died or f"no local Kafka broker runs from {folder} (start one: durablewal kafka start)"
        emit_json({"running": False, "folder": str(folder), "died": died}) if args.json else emit(text)
        return 1
    _describe(state, args, "Kafka is running:")
    return 0
