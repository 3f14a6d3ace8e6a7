"""Which WAL the CLI looks at, and opening it without ever creating anything.

Opening a :class:`~pyspark_durable.wal.Namespace` creates the namespace when it does
not exist (it appends the ``ns`` record). An inspection tool must not do that: a typo
in ``--namespace`` would leave a new, empty namespace behind. So every command first
checks that the namespace is listed by the backend and has a commits log that names
its id, and only then opens it, with the id it was created with (a namespace created
with id 7 cannot be opened as id 0).
"""

from __future__ import annotations

import argparse
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark_durable.cli.layout as layout
from pyspark_durable.errors import DurableWalError, NotAWal
from pyspark_durable.log import LogStore, open_store, store_class
from pyspark_durable.secrets import is_secret
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.namespace import COMMITS_LOG

log = logging.getLogger(__name__)
DEFAULT_NAMESPACE = "default"

class CliError(Exception):
    """A user mistake the CLI reports in one line (exit code 2), never a traceback."""


class DefaultNamespace(str):
    """``--namespace``'s value when the user gave none: still the name ``default``, but
    a message about it can say that no namespace was named."""


@dataclass(frozen=True)
class Target:
    """A backend name, its store options, and how to name it in messages."""

    backend: str
    options: dict[str, Any] = field(default_factory=dict)
    where: str = ""


def _kafka_key(key: str) -> str:
    """The Kafka backend's spelling rule (``kafka.a.b`` == ``a_b``), without importing it."""
    return key.removeprefix("kafka.").replace(".", "_").replace("-", "_")


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_NOT_IN_KEY = re.compile(r"[:\s]")  # a Kafka option's key holds neither


