"""kafka-python's failures as this package's typed errors: a block of client calls
(:func:`translated`), a delivery's failure (:func:`as_typed`), the authorizer's refusal
a failure carries (:func:`refusal_of`).

Which failures a retry can outlast is the one table both clients classify by
(:func:`~pyspark_durable.log.kafka.transient.kafka_python_transient`); a refusal of the
authorizer names the ACL it lacks (:mod:`~pyspark_durable.log.kafka.acls`), and a
failure that says a broker is away names which brokers answer
(:mod:`~pyspark_durable.log.kafka.probe`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kafka.errors as kerr

from pyspark_durable.errors import (
    AuthenticationFailed,
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
from pyspark_durable.log.kafka.probe import broker_reachability
from pyspark_durable.log.kafka.transient import kafka_python_transient

# kafka-python 3.0 has no NoBrokersAvailable (older versions do): the names it has
_UNREACHABLE = tuple(getattr(kerr, n) for n in (
    "KafkaConnectionError", "NoBrokersAvailable", "KafkaTimeoutError", "RequestTimedOutError",
    "NotLeaderForPartitionError", "LeaderNotAvailableError", "NodeNotReadyError")
    if hasattr(kerr, n))


def _cause(exc: BaseException, address: str) -> str:
    """What the broker error means for a durable append, and which brokers are down."""
    if isinstance(exc, kerr.NotEnoughReplicasError | kerr.NotEnoughReplicasAfterAppendError):
        return (f"not enough in-sync replicas for acks=all (the topic's min.insync.replicas); "
                f"{broker_reachability(address)}")
    if isinstance(exc, _UNREACHABLE):
        return broker_reachability(address)
    return ""


def refusal_of(exc: BaseException) -> str | None:
    """The authorizer's refusal ``exc`` carries (TOPIC_AUTHORIZATION_FAILED, ...), if any.

    kafka-python 3.0.12 reports a refused InitProducerId (an idempotent producer without
    the right to write) as a plain KafkaError whose text names the error class.
    """
    names = {kerr.TopicAuthorizationFailedError: TOPIC_REFUSED,
             kerr.ClusterAuthorizationFailedError: CLUSTER_REFUSED,
             kerr.GroupAuthorizationFailedError: GROUP_REFUSED}
    for cls, name in names.items():
        if isinstance(exc, cls) or (isinstance(exc, kerr.KafkaError)
                                    and cls.__name__ in str(exc)):
            return name
    return None


@contextmanager
def translated(what: str, address: str, principal: str | None = None,
               **where: Any) -> Iterator[None]:
    """Turn kafka-python errors into this package's typed errors, naming the broker (and
    for a refusal of the authorizer, ``principal``)."""
    try:
        yield
    except AuthenticationFailed as exc:
        if exc.where or not where:
            raise
        # the token provider's refusal, raised inside the client: placed here
        raise AuthenticationFailed(f"{what}: {exc.reason}", **where) from None
    except DurableWalError:
        raise
    except kerr.KafkaError as exc:
        refusal = refusal_of(exc)
        if refusal is None:
            with _translated_other(what, address, **where):
                raise
        # the class only: kafka-python quotes the whole request (a topic's configs)
        raise access_denied(refusal, what, address, principal or "the client's principal",
                            type(exc).__name__, **where) from None
    except (OSError, TimeoutError) as exc:
        raise BackendUnavailable(f"{what}: Kafka broker {address} unreachable: {exc} "
                                 f"({broker_reachability(address)})", **where) from exc


@contextmanager
def _translated_other(what: str, address: str, **where: Any) -> Iterator[None]:
    """The errors of :func:`translated` other than the authorizer's refusals."""
    try:
        yield
    except kerr.KafkaConfigurationError as exc:
        raise ConfigError(f"{what}: invalid kafka client option: {exc}", **where) from exc
    except kerr.SaslAuthenticationFailedError as exc:
        raise authentication_failed(address, {}, f"{what}: {exc}", **where) from None
    except kerr.OffsetOutOfRangeError as exc:
        raise OffsetOutOfRange(f"{what}: broker {address} has no such offset: {exc}",
                               **where) from exc
    except kerr.MessageSizeTooLargeError as exc:
        raise ConfigError(
            f"{what}: entry too large for broker {address} ({exc}); raise max_request_size "
            "and the topic's max.message.bytes", **where) from exc
    except kerr.UnsupportedCodecError as exc:
        raise ConfigError(
            f"{what}: kafka-python cannot decode a batch from broker {address} ({exc}): "
            "install the codec's package (lz4: 'lz4', which the kafka extras install; zstd: "
            "'zstandard'; snappy: 'python-snappy') or read with the confluent client",
            **where) from exc
    except kerr.UnknownTopicOrPartitionError as exc:
        raise LogNotFound(f"{what}: the topic is not on Kafka broker {address} (deleted, not "
                          f"created yet, or the broker lost it): {exc}", **where) from exc
    except kerr.KafkaError as exc:
        msg = f"{what}: Kafka broker {address} failed: {type(exc).__name__}: {exc}"
        cause = _cause(exc, address)
        if cause:
            msg = f"{msg} ({cause})"
        if kafka_python_transient(exc):
            raise BackendUnavailable(msg, **where) from exc
        raise DurableWalError(msg, **where) from exc


def as_typed(exc: BaseException, what: str, address: str, principal: str | None = None,
             **where: Any) -> BaseException:
    """``exc`` (a delivery's failure) as :func:`translated` would raise it."""
    try:
        with translated(what, address, principal, **where):
            raise exc
    except DurableWalError as typed:
        return typed
    except BaseException:  # noqa: BLE001 - not a client error: passed on as it is
        return exc
