"""``durablewal``: look into a WAL, verify it, clean it, run the demo.

::

    durablewal namespaces /data/wal
    durablewal tables /data/wal --namespace orders
    durablewal steps --bootstrap-servers broker:9092 --namespace orders --limit 20
    durablewal tail /data/wal --table orders -n 10
    durablewal tail /data/wal --table orders --format jsonl --follow --from-step 42
    durablewal check /data/wal --namespace orders        # exit 1 lists every problem
    durablewal clean /data/wal --grace-ms 0 --json
    durablewal retention /data/wal --namespace orders --max-steps 1000
    durablewal backup /data/wal --namespace orders /backup/wal-2026-01-01
    durablewal kafka start --sasl                        # a local broker; kafka stop ends it

The WAL is a folder (file backend: ``PATH`` or ``--path``) or a Kafka cluster
(``--bootstrap-servers``; client settings such as SASL credentials from a properties
file, ``--kafka-config client.properties``, as Kafka's tools take ``--command-config``).
Commands only read, except ``clean``, ``repair`` and ``retention`` with a setting (``backup``
writes only its copy); none creates a namespace. ``--json`` prints one JSON document instead of tables.

Tables are aligned plain text when piped, styled on a terminal (no colours with
``NO_COLOR``); ``check``, ``clean``, ``tail`` and ``namespaces`` draw progress bars on
stderr when it is a terminal and ``--json`` is not given.

Exit codes: 0 done, 1 ``check`` found problems, 2 bad input or an error (one line
on stderr, red on a terminal: a missing folder, an unknown namespace or table, an
unreachable broker, corrupt data). Unexpected exceptions are bugs and keep their traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from pyspark_durable.errors import DecodeError, DurableWalError
from pyspark_durable.secrets import RedactingFilter
from pyspark_durable.wal.upkeep.cleaner import DEFAULT_GRACE_MS

from . import commands, follow, kafka, maintain, render
from .shared import DEFAULT_NAMESPACE, CliError, DefaultNamespace

PROG = "durablewal"
# top-level --help: how to point any command at a WAL (the subcommands' options say it
# only after the user picked one)
WHERE = """\
Point any command at a WAL, on files or on Kafka:
  durablewal COMMAND PATH [--namespace NS]              the WAL root folder (file log),
                                                        the folder given to .save(path)
  durablewal COMMAND --bootstrap-servers HOST:PORT [--namespace NS]
                                                        a WAL in Kafka (SASL/TLS settings:
                                                        --kafka-config client.properties)
Start with: durablewal namespaces PATH   (--namespace defaults to 'default')"""
CHECK_TERMS = """\
terms in the report:
  needed step  a committed step whose entries must still be readable: retained by the
               retention policy, or holding rows of a table that has not moved past them
  run          the entries of one step for one table in one region: a range of region
               offsets the step's commit record names, each one checked entry by entry"""
DEFAULT_TIMEOUT_MS = 5000


