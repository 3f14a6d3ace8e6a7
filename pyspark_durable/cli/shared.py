"""What every ``durablewal`` command shares: the WAL named on the command line as an
:class:`~pyspark_durable.endpoint.EndpointConfig`, opening it through
:mod:`pyspark_durable.endpoint` (never creating anything), and printing.

The command line is checked here, whole, before anything is opened: which backend and
where. Then one call into the endpoint opens what exists; the endpoint alone decides
which names are namespaces, and when it says the namespace is not there, the message
is rewritten here with what the user should give instead (what the folder of that name
is, or the folder that holds the namespace).
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyspark_durable.cli.layout as layout
from pyspark_durable.endpoint.config import (
    EndpointConfig,
    open_existing_namespace,
    open_existing_store,
    resolved_backend,
    wal_namespaces,
)
from pyspark_durable.errors import DurableWalError, NotAWal, UnknownNamespace
from pyspark_durable.log import LogStore
from pyspark_durable.log.kafka.spelling import normalize_key
from pyspark_durable.secrets import is_secret
from pyspark_durable.wal import Namespace, TableInfo

from .properties import kafka_config_file
from .render import Part, emit, emit_json

log = logging.getLogger(__name__)
DEFAULT_NAMESPACE = "default"
_NOT_IN_KEY = re.compile(r"[:\s]")  # a Kafka option's key holds neither


class CliError(Exception):
    """A user mistake the CLI reports in one line (exit code 2), never a traceback."""


class DefaultNamespace(str):
    """``--namespace``'s value when the user gave none: still the name ``default``, but
    a message about it can say that no namespace was named."""


# -- the command line as an endpoint config -------------------------------------------


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
        for old in [k for k in options if normalize_key(k) == normalize_key(key)]:
            del options[old]
        options[key] = value
    return options


def _kafka_config(args: argparse.Namespace, namespace: str) -> EndpointConfig:
    options = _kafka_options(args)
    if args.bootstrap_servers is not None:
        for old in [k for k in options if normalize_key(k) == "bootstrap_servers"]:
            del options[old]
        options["bootstrap_servers"] = args.bootstrap_servers
    if not _servers(options):
        raise CliError(f"no Kafka brokers: give --bootstrap-servers HOST:PORT (or "
                       f"bootstrap.servers in {args.kafka_config})")
    if not any(normalize_key(k) == "connect_timeout_ms" for k in options):
        options["connect_timeout_ms"] = args.timeout_ms
    return EndpointConfig("kafka", namespace, None, options)


def _servers(options: Mapping[str, Any]) -> Any:
    return next((v for k, v in options.items() if normalize_key(k) == "bootstrap_servers"), None)


def endpoint_config(args: argparse.Namespace) -> EndpointConfig:
    """The WAL chosen on the command line (a WAL folder, or a Kafka broker) and its
    namespace, opened with the id it was created with; checked before anything opens."""
    namespace = getattr(args, "namespace", DEFAULT_NAMESPACE)
    paths = [p for p in (args.path_arg, args.path) if p is not None]
    if len(paths) > 1:
        raise CliError("give the WAL folder once: as PATH or as --path, not both")
    if args.bootstrap_servers is not None or args.kafka_config is not None:
        if paths:
            raise CliError("give either a WAL folder (file backend) or --bootstrap-servers "
                           "(kafka backend), not both")
        if getattr(args, "file_access", None) is not None:
            raise CliError("--file-access is for a WAL folder (the file backend)")
        return _kafka_config(args, namespace)
    if args.kafka_option:
        raise CliError("--kafka-option needs --bootstrap-servers")
    if not paths:
        raise CliError("no WAL given: pass the WAL folder (PATH or --path) for the file "
                       "backend, s3://bucket/prefix for S3, or --bootstrap-servers "
                       "HOST:PORT for Kafka")
    backend = resolved_backend("file", {"path": paths[0]})
    access = getattr(args, "file_access", None)
    if access is not None and backend != "file":
        raise CliError("--file-access is for a WAL folder (the file backend)")
    endpoint_url = getattr(args, "endpoint_url", None)
    if backend == "s3":
        options = {"path": paths[0]}
        if endpoint_url:
            options["endpoint_url"] = endpoint_url
        return EndpointConfig("s3", namespace, None, options)
    if endpoint_url:
        raise CliError("--endpoint-url is for an s3:// PATH")
    root = Path(paths[0])
    if not root.exists():
        raise CliError(f"path {root} does not exist (the WAL root folder)")
    if not root.is_dir():
        raise CliError(f"path {root} is not a folder (the WAL root folder)")
    mistake = layout.checkpoint_given(root)
    if mistake is not None:
        raise mistake
    options = {"path": str(root)} if access is None else {"path": str(root), "access": access}
    return EndpointConfig("file", namespace, None, options)


def wal_argv(args: argparse.Namespace) -> list[str]:
    """The arguments that named the WAL and its namespace on this command line, for a
    command the output tells the user to run next."""
    paths = [p for p in (args.path_arg, args.path) if p is not None]
    if paths:
        argv = [str(paths[0])]
        if getattr(args, "endpoint_url", None):
            argv += ["--endpoint-url", args.endpoint_url]
    else:
        argv = [*(["--bootstrap-servers", args.bootstrap_servers]
                  if args.bootstrap_servers else []),
                *(["--kafka-config", args.kafka_config] if args.kafka_config else [])]
    return [*argv, "--namespace", getattr(args, "namespace", DEFAULT_NAMESPACE)]


def where(cfg: EndpointConfig) -> str:
    """How messages name the WAL: ``folder /data/wal``, ``Kafka broker host:9092``."""
    if cfg.backend == "file":
        return f"folder {cfg.options['path']}"
    if cfg.backend == "s3":
        return f"bucket location {cfg.options['path']}"
    return f"Kafka broker {_servers(cfg.options)}"


# -- opening, creating nothing ---------------------------------------------------------


def _unknown_namespace(cfg: EndpointConfig, names: list[str]) -> DurableWalError | CliError:
    """Why ``cfg``'s namespace is none of the WAL's ``names`` (the endpoint's list), and
    what to give instead: a namespace given by default is said to be one, and on a file
    WAL a folder of that name is said to be what it is (a Spark checkpoint, a WAL root),
    and a PATH one level off gets the folder that holds the namespace (or what its
    folders are: Spark checkpoints, output, a WAL root)."""
    namespace = cfg.namespace
    listed = f"namespaces: {', '.join(names) or 'none'}"
    if isinstance(namespace, DefaultNamespace):
        msg = (f"unknown namespace {namespace!r} (the default: no --namespace was given): "
               f"pick one with --namespace NAME; {listed}")
    else:
        msg = f"unknown namespace {namespace!r}; {listed}"
    if cfg.backend != "file":
        return CliError(msg)
    root = Path(cfg.options["path"])
    if layout.wal_namespace(root):  # the namespace folder was given, not its parent
        return CliError(f"{msg} ({root} looks like a namespace folder: pass {root.parent} "
                        f"--namespace {root.name})")
    kind = layout.what_it_is(root / namespace)
    if kind is not None:
        return NotAWal(f"{msg}; {namespace!r} in {where(cfg)} is {kind}: it is no namespace")
    hint = layout.one_level_off(root, None if isinstance(namespace, DefaultNamespace)
                                else namespace)
    return NotAWal(f"{msg}; {hint}") if hint else CliError(msg)


@contextmanager
def _endpoint_told(cfg: EndpointConfig) -> Iterator[None]:
    """What the endpoint raises, said in the command line's terms."""
    try:
        yield
    except UnknownNamespace as exc:
        raise _unknown_namespace(cfg, exc.names) from None
    except ModuleNotFoundError as exc:
        if cfg.backend == "kafka" and (exc.name or "").split(".")[0] == "kafka":
            raise CliError("the kafka backend needs kafka-python: "
                           "pip install 'pyspark_durable[kafka]'") from None
        raise


def namespaces_of(cfg: EndpointConfig) -> list[str]:
    """The namespaces the WAL where ``cfg`` points holds, as the endpoint judges them
    (:func:`~pyspark_durable.endpoint.config.wal_namespaces`)."""
    with _endpoint_told(cfg):
        return wal_namespaces(cfg)


def open_namespace(cfg: EndpointConfig, names: list[str] | None = None) -> Namespace:
    """The existing namespace of ``cfg``, its state recovered; ``names`` (what
    :func:`namespaces_of` gave) saves listing again when the caller has it."""
    with _endpoint_told(cfg):
        return open_existing_namespace(cfg, names)


def open_store(cfg: EndpointConfig) -> LogStore:
    """The store of the existing namespace of ``cfg``, its commits log not replayed (so
    that ``check`` can report a damaged one)."""
    with _endpoint_told(cfg):
        return open_existing_store(cfg)


@contextmanager
def opened_namespace(args: argparse.Namespace) -> Iterator[Namespace]:
    """The namespace named on the command line, closed on leaving."""
    ns = open_namespace(endpoint_config(args))
    try:
        yield ns
    finally:
        ns.close()


# -- printing ------------------------------------------------------------------------


def output(args: argparse.Namespace, doc: Any, *parts: Part) -> None:
    """``doc`` as JSON with ``--json``, else the parts: lines of text and tables."""
    if args.json:
        emit_json(doc)
    else:
        emit(*parts)


def table_name(tables: Mapping[int, TableInfo], table_id: int) -> str:
    """A table as listings show it: its name, or its id when the table is unknown."""
    info = tables.get(table_id)
    return info.name if info is not None else str(table_id)
