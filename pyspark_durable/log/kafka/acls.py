"""The Kafka rights (ACLs) each role of a namespace needs, and the right behind each request.

A namespace's topics all start with ``{namespace}_``, so every right is one PREFIXED ACL
on that prefix (the prefix also covers namespace ``{namespace}_x``: give namespaces names
no other namespace's name plus ``_`` starts). The roles are cumulative: a writer has the
reader's rights, and so on. Measured on Apache Kafka's StandardAuthorizer
(``tests/log/kafka/test_kafka_acls.py``), on both clients:

* **reader**: READ and DESCRIBE (fetch, ListOffsets, metadata) and DESCRIBE_CONFIGS
  (the retention check of ``durablewal check``). A reader writes nothing. One that
  registers its position (``readerId``) appends to the commits log: it needs WRITE
  on ``{namespace}_commits`` (a LITERAL ACL suffices).
* **writer**: + WRITE. An idempotent producer needs no IDEMPOTENT_WRITE on the cluster
  since Kafka 3.0 (WRITE on any topic allows it, KIP-679); older brokers want it.
* **cleaner**: + DELETE (DeleteRecords below what every step still needs).
* **admin**: + CREATE and ALTER_CONFIGS: creates the topics, and sets the WAL's
  retention settings on an empty topic that lacks them. Without it, topics are
  pre-created (:func:`topic_specs`) and the other roles never create anything.

No role needs a consumer-group ACL: readers use assign()/seek() and no ``group.id``.

:func:`right_for` maps a refused request (what the code was doing) to the operation and
resource that would grant it; the clients' error translation builds
:class:`~pyspark_durable.errors.AccessDenied` from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from pyspark_durable.errors import AccessDenied, ConfigError
from pyspark_durable.log.kafka.topics import LOG_TOPIC_CONFIG, SNAPSHOTS, SNAPSHOTS_TOPIC_CONFIG

ROLES = ("reader", "writer", "cleaner", "admin")
TOPIC_RIGHTS: dict[str, tuple[str, ...]] = {
    "reader": ("READ", "DESCRIBE", "DESCRIBE_CONFIGS"),
    "writer": ("READ", "DESCRIBE", "DESCRIBE_CONFIGS", "WRITE"),
    "cleaner": ("READ", "DESCRIBE", "DESCRIBE_CONFIGS", "WRITE", "DELETE"),
    "admin": ("READ", "DESCRIBE", "DESCRIBE_CONFIGS", "WRITE", "DELETE", "CREATE",
              "ALTER_CONFIGS"),
}
# what the code was doing when the broker refused -> the topic operation that grants it
OPERATIONS: dict[str, str] = {
    "append": "WRITE",
    "creating topic": "CREATE",
    "replacing an auto-created topic": "DELETE",
    "deleting a topic": "DELETE",
    "DeleteRecords": "DELETE",
    "describing topic configs": "DESCRIBE_CONFIGS",
    "altering topic configs": "ALTER_CONFIGS",
    "fetching": "READ",
    "reading topic": "READ",
    "seeking": "READ",
    "reading watermarks": "DESCRIBE",
    "reading end offsets": "DESCRIBE",
    "describing topic": "DESCRIBE",
    "listing topics": "DESCRIBE",
}


class Right(NamedTuple):
    """One ACL: ``operation`` on ``resource`` (TOPIC or CLUSTER) named ``name`` by
    ``pattern`` (PREFIXED or LITERAL)."""

    operation: str
    resource: str = "TOPIC"
    pattern: str = "PREFIXED"
    name: str = ""

    def describe(self) -> str:
        if self.resource == "CLUSTER":
            return f"ALLOW {self.operation} on the cluster"
        return f"ALLOW {self.operation} on {self.pattern} topic {self.name!r}"


def prefix_of(namespace: str) -> str:
    return f"{namespace}_"


def role_rights(namespace: str, role: str, position_log: str | None = None) -> list[Right]:
    """The ACLs of ``role`` on ``namespace``; with ``position_log`` (the WAL's commits
    log) a reader may also append its position (``readerId``) to that log's topic."""
    if role not in TOPIC_RIGHTS:
        raise ConfigError(f"role {role!r} is unknown; roles: {', '.join(ROLES)}")
    rights = [Right(op, name=prefix_of(namespace)) for op in TOPIC_RIGHTS[role]]
    if position_log is not None and "WRITE" not in TOPIC_RIGHTS[role]:
        rights.append(Right("WRITE", pattern="LITERAL", name=f"{namespace}_{position_log}"))
    return rights


def right_for(what: str, topic: str | None, namespace: str | None) -> Right:
    """The topic right a request refused by the broker needed (``what`` the code was
    doing, longest known prefix); DESCRIBE when ``what`` is none of them."""
    known = [k for k in OPERATIONS if what.startswith(k)]
    operation = OPERATIONS[max(known, key=len)] if known else "DESCRIBE"
    if namespace is not None:
        return Right(operation, name=prefix_of(namespace))
    return Right(operation, pattern="LITERAL", name=str(topic or "*"))


# librdkafka's and kafka-python's names of the broker's refusals
TOPIC_REFUSED = "TOPIC_AUTHORIZATION_FAILED"
CLUSTER_REFUSED = "CLUSTER_AUTHORIZATION_FAILED"
GROUP_REFUSED = "GROUP_AUTHORIZATION_FAILED"
REFUSALS = (TOPIC_REFUSED, CLUSTER_REFUSED, GROUP_REFUSED)