def _count(value: str) -> int:
    """argparse type: a non-negative integer."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return n


def _positive(value: str) -> int:
    n = _count(value)
    if n == 0:
        raise argparse.ArgumentTypeError("must be positive")
    return n


def _limit(value: str) -> int:
    """argparse type of a retention limit: a positive integer. Many tools read 0 as
    unlimited; here a limit of 0 would expire every step at the next cleaner pass."""
    keep = "to keep everything, leave the limit out, or give --clear to remove both limits"
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n == 0:
        raise argparse.ArgumentTypeError(
            f"0 would expire every step at the next clean (0 is not 'no limit'): {keep}")
    if n < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative (-1 is not 'no limit'): {keep}")
    return n


def _backend_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("where the WAL is")
    g.add_argument("path_arg", nargs="?", metavar="PATH",
                   help="the WAL root: a folder (file backend) or s3://bucket/prefix (s3 "
                        "backend, credentials from the AWS chain: AWS_ACCESS_KEY_ID..., "
                        "AWS_PROFILE, roles)")
    g.add_argument("--path", help="the WAL root, same as PATH")
    g.add_argument("--endpoint-url", metavar="URL",
                   help="an S3-compatible server for an s3:// PATH (else AWS_ENDPOINT_URL, "
                        "else AWS)")
    g.add_argument("--bootstrap-servers", metavar="HOST:PORT",
                   help="Kafka bootstrap servers (kafka backend)")
    g.add_argument("--kafka-config", metavar="FILE",
                   help="Kafka client settings from a Java properties file, like Kafka "
                        "tools' --command-config (security.protocol, sasl.mechanism, "
                        "sasl.jaas.config, ssl.cafile...: keep secrets there, not on "
                        "the command line); may hold bootstrap.servers")
    g.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a Kafka client option passed through (repeatable; overrides "
                        "--kafka-config; not for secrets)")
    g.add_argument("--file-access", choices=("private", "group"),
                   help="file backend: the mode of the folders and files a command makes "
                        "(lock files, a clean's snapshot): private, 0700/0600 (the "
                        "default), or group, 0750/0640; check warns about wider ones")
    g.add_argument("--timeout-ms", type=_positive, default=DEFAULT_TIMEOUT_MS,
                   help="give up on an unreachable broker after this long "
                        "(connect_timeout_ms; default %(default)s)")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print one JSON document")
    o.add_argument("-v", "--verbose", action="count", default=0,
                   help="log what the WAL does (-vv: and the Kafka client)")
    return p


def _namespace_option() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--namespace", default=DefaultNamespace(DEFAULT_NAMESPACE),
                   help="namespace (default %(default)s)")
    return p


AddCommand = Callable[..., argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Inspect, verify and clean a pyspark_durable WAL.\n\n" + WHERE,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # --version on one line
        epilog="Exit codes: 0 done, 1 check found problems, 2 bad input or error.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    backend, namespace = _backend_options(), _namespace_option()

    def add(name: str, handler: object, help_: str, ns: bool = True,
            epilog: str | None = None) -> argparse.ArgumentParser:
        parents = [backend, namespace] if ns else [backend]
        p = sub.add_parser(name, parents=parents, help=help_, description=help_, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(handler=handler, parser=p)
        return p

    _add_reading_commands(add)  # in this order in --help
    _add_maintenance_commands(add)
    kafka.add_parser(sub)
    p = sub.add_parser("demo", add_help=False, help="run the demo (arguments pass through)",
                       description="Run pyspark_durable.showcase.demo; every argument passes through.")
    p.set_defaults(handler=commands.cmd_demo)
    return parser


def _add_reading_commands(add: AddCommand) -> None:
    """The commands that only read a WAL: what it holds, and how far readers lag."""
    p = add("namespaces", commands.cmd_namespaces, "list namespaces", ns=False)
    p.add_argument("--names-only", action="store_true",
                   help="names only (no summary: faster on a cluster with many namespaces)")
    add("regions", commands.cmd_regions, "regions with watermarks and tables")
    add("tables", commands.cmd_tables,
        "tables with schema, rows and sequence range [first, next) of retained steps")
    p = add("steps", commands.cmd_steps, "committed steps: writer, rows, bytes, commit time")
    p.add_argument("--from", dest="start", type=_count, metavar="STEP",
                   help="first step to show")
    p.add_argument("--to", dest="stop", type=_count, metavar="STEP",
                   help="show steps below this one")
    p.add_argument("--limit", type=_count, metavar="N",
                   help="at most N steps: the first ones with --from, else the latest "
                        f"(default: the newest {commands.STEPS_SHOWN} unless --from, --to "
                        "or --all)")
    p.add_argument("--all", action="store_true", help="every retained step")
    p = add("lag", maintain.cmd_lag, "per registered reader (readerId): steps, rows, bytes and "
            "seconds behind the WAL's end")
    p.add_argument("--format", choices=("text", "json", "prometheus"), default="text",
                   help="json: as --json; prometheus: Prometheus's text exposition format, for "
                        "a node exporter's textfile collector (default %(default)s)")
    p = add("tail", commands.cmd_tail, "the last rows of a table")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--table", help="table name (always a name, even if it looks like a "
                                       "number)")
    which.add_argument("--table-id", type=_count, metavar="ID",
                       help="table id (a table created by id, or from a numeric name by an "
                            "older version)")
    p.add_argument("-n", type=_count, default=10, help="rows to show (default %(default)s)")
    p.add_argument("--since", metavar="TIME",
                   help="only steps committed at or after TIME: ms since the epoch or ISO-8601 "
                        "(no zone: UTC), e.g. 2026-01-01T12:00:00Z")
    _add_stream_options(p)


def _add_stream_options(p: argparse.ArgumentParser) -> None:
    """``tail``'s machine formats and ``--follow`` (pyspark_durable.cli.follow)."""
    g = p.add_argument_group("streaming (docs/cli.md, \"Following a table\")")
    g.add_argument("--format", choices=("text", "jsonl", "arrow"), default="text",
                   help="jsonl: one JSON object per row with _step, _region, _sequence, _row "
                        "and _step_end; arrow: an Arrow IPC stream, one batch per step "
                        "(default %(default)s)")
    g.add_argument("-f", "--follow", action="store_true",
                   help="keep writing rows as steps commit, until SIGINT/SIGTERM or a closed "
                        "stdout (needs --format jsonl or arrow)")
    start = g.add_mutually_exclusive_group()
    start.add_argument("--from-step", type=_count, metavar="STEP",
                       help="start at this step (a consumer restarts at its last complete "
                            "step + 1); instead of the last -n rows")
    start.add_argument("--from-time", metavar="TIME",
                       help="start at the first step committed at or after TIME (ms since "
                            "the epoch or ISO-8601, no zone: UTC), as startingTimestamp")
    g.add_argument("--poll-ms", type=_positive, default=follow.DEFAULT_POLL_MS,
                   help="with --follow: look for new steps this often (default %(default)s)")


