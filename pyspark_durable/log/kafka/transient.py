"""Which Kafka failures a retry can outlast: the one table both clients classify by.

A transient failure becomes :class:`~pyspark_durable.errors.BackendUnavailable`
(retriable): the writer retries the step under the documented retry rule, the reader
asks again. Anything else is not retriable, and a refusal of the authorizer or a failed
login never is (the same request is refused again). The table is by name and number
only, so importing it needs neither client; ``tests/log/kafka/test_kafka_partitions.py``
checks it against every code librdkafka has and every class kafka-python calls retriable.
"""

from __future__ import annotations

# Kafka protocol errors (the same number in both clients) a retry can outlast: the
# broker is away, a leader or coordinator moves, a replica catches up, a quota throttles
TRANSIENT_BROKER: dict[int, str] = {
    5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_FOR_PARTITION", 7: "REQUEST_TIMED_OUT",
    9: "REPLICA_NOT_AVAILABLE", 13: "NETWORK_EXCEPTION", 14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 19: "NOT_ENOUGH_REPLICAS",
    20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 41: "NOT_CONTROLLER",
    51: "CONCURRENT_TRANSACTIONS", 56: "KAFKA_STORAGE_ERROR",
    70: "FETCH_SESSION_ID_NOT_FOUND", 71: "INVALID_FETCH_SESSION_EPOCH",
    72: "LISTENER_NOT_FOUND", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH",
    78: "OFFSET_NOT_AVAILABLE", 80: "PREFERRED_LEADER_NOT_AVAILABLE",
    83: "ELIGIBLE_LEADERS_NOT_AVAILABLE", 88: "UNSTABLE_OFFSET_COMMIT",
    89: "THROTTLING_QUOTA_EXCEEDED", 103: "INCONSISTENT_TOPIC_ID",
    106: "FETCH_SESSION_TOPIC_ID_ERROR", 122: "SHARE_SESSION_NOT_FOUND",
    123: "INVALID_SHARE_SESSION_EPOCH",
}

# errors Kafka calls retriable that durablewal does not retry, and why
NOT_RETRIED_BROKER: dict[int, str] = {
    3: "UNKNOWN_TOPIC_OR_PART: the WAL's topic is gone (LogNotFound), a retry would not "
       "bring it back",
    84: "ELECTION_NOT_NEEDED: an answer to a leader election, which durablewal never asks for",
    100: "UNKNOWN_TOPIC_ID: the topic was deleted (and maybe made again): LogNotFound",
}

# librdkafka's own (negative) codes: a broker away, a request or message timed out in
# its queues, metadata on its way, a handle torn down under a request
TRANSIENT_LOCAL: frozenset[str] = frozenset({
    "_TRANSPORT", "_RESOLVE", "_MSG_TIMED_OUT", "_ALL_BROKERS_DOWN", "_TIMED_OUT",
    "_TIMED_OUT_QUEUE", "_WAIT_COORD", "_DESTROY", "_DESTROY_BROKER", "_NODE_UPDATE",
    "_WAIT_CACHE", "_RETRY", "_ISR_INSUFF", "_QUEUE_FULL", "_IN_PROGRESS",
    "_PREV_IN_PROGRESS", "_OUTDATED", "_UNKNOWN_BROKER", "_PURGE_QUEUE", "_PURGE_INFLIGHT",
    "_INTR", "_FAIL",
})

# librdkafka's other local codes: bad input, a refused login, a client in a state a
# retry cannot leave (fatal, fenced), or no error at all (end of partition, no-op)
NOT_TRANSIENT_LOCAL: frozenset[str] = frozenset({
    "_BAD_MSG", "_BAD_COMPRESSION", "_CRIT_SYS_RESOURCE", "_PARTITION_EOF",
    "_UNKNOWN_PARTITION", "_FS", "_UNKNOWN_TOPIC", "_INVALID_ARG", "_SSL", "_UNKNOWN_GROUP",
    "_EXISTING_SUBSCRIPTION", "_ASSIGN_PARTITIONS", "_REVOKE_PARTITIONS", "_CONFLICT",
    "_STATE", "_UNKNOWN_PROTOCOL", "_NOT_IMPLEMENTED", "_AUTHENTICATION", "_NO_OFFSET",
    "_UNSUPPORTED_FEATURE", "_KEY_SERIALIZATION", "_VALUE_SERIALIZATION",
    "_KEY_DESERIALIZATION", "_VALUE_DESERIALIZATION", "_PARTIAL", "_READ_ONLY", "_NOENT",
    "_UNDERFLOW", "_INVALID_TYPE", "_FATAL", "_INCONSISTENT", "_GAPLESS_GUARANTEE",
    "_MAX_POLL_EXCEEDED", "_NOT_CONFIGURED", "_FENCED", "_APPLICATION", "_ASSIGNMENT_LOST",
    "_NOOP", "_AUTO_OFFSET_RESET", "_LOG_TRUNCATION", "_INVALID_DIFFERENT_RECORD",
})

# kafka-python's client-side exceptions (no protocol number) a retry can outlast
TRANSIENT_KAFKA_PYTHON: frozenset[str] = frozenset({
    "RetriableError", "InvalidMetadataError", "Cancelled", "KafkaConnectionError",
    "CorrelationIdError", "KafkaTimeoutError", "MetadataEmptyBrokerList", "NodeNotReadyError",
    "StaleMetadata", "TooManyInFlightRequests", "NoBrokersAvailable",
})

# refusals and failed logins: never retriable, whatever a client's own flag says
REFUSED_BROKER: dict[int, str] = {
    29: "TOPIC_AUTHORIZATION_FAILED", 30: "GROUP_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED", 33: "UNSUPPORTED_SASL_MECHANISM",
    34: "ILLEGAL_SASL_STATE", 53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    58: "SASL_AUTHENTICATION_FAILED", 61: "DELEGATION_TOKEN_AUTH_DISABLED",
    65: "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
}


def broker_code_transient(code: int) -> bool:
    """Is Kafka protocol error ``code`` (either client) one a retry can outlast?"""
    return code in TRANSIENT_BROKER


def kafka_python_transient(exc: BaseException) -> bool:
    """Is kafka-python's ``exc`` transient: by its protocol number if it has one, else by
    its class (or a base class) in :data:`TRANSIENT_KAFKA_PYTHON`."""
    errno = getattr(type(exc), "errno", None)
    if isinstance(errno, int) and errno > 0:
        return broker_code_transient(errno)
    return any(cls.__name__ in TRANSIENT_KAFKA_PYTHON for cls in type(exc).__mro__)
