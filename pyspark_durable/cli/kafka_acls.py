"""``durablewal kafka acls``: the ACLs and topics a platform team creates for a namespace.

Prints, without connecting to any broker, the ``kafka-acls.sh`` lines that grant a
principal one role on the namespace (rights per role: :mod:`pyspark_durable.log.kafka.acls`)
and the ``kafka-topics.sh`` lines that create its topics with the configs the WAL
needs (one partition, no broker-side retention). With the topics made by an admin,
the other roles never need CREATE.
"""

from __future__ import annotations

import argparse
from typing import Any

from pyspark_durable.log import region_log_name
from pyspark_durable.log.base import check_name
from pyspark_durable.log.kafka.acls import (
    ROLES,
    acl_commands,
    role_rights,
    topic_command,
    topic_specs,
)
from pyspark_durable.wal.ledger import COMMITS_LOG

from .render import emit, emit_json

HELP = "print the ACLs of a role on a namespace, and its topics, for Kafka's own tools"


def add_action(actions: Any) -> None:
    """The ``acls`` action of the ``kafka`` command (:mod:`.kafka`)."""
    a = actions.add_parser("acls", help=HELP, description=HELP)
    a.add_argument("--namespace", required=True, help="the namespace")
    a.add_argument("--principal", required=True, metavar="User:NAME",
                   help="the principal to grant the role to (User:name)")
    a.add_argument("--role", required=True, choices=ROLES,
                   help="reader: read; writer: + write; cleaner: + delete records; "
                        "admin: + create topics and set their configs")
    a.add_argument("--reader-id", action="store_true",
                   help="a reader that registers its position (readerId): + WRITE on the "
                        "commits topic")
    a.add_argument("--regions", type=int, default=1, metavar="N",
                   help="region logs to create topics for: region_0 .. region_{N-1} "
                        "(default %(default)s)")
    a.add_argument("--bootstrap-servers", default="BROKER:9092", metavar="HOST:PORT",
                   help="put in the printed lines (default %(default)s)")
    a.add_argument("--command-config", metavar="FILE",
                   help="the admin's client settings, put in the printed lines")
    a.add_argument("--replication-factor", type=int, default=-1,
                   help="of the topics (default: the broker's)")
    a.add_argument("--json", action="store_true", help="print one JSON document")
    a.set_defaults(handler=cmd_acls, parser=a, verbose=0)


def cmd_acls(args: argparse.Namespace) -> int:
    namespace = check_name("namespace", args.namespace)
    if args.regions < 0:
        args.parser.error(f"--regions {args.regions}: give 0 or more")
    if not args.principal.count(":") or args.principal.startswith(":"):
        args.parser.error(f"--principal {args.principal!r}: give TYPE:NAME, e.g. User:alice")
    rights = role_rights(namespace, args.role, COMMITS_LOG if args.reader_id else None)
    acls = acl_commands(rights, args.principal, args.bootstrap_servers, args.command_config)
    specs = topic_specs(namespace, [COMMITS_LOG, *map(region_log_name, range(args.regions))])
    topics = [topic_command(t, c, args.bootstrap_servers, args.replication_factor,
                            args.command_config) for t, c in specs.items()]
    if args.json:
        emit_json({"namespace": namespace, "principal": args.principal, "role": args.role,
                   "acls": [r._asdict() for r in rights], "acl_commands": acls,
                   "topics": specs, "topic_commands": topics})
        return 0
    emit(f"# {args.principal} as {args.role} of namespace {namespace}: "
         f"{'; '.join(r.describe() for r in rights)}")
    for line in acls:
        emit(line)
    emit(f"# the namespace's topics (once, by an admin; each has 1 partition and keeps "
         f"records until the WAL deletes them; more regions: {namespace}_region_N alike)")
    for line in topics:
        emit(line)
    return 0