def access_denied(refusal: str, what: str, address: str, principal: str, detail: str,
                  group: str | None = None, **where: Any) -> AccessDenied:
    """The typed error of a refused request: principal, topic, operation, and the ACL
    (a ``kafka-acls.sh`` line) that grants it. ``where`` names the topic, or the
    namespace and log whose topic it is."""
    namespace = where.get("namespace")
    topic = where.get("topic") or (f"{namespace}_{where['log']}"
                                   if namespace is not None and "log" in where else None)
    if refusal == GROUP_REFUSED:
        acl = (f"kafka-acls.sh --bootstrap-server {address} --add --allow-principal "
               f"{principal} --operation Describe --group {group}")
        return AccessDenied(
            f"{what}: Kafka broker {address} refused {principal} DESCRIBE on consumer group "
            f"{group!r} ({refusal}: {detail}); librdkafka asks for the coordinator of the "
            f"group its consumers are configured with, never joined. Grant: {acl}",
            principal=principal, operation="DESCRIBE", resource=f"group {group}", **where)
    right = right_for(what, topic, namespace)
    fix = acl_command(right, principal, address)
    resource = f"topic {topic}" if topic else "the cluster"
    if refusal == CLUSTER_REFUSED and right.operation == "WRITE":
        cluster = Right("IDEMPOTENT_WRITE", resource="CLUSTER")
        detail += (" (an idempotent producer's id: WRITE on any topic grants it on Kafka 3.0 "
                   f"and later; older brokers want {cluster.describe()})")
    alone = ""
    if topic and right.pattern == "PREFIXED":
        alone = f", or on LITERAL topic {topic!r} for this topic alone"
    consequence = ""
    if right.operation == "DESCRIBE_CONFIGS":
        consequence = (f"; the retention settings of topic {topic} cannot be checked (the "
                       "WAL refuses to write where the broker might delete its records)")
    return AccessDenied(
        f"{what}: Kafka broker {address} refused {principal} {right.operation} on "
        f"{resource} ({refusal}: {detail}){consequence}. The ACL that grants it: "
        f"{right.describe()}{alone} ({fix}); not retried",
        principal=principal, operation=right.operation, resource=resource, **where)


def principal_of(config: Mapping[str, Any]) -> str:
    """The principal a client config logs in as (``User:name``), as far as it tells."""
    for key in ("sasl_plain_username", "sasl.username", "sasl_username"):
        if config.get(key):
            return f"User:{config[key]}"
    protocol = str(config.get("security_protocol") or config.get("security.protocol")
                   or "PLAINTEXT").upper()
    if protocol == "SSL":
        return "the TLS client certificate's principal"
    return "User:ANONYMOUS" if protocol == "PLAINTEXT" else "the client's principal"


def acl_command(right: Right, principal: str, bootstrap: str) -> str:
    """The ``kafka-acls.sh`` line that grants ``right`` to ``principal``."""
    return acl_commands([right], principal, bootstrap)[0]


def acl_commands(rights: Sequence[Right], principal: str, bootstrap: str,
                 command_config: str | None = None) -> list[str]:
    """``kafka-acls.sh`` lines granting ``rights`` to ``principal``: one per resource
    pattern, with an ``--operation`` per right."""
    by_target: dict[str, list[str]] = {}
    for right in rights:
        if right.resource == "CLUSTER":
            target = "--cluster"
        else:
            target = f"--topic {right.name} --resource-pattern-type {right.pattern.lower()}"
        by_target.setdefault(target, []).append(right.operation)
    config = f" --command-config {command_config}" if command_config else ""
    return [f"kafka-acls.sh --bootstrap-server {bootstrap}{config} --add --allow-principal "
            f"{principal} " + " ".join(f"--operation {_cli_operation(op)}" for op in ops)
            + f" {target}" for target, ops in by_target.items()]


def _cli_operation(operation: str) -> str:
    """kafka-acls.sh spells operations in CamelCase (DescribeConfigs)."""
    return "".join(part.capitalize() for part in operation.split("_"))


def topic_specs(namespace: str, logs: Sequence[str],
                extra: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Each topic of the namespace with the configs it must be created with (one
    partition each): the logs' topics and the snapshots topic."""
    extra = dict(extra or {})
    specs = {f"{namespace}_{name}": {**LOG_TOPIC_CONFIG, **extra} for name in logs}
    specs[f"{namespace}_{SNAPSHOTS}"] = {**SNAPSHOTS_TOPIC_CONFIG, **extra}
    return specs


def topic_command(topic: str, configs: Mapping[str, str], bootstrap: str,
                  replication_factor: int = -1, command_config: str | None = None) -> str:
    """The ``kafka-topics.sh`` line that creates ``topic`` as the WAL would."""
    replication = "" if replication_factor == -1 else f" --replication-factor {replication_factor}"
    config = f" --command-config {command_config}" if command_config else ""
    return (f"kafka-topics.sh --bootstrap-server {bootstrap}{config} --create --topic {topic} "
            f"--partitions 1{replication} "
            + " ".join(f"--config {k}={v}" for k, v in configs.items()))
