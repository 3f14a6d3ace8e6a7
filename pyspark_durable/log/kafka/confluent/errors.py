"""librdkafka's failures as this package's typed errors: one error (:func:`typed`), a
block of client calls (:func:`translated`), a client refused as it is built
(:func:`build`).

Which codes a retry can outlast is the one table both clients classify by
(:mod:`~pyspark_durable.log.kafka.transient`), here as librdkafka's numbers
(:data:`RETRIABLE`); a refusal of the authorizer names the ACL it lacks
(:mod:`~pyspark_durable.log.kafka.acls`), and a failure that says a broker is away
names which brokers answer (:mod:`~pyspark_durable.log.kafka.probe`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from pyspark_durable.errors import (
    BackendUnavailable,
    ConfigError,
    DurableWalError,
    LogNotFound,
    OffsetOutOfRange,
)
from pyspark_durable.log.kafka.acls import (
    CLUSTER_REFUSED,
    GROUP_REFUSED,
    TOPIC_REFUSED,
    access_denied,
)
from pyspark_durable.log.kafka.auth import authentication_failed
from pyspark_durable.log.kafka.confluent.config import READER_GROUP
from pyspark_durable.log.kafka.probe import broker_reachability, brokers_answer
from pyspark_durable.log.kafka.transient import REFUSED_BROKER, TRANSIENT_BROKER, TRANSIENT_LOCAL

# the transient codes of the one table (transient.py), as librdkafka's numbers
RETRIABLE = frozenset({*TRANSIENT_BROKER, *(getattr(KafkaError, n) for n in TRANSIENT_LOCAL
                                          if hasattr(KafkaError, n))})
OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
AUTH_FAILED = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}


def error_of(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


RETRY_BACKOFF_S = 0.2
# consumer events librdkafka recovers from by itself (a broker gone, a leader moved)
TRANSIENT_FETCH = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._DESTROY_BROKER,
                   KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                   KafkaError.NETWORK_EXCEPTION, KafkaError._RESOLVE}
NOT_ENOUGH_REPLICAS = {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
# failures whose message names which brokers answer (all of them transient)
BROKER_DOWN = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
               KafkaError._TIMED_OUT_QUEUE, KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT,
               KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
               KafkaError.NETWORK_EXCEPTION, KafkaError._DESTROY_BROKER,
               KafkaError.OFFSET_NOT_AVAILABLE}  # a new leader's high watermark lags


REFUSED = {KafkaError.TOPIC_AUTHORIZATION_FAILED: TOPIC_REFUSED,
           KafkaError.CLUSTER_AUTHORIZATION_FAILED: CLUSTER_REFUSED,
           KafkaError.GROUP_AUTHORIZATION_FAILED: GROUP_REFUSED}


def typed(err: KafkaError, what: str, address: str, principal: str | None = None,
          **where: Any) -> DurableWalError:
    """One librdkafka error as this package's typed error, naming the broker (and for a
    refusal of the authorizer, ``principal``)."""
    code = err.code()
    if code in REFUSED:
        return access_denied(REFUSED[code], what, address, principal or "the client's principal",
                             err.str(), group=READER_GROUP, **where)
    if code in AUTH_FAILED:
        return authentication_failed(address, {}, f"{what}: {err.str()}", **where)
    if code in OUT_OF_RANGE:
        return OffsetOutOfRange(f"{what}: broker {address} has no such offset: {err.str()}",
                                **where)
    if code == KafkaError.MSG_SIZE_TOO_LARGE:
        return ConfigError(f"{what}: entry too large for broker {address} ({err.str()}); raise "
                           "message.max.bytes and the topic's max.message.bytes", **where)
    if code in (KafkaError._INVALID_ARG, KafkaError.INVALID_CONFIG):
        return ConfigError(f"{what}: invalid kafka client option: {err.str()}", **where)
    if code in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC) \
            and not brokers_answer(address):
        # librdkafka's own verdict from a metadata cache it could not fill: no broker
        # answered, so nothing is known of the topic (a reset link, not a deleted topic)
        return BackendUnavailable(f"{what}: Kafka broker {address} failed: {err.name()}: "
                                  f"{err.str()} ({broker_reachability(address)})", **where)
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                KafkaError._UNKNOWN_TOPIC):
        return LogNotFound(f"{what}: the topic is gone from Kafka broker {address} (deleted, "
                           f"or the broker lost it): {err.str()}", **where)
    msg = f"{what}: Kafka broker {address} failed: {err.name()}: {err.str()}"
    if code in NOT_ENOUGH_REPLICAS:
        msg += (" (not enough in-sync replicas for acks=all, the topic's min.insync.replicas; "
                f"{broker_reachability(address)})")
    elif code in BROKER_DOWN:
        msg += f" ({broker_reachability(address)})"
    # librdkafka's own flag (a request it gave up on) too, but never for a refusal
    if code in RETRIABLE or (err.retriable() and code not in REFUSED_BROKER):
        return BackendUnavailable(msg, **where)
    return DurableWalError(msg, **where)


@contextmanager
def translated(what: str, address: str, principal: str | None = None,
                  **where: Any) -> Iterator[None]:
    """Turn confluent-kafka errors into this package's typed errors, naming the broker."""
    try:
        yield
    except DurableWalError:
        raise
    except KafkaException as exc:
        err = error_of(exc)
        if err is None:
            raise DurableWalError(f"{what}: Kafka client failed: {exc}", **where) from exc
        raise typed(err, what, address, principal, **where) from exc
    except (ValueError, TypeError) as exc:  # librdkafka refusing a property or its value
        raise ConfigError(f"{what}: invalid kafka client option: {exc}", **where) from exc
    except (OSError, TimeoutError) as exc:
        raise BackendUnavailable(f"{what}: Kafka broker {address} unreachable: {exc} "
                                 f"({broker_reachability(address)})", **where) from exc


def build(kind: type, config: Mapping[str, Any], what: str, address: str, **where: Any) -> Any:
    """A librdkafka client; a property it does not know is a ConfigError naming it."""
    try:
        return kind(dict(config))
    except KafkaException as exc:
        err = error_of(exc)
        text = err.str() if err is not None else str(exc)
        raise ConfigError(f"{what}: librdkafka refused the options: {text} (kafka backend "
                          "options are librdkafka properties, dotted or with '_', plus "
                          "bootstrap_servers, connect_timeout_ms, request_timeout_ms, "
                          "replication_factor, topic_config, client)", **where) from exc