def _add_maintenance_commands(add: AddCommand) -> None:
    """The commands that verify, change or copy a WAL: check, clean, repair, backup and
    retention."""
    p = add("check", maintain.cmd_check,
            "verify CRCs, sequences, steps and the snapshot; exit 1 listing every problem",
            epilog=CHECK_TERMS)
    p.add_argument("--deep", action="store_true",
                   help="also re-hash every entry of the needed steps against the content "
                        "digest its step committed")
    p = add("clean", maintain.cmd_clean,
            "run one cleaner pass and report what it freed")
    p.add_argument("--grace-ms", type=_count, default=DEFAULT_GRACE_MS,
                   help="keep entries younger than this, for attempts still in flight "
                        "(default %(default)s)")
    add("repair", maintain.cmd_repair,
        "record the steps check finds lost as lost (their reads then say so), rewrite "
        "damaged snapshots; idempotent")
    p = add("backup", maintain.cmd_backup,
            "copy a file-log namespace to DEST while writers, readers and cleaners run; "
            "the copy is checked, then opens as a WAL (give DEST as its path)",
            epilog="DEST must be new or an empty folder; the copy is written to DEST.partial "
                   "and renamed to DEST once checked. S3 and Kafka are refused: see "
                   "docs/operations.md, \"Back up and restore\".")
    p.add_argument("dest", metavar="DEST",
                   help="the new WAL root of the copy (DEST/NAMESPACE/...)")
    p.set_defaults(intermixed=True)  # PATH and DEST may sit on either side of options
    p = add("retention", maintain.cmd_retention,
            "show or set the retention policy every cleaner applies, and the readers")
    p.add_argument("--max-steps", type=_limit, metavar="N",
                   help="keep at most N newest steps (N >= 1; no limit: leave it out, or --clear)")
    p.add_argument("--max-age-ms", type=_limit, metavar="MS",
                   help="expire steps committed longer ago than MS (MS >= 1; no limit: leave "
                        "it out, or --clear)")
    p.add_argument("--clear", action="store_true", help="keep everything (no limits)")
    p.add_argument("--drop-reader", action="append", metavar="ID",
                   help="forget a reader, so it no longer holds retention (repeatable)")