def _unescape(text: str) -> str:
    r"""Java properties escapes: ``\t \n \r \f \uXXXX``, else ``\c`` is ``c``."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        n = text[i + 1]
        if n == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(n, n))
        i += 2
    return "".join(out)


def read_properties(text: str, source: str = "properties") -> dict[str, str]:
    """A Java properties file (``java.util.Properties.load``): ``key=value``,
    ``key: value`` or ``key value``; ``#`` and ``!`` comments; a line ending in an
    odd number of backslashes continues on the next. A malformed line is named by its
    number only: its text may hold a secret."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        j = 0
        while j < len(line) and line[j] not in "=: \t\f":
            j += 2 if line[j] == "\\" else 1
        key = _unescape(line[:j])
        rest = line[j:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        if not key:
            raise CliError(f"{source} line {number}: no key")
        props[key] = _unescape(rest)
    return props


def kafka_config_file(path: str) -> dict[str, str]:
    """The client settings of ``--kafka-config FILE``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read --kafka-config {path}: "
                       f"{getattr(exc, 'strerror', None) or exc}") from None
    return read_properties(text, f"--kafka-config {path}")


def _kafka_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--kafka-config`` FILE, then ``--kafka-option`` (the command line wins, key by
    key in any spelling); a secret on the command line gets a warning."""
    options: dict[str, Any] = {}
    if args.kafka_config is not None:
        options.update(kafka_config_file(args.kafka_config))
    for number, item in enumerate(args.kafka_option, 1):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or _NOT_IN_KEY.search(key):
            # named by what precedes a ':' or blank ("sasl.password:pw" is a mistyped
            # secret), else by its position: an argument is never echoed whole
            named = _NOT_IN_KEY.split(key, maxsplit=1)[0] if _NOT_IN_KEY.search(key) else ""
            raise CliError(f"--kafka-option {named or f'number {number}'} is not KEY=VALUE "
                           "(the argument is not shown: it may hold a secret)")
        if is_secret(key):
            log.warning("--kafka-option %s puts a secret on the command line (shell history, "
                        "ps): put it in a file given with --kafka-config", key)
        for old in [k for k in options if _kafka_key(k) == _kafka_key(key)]:
            del options[old]
        options[key] = value
    return options


def target_from_args(args: argparse.Namespace) -> Target:
    """The backend chosen on the command line: a WAL folder, or a Kafka broker."""
    paths = [p for p in (args.path_arg, args.path) if p is not None]
    if len(paths) > 1:
        raise CliError("give the WAL folder once: as PATH or as --path, not both")
    if args.bootstrap_servers is not None or args.kafka_config is not None:
        if paths:
            raise CliError("give either a WAL folder (file backend) or --bootstrap-servers "
                           "(kafka backend), not both")
        options = _kafka_options(args)
        if args.bootstrap_servers is not None:
            for old in [k for k in options if _kafka_key(k) == "bootstrap_servers"]:
                del options[old]
            options["bootstrap_servers"] = args.bootstrap_servers
        servers = next((v for k, v in options.items()
                        if _kafka_key(k) == "bootstrap_servers"), None)
        if not servers:
            raise CliError(f"no Kafka brokers: give --bootstrap-servers HOST:PORT (or "
                           f"bootstrap.servers in {args.kafka_config})")
        if not any(_kafka_key(k) == "connect_timeout_ms" for k in options):
            options["connect_timeout_ms"] = args.timeout_ms
        return Target("kafka", options, f"Kafka broker {servers}")
    if args.kafka_option:
        raise CliError("--kafka-option needs --bootstrap-servers")
    if not paths:
        raise CliError("no WAL given: pass the WAL folder (PATH or --path) for the file "
                       "backend, or --bootstrap-servers HOST:PORT for Kafka")
    root = Path(paths[0])
    if not root.exists():
        raise CliError(f"path {root} does not exist (the WAL root folder)")
    if not root.is_dir():
        raise CliError(f"path {root} is not a folder (the WAL root folder)")
    mistake = layout.checkpoint_given(root)
    if mistake is not None:
        raise mistake
    return Target("file", {"path": str(root)}, f"folder {root}")


def _store_class(target: Target) -> type[LogStore]:
    try:
        return store_class(target.backend)
    except ModuleNotFoundError as exc:
        if target.backend == "kafka" and (exc.name or "").split(".")[0] == "kafka":
            raise CliError("the kafka backend needs kafka-python: "
                           "pip install 'pyspark_durable[kafka]'") from None
        raise


def list_namespaces(target: Target) -> list[str]:
    return _store_class(target).list_namespaces(target.options)


def _unknown_namespace(target: Target, namespace: str, names: list[str]) -> DurableWalError:
    """Why ``namespace`` is not there, and what to give instead: a namespace given by
    default is said to be one, and a file WAL's PATH one level off gets the folder that
    holds the namespace (or what its folders are: Spark checkpoints, output, a WAL root)."""
    if target.backend == "file":
        root = Path(target.options["path"])
        names = [n for n in names if layout.wal_namespace(root / n)]
    listed = f"namespaces: {', '.join(names) or 'none'}"
    if isinstance(namespace, DefaultNamespace):
        msg = (f"unknown namespace {namespace!r} (the default: no --namespace was given): "
               f"pick one with --namespace NAME; {listed}")
    else:
        msg = f"unknown namespace {namespace!r}; {listed}"
    if target.backend != "file":
        return CliError(msg)
    if layout.wal_namespace(root):  # the namespace folder was given, not its parent
        return CliError(f"{msg} ({root} looks like a namespace folder: pass {root.parent} "
                        f"--namespace {root.name})")
    hint = layout.one_level_off(root, None if isinstance(namespace, DefaultNamespace)
                                else namespace)
    return NotAWal(f"{msg}; {hint}") if hint else CliError(msg)


def open_listed_store(target: Target, namespace: str,
                      names: list[str] | None = None) -> LogStore:
    """The store of a namespace the backend lists, which has a commits log; creates nothing.

    Does not replay the commits log, so that ``check`` can report a damaged one.
    ``names`` (the backend's namespace list) saves listing again when the caller has it.
    """
    if names is None:
        names = list_namespaces(target)
    if namespace not in names:
        raise _unknown_namespace(target, namespace, names)
    if target.backend == "file":
        folder = Path(target.options["path"]) / namespace
        kind = layout.what_it_is(folder)
        if kind is not None:  # never opened: a file log would be written into it
            raise NotAWal(f"{namespace!r} in {target.where} is {kind}: it is no namespace")
    _store_class(target)
    store = open_store(target.backend, namespace, **target.options)
    try:
        if COMMITS_LOG not in store.list_logs():
            raise CliError(f"namespace {namespace!r} is not a WAL namespace (it has no "
                           f"{COMMITS_LOG} log) in {target.where}")
    except (DurableWalError, CliError):
        store.close()
        raise
    return store


def open_existing_namespace(target: Target, namespace: str,
                            names: list[str] | None = None) -> Namespace:
    """A :class:`Namespace` over an existing namespace, opened with its own id (its
    state recovered once: on Kafka a recovery reads the snapshots and commits topics).

    ``names`` (the backend's namespace list) saves listing again when the caller has it.
    """
    store = open_listed_store(target, namespace, names)
    try:
        return Namespace(store, None, create=False)  # an empty one is LogNotFound, named
    except DurableWalError:
        store.close()
        raise