class _StderrHandler(logging.Handler):
    """Log lines as ``durablewal: warning: ...`` on the *current* sys.stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(f"{PROG}: {record.levelname.lower()}: {record.getMessage()}\n")
        except Exception:  # noqa: BLE001 - logging must never fail the command
            self.handleError(record)


@contextmanager
def _logging(verbose: int) -> Iterator[None]:
    """Our warnings as one line each; the Kafka client's chatter only with ``-vv``.

    kafka-python logs every refused connection; without this, Python's last-resort
    handler would print those lines around the one-line error the user should see.
    Every line printed is scrubbed of secrets on the handler itself, whichever logger
    made it (a client's logger created after the clients' filters were installed, or
    kafka-python's configuration at DEBUG).
    """
    handler = _StderrHandler(logging.DEBUG if verbose > 1 else
                             logging.INFO if verbose else logging.WARNING)
    handler.addFilter(RedactingFilter())
    root, kafka = logging.getLogger(), logging.getLogger("kafka")
    saved = root.level, kafka.level
    root.addHandler(handler)
    if verbose:
        root.setLevel(min(root.level or logging.WARNING, handler.level))
    if verbose < 2:
        kafka.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        kafka.setLevel(saved[1])


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in text:
        text += f": {exc.filename}"
    return text


def _version() -> str:
    """``durablewal 0.1.0 (pyspark 4.3.0, pyarrow 21.0.0, kafka clients: ...)``."""
    from importlib.metadata import PackageNotFoundError, version

    from pyspark_durable import __version__

    def of(dist: str) -> str | None:
        try:
            return version(dist)
        except PackageNotFoundError:
            return None

    parts = [f"{d} {v}" for d in ("pyspark", "pyarrow") if (v := of(d))]
    clients = [f"{d} {v}" for d in ("confluent-kafka", "kafka-python") if (v := of(d))]
    parts.append("kafka clients: " + (", ".join(clients) or "none installed"))
    return f"{PROG} {__version__} ({'; '.join(parts)})"


def _unrecognized(sub: argparse.ArgumentParser, extra: Sequence[str]) -> str:
    """``unrecognized arguments: --namspace (did you mean --namespace?)``."""
    import difflib

    # argparse lists a parser's flags only in _actions
    flags = [s for a in sub._actions for s in a.option_strings if s.startswith("--")]  # noqa: SLF001
    notes = []
    for arg in extra:
        close = difflib.get_close_matches(arg.split("=", 1)[0], flags, n=1, cutoff=0.6)
        if arg.startswith("-") and close:
            notes.append(f"{arg} (did you mean {close[0]}?)")
        else:
            notes.append(arg)
    return "unrecognized arguments: " + " ".join(notes)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``durablewal`` and ``python -m pyspark_durable``; returns the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "intermixed", False):
        # two positionals (PATH, DEST) with options between them: argparse's plain parse
        # gives the first one it meets to DEST and leaves the second over
        given = list(sys.argv[1:] if argv is None else argv)
        sub = given[given.index(args.command) + 1:]
        command = args.command
        args, extra = args.parser.parse_intermixed_args(sub), []
        args.command = command
    if args.command == "demo":
        args.demo_args = extra
        args.verbose = 0
    elif extra:
        args.parser.error(_unrecognized(args.parser, extra))  # the subcommand's usage
    with _logging(args.verbose):
        try:
            return args.handler(args)
        except BrokenPipeError:
            # the reader went away (| head): no message; keep the exit from writing again
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            return 141  # 128 + SIGPIPE, as a shell reports it
        except KeyboardInterrupt:
            sys.stderr.write(f"{PROG}: interrupted\n")
            return 130
        except (DurableWalError, CliError, OSError) as exc:
            msg = _one_line(exc)
            if isinstance(exc, DecodeError) and args.command != "check":
                msg += f" (run '{PROG} check' for a full report)"
            render.error(f"{PROG}: error: {msg}")
            return 2


__all__ = ["build_parser", "main"]
