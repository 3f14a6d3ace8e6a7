"""kafka-python (pure Python) as the Kafka log's client: options, errors, topics, I/O.

Imported only when ``client`` is ``kafka-python`` (the fallback): importing kafka-python
costs about a quarter of a second, which every Python process Spark starts for a
streaming source would otherwise pay even on the confluent client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import kafka.errors as kerr
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.net.sasl.oauth import AbstractTokenProvider

from pyspark_durable.errors import (
    AuthenticationFailed,
    BackendUnavailable,
    ConfigError,
    DurableWalError,
    LogNotFound,
    OffsetOutOfRange,
)
from pyspark_durable.log.base import Entry, Record
from pyspark_durable.log.kafka.acls import (
    CLUSTER_REFUSED,
    GROUP_REFUSED,
    TOPIC_REFUSED,
    access_denied,
    principal_of,
)
from pyspark_durable.log.kafka.api import KafkaClient
from pyspark_durable.log.kafka.auth import authentication_failed, py_check_credentials
from pyspark_durable.log.kafka.oauth import OAUTH_KEYS, ClientCredentials, kafka_python_tokens
from pyspark_durable.log.kafka.probe import broker_reachability
from pyspark_durable.log.kafka.topics import OneTopicRule
from pyspark_durable.log.kafka.transient import kafka_python_transient
from pyspark_durable.secrets import KAFKA_PYTHON_LOGGERS, install_log_filter

if TYPE_CHECKING:
    from pyspark_durable.log.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

# kafka-python defaults we change, for throughput on batches of ~100 KB entries
TUNED: dict[str, Any] = {
    "linger_ms": 5,
    "batch_size": 1 << 20,
    "max_request_size": 16 << 20,
    "max_partition_fetch_bytes": 8 << 20,
    # a prefetch left at the end of a log blocks the next request on its connection
    # (ListOffsets, the next read) for up to this long: keep it short
    "fetch_max_wait_ms": 5,
    # kafka-python backs off reconnecting to a node up to 30 s (the Java client: 1 s), and
    # refreshes leaders every 5 minutes: after two of three nodes came back, a watermark
    # read timed out (3 s request timeout) on a node it had stopped trying. As librdkafka.
    "reconnect_backoff_max_ms": 1000,
    "metadata_max_age_ms": 2000,
}

CLIENTS: dict[str, type] = {
    "producer": KafkaProducer,
    "consumer": KafkaConsumer,
    "admin": KafkaAdminClient,
}
KAFKA_KEYS = frozenset().union(*(c.DEFAULT_CONFIG for c in CLIENTS.values()))  # type: ignore[attr-defined]
# kafka-python's names and the OAuth client-credentials options both clients take
OPTION_KEYS = KAFKA_KEYS | OAUTH_KEYS


class TokenProvider(AbstractTokenProvider):
    """kafka-python's ``sasl_oauth_token_provider``: the tokens of one
    :class:`~pyspark_durable.log.kafka.oauth.ClientCredentials`."""

    def __init__(self, tokens: ClientCredentials) -> None:
        super().__init__()
        self.tokens = tokens

    def __repr__(self) -> str:
        return f"TokenProvider({self.tokens!r})"

    def token(self) -> str:
        return self.tokens.token()


def default_of(name: str) -> Any:
    """The default of a kafka-python option (its type is what a Spark string becomes)."""
    for kind_cls in CLIENTS.values():
        default = kind_cls.DEFAULT_CONFIG.get(name)  # type: ignore[attr-defined]
        if default is not None:
            return default
    return None


def client_configs(servers: str, own: Mapping[str, Any],
                   merged: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], int]:
    """The kwargs of the producer, consumer and admin client, and the delivery timeout."""
    install_log_filter(KAFKA_PYTHON_LOGGERS, prefix="kafka.")  # SASL requests at DEBUG
    for k, v in TUNED.items():
        merged.setdefault(k, v)
    tokens = kafka_python_tokens(merged, int(own["request_timeout_ms"]) / 1000)
    if tokens is not None:
        merged["sasl_oauth_token_provider"] = TokenProvider(tokens)
    common = {
        "bootstrap_servers": servers.split(","),
        "bootstrap_timeout_ms": int(own["connect_timeout_ms"]),
        "request_timeout_ms": int(own["request_timeout_ms"]),
    }
    forced = {
        "producer": {"acks": "all", "enable_idempotence": True,
                     "allow_auto_create_topics": False},
        "consumer": {"group_id": None, "enable_auto_commit": False,
                     "auto_offset_reset": "none", "isolation_level": "read_uncommitted",
                     "check_crcs": True, "allow_auto_create_topics": False},
        "admin": {},
    }
    clients: dict[str, dict[str, Any]] = {}
    for kind, kind_cls in CLIENTS.items():
        keys = kind_cls.DEFAULT_CONFIG  # type: ignore[attr-defined]
        cfg = {k: v for k, v in {**common, **merged}.items() if k in keys}
        clients[kind] = {**cfg, **forced[kind]}
    prod = clients["producer"]
    prod.setdefault("max_block_ms", int(own["connect_timeout_ms"]))
    prod.setdefault(
        "delivery_timeout_ms", int(own["request_timeout_ms"]) + int(prod["linger_ms"]) + 1000
    )
    return clients, int(prod["delivery_timeout_ms"])




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


def no_auto_create(client: Any) -> Any:
    """Make ``allow_auto_create_topics=False`` hold for the client's metadata requests.

    kafka-python 3.0.12 builds its cluster metadata without that setting, so a consumer
    that assigns (or a producer that sends to) a topic the broker does not have sends
    MetadataRequest(allow_auto_topic_creation=True), and a broker with
    ``auto.create.topics.enable`` creates the topic, with its default retention: a
    reader of a deleted WAL topic made it again (``test_kafka_python_never_auto_creates
    _a_topic``). The flag is set on the metadata object the client already holds.
    """
    cluster = getattr(client, "_cluster", None) or getattr(client, "_metadata", None)
    if cluster is None or not isinstance(getattr(cluster, "config", None), dict):
        raise ConfigError("kafka-python changed: cannot turn off topic auto-creation of "
                          f"{type(client).__name__}; use client=confluent")
    cluster.config["allow_auto_create_topics"] = False
    return client


class KafkaPythonReader:
    """kafka-python's KafkaConsumer as a :class:`Reader`."""

    def __init__(self, settings: KafkaSettings, topic: str, where: Mapping[str, Any]) -> None:
        self.address = settings.bootstrap_servers
        self.principal = principal_of(settings.clients["consumer"])
        self.timeout_ms = settings.request_timeout_ms
        self.where = dict(where)
        self.tp = TopicPartition(topic, 0)
        with translated("connecting a consumer", self.address, self.principal, **where):
            self.consumer = no_auto_create(KafkaConsumer(**settings.clients["consumer"]))
            self.consumer.assign([self.tp])

    def begin(self) -> int:
        with translated("reading watermarks", self.address, self.principal, **self.where):
            return self.consumer.beginning_offsets([self.tp], self.timeout_ms)[self.tp]

    def watermarks(self) -> tuple[int, int]:
        with translated("reading watermarks", self.address, self.principal, **self.where):
            begin = self.consumer.beginning_offsets([self.tp], self.timeout_ms)[self.tp]
            return begin, self.consumer.end_offsets([self.tp], self.timeout_ms)[self.tp]

    def seek(self, offset: int) -> None:
        self.consumer.seek(self.tp, offset)

    def fetch(self, max_records: int | None, timeout_ms: int) -> list[Entry]:
        with translated("fetching", self.address, self.principal, **self.where):
            got = self.consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        return [Entry(r.offset, r.key or b"", r.value or b"",
                      tuple(r.headers) if r.headers else (), r.timestamp)
                for r in got.get(self.tp, ())]

    def idle(self) -> None:
        """kafka-python fetches only inside poll(): nothing to stop."""

    def close(self) -> None:
        _close_quietly(self.consumer)


class KafkaPythonSender:
    """kafka-python's KafkaProducer as a :class:`Sender`.

    A producer whose batch expired, or whose send was refused by the authorizer, is
    replaced before the next send. A batch that expired: kafka-python
    3.0.12 drops the producer id of an idempotent producer when a batch it had already
    sent expires (``reset_producer_id``) but never asks for a new one
    (``init_producer_id`` acts only in state UNINITIALIZED), so every later send of that
    producer waited forever, long after the brokers were back.
    """

    def __init__(self, settings: KafkaSettings, namespace: str) -> None:
        self.address = settings.bootstrap_servers
        self.principal = principal_of(settings.clients["producer"])
        self.settings = settings  # (the namespace comes with each send: see _build)
        self._lock = threading.Lock()
        self._renew = False
        self.producer: KafkaProducer | None = None  # made by the first send

    def _build(self, where: Mapping[str, Any]) -> KafkaProducer:
        """A new producer, made by a send: its error names the send's namespace and log."""
        with translated("connecting the producer", self.address, self.principal, **where):
            return no_auto_create(KafkaProducer(**self.settings.clients["producer"]))

    def _current(self, where: Mapping[str, Any]) -> KafkaProducer:
        with self._lock:
            if self.producer is None or self._renew:
                old, self.producer = self.producer, self._build(where)
                self._renew = False
                if old is not None:
                    _close_quietly(old, timeout=0)
            return self.producer

    def send(self, topic: str, records: Sequence[Record], acked: Callable[[int, int], None],
             failed: Callable[[BaseException], None], where: Mapping[str, Any]) -> None:
        def on_error(exc: BaseException) -> None:
            # expired (see the class docstring), or refused: a refused producer id leaves
            # the producer in a fatal state, which a right granted later does not lift
            if isinstance(exc, kerr.KafkaTimeoutError) or refusal_of(exc) is not None:
                self._renew = True
            failed(as_typed(exc, "append", self.address, self.principal, **where))

        producer = self._current(where)
        with translated("append", self.address, self.principal, **where):
            send = producer.send
            for i, r in enumerate(records):
                value = r.value if type(r.value) is bytes or r.value is None \
                    else bytes(r.value)  # None: a tombstone (compacted topics)
                fut = send(topic, value=value,
                           key=r.key if type(r.key) is bytes else bytes(r.key),
                           headers=[(k, bytes(v)) for k, v in r.headers] or None, partition=0)
                fut.add_callback(lambda meta, i=i: acked(i, meta.offset))
                fut.add_errback(on_error)

    @property
    def broken(self) -> bool:
        """Never: a producer left unusable is replaced here, before the next send."""
        return False

    def login_refused(self) -> None:
        """Nothing: kafka-python asks its token provider, which asks the endpoint, at
        every login."""

    def hurry(self) -> None:
        """kafka-python has no way to cut linger.ms short without waiting: nothing."""

    def wait(self, future: Future, timeout_s: float) -> bool:
        """kafka-python's own I/O thread completes the future."""
        return futures_wait([future], timeout=timeout_s).not_done == set()

    def close(self, timeout_s: float) -> None:
        with self._lock:
            producer = self.producer
        if producer is not None:
            _close_quietly(producer, timeout=timeout_s)


def _close_quietly(client: Any, **kwargs: Any) -> None:
    try:
        client.close(**kwargs)
    except Exception as exc:  # noqa: BLE001 - closing must not mask the real error
        log.debug("closing a Kafka client failed: %s", exc)


class KafkaPythonAdmin(OneTopicRule):
    """Creates, describes and lists topics with kafka-python; never relies on auto-creation."""

    def __init__(self, settings: KafkaSettings, namespace: str | None = None) -> None:
        self.settings = settings
        self.address = settings.bootstrap_servers
        self.principal = principal_of(settings.clients["admin"])
        self.namespace = namespace
        with translated("connecting the admin client", self.address, self.principal, namespace=namespace):
            py_check_credentials(settings.clients["admin"], self.address,
                                 settings.connect_timeout_ms, namespace=namespace)
            try:
                self.client = KafkaAdminClient(**settings.clients["admin"])
            except kerr.KafkaTimeoutError as exc:
                raise BackendUnavailable(
                    f"cannot reach Kafka broker {self.address} within "
                    f"connect_timeout_ms={settings.connect_timeout_ms}: {exc}",
                    namespace=namespace,
                ) from exc

    def _doing(self, what: str, topic: str) -> Any:
        """:func:`translated` for a request about ``topic``."""
        return translated(what, self.address, self.principal, namespace=self.namespace,
                          topic=topic)

    def list_topics(self) -> list[str]:
        with translated("listing topics", self.address, self.principal, namespace=self.namespace):
            return list(self.client.list_topics())

    def partitions(self, topic: str) -> int | None:
        """Number of partitions of ``topic``, None if it does not exist."""
        with self._doing("describing topic", topic):
            (info,) = self.client.describe_topics([topic])
        if info.get("error_code", 0) == kerr.UnknownTopicOrPartitionError.errno:
            return None
        if info.get("error_code", 0):
            err = kerr.for_code(info["error_code"])
            with self._doing("describing topic", topic):
                raise err(f"describe_topics({topic})")
        return len(info.get("partitions") or [])

    def delete_topic(self, topic: str) -> None:
        with self._doing("replacing an auto-created topic", topic):
            try:
                self.client.delete_topics([topic])
            except kerr.UnknownTopicOrPartitionError:
                pass  # another process replaced it first

    def create(self, topic: str, configs: Mapping[str, str]) -> int | None:
        spec = {"num_partitions": 1, "replication_factor": self.settings.replication_factor,
                "configs": {**configs, **self.settings.topic_config}}
        with self._doing("creating topic", topic):
            try:
                self.client.create_topics({topic: spec})
            except kerr.TopicAlreadyExistsError:
                pass  # another process won the race: verified by the caller
            self.client.wait_for_topics([topic], timeout_ms=self.settings.request_timeout_ms)
        # the broker that answers a describe may learn of a new topic a moment after the
        # controller created it (right after a broker restart, seconds): ask again within
        # the request timeout rather than take the topic for missing
        deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
        count = self.partitions(topic)
        while count is None and time.monotonic() < deadline:
            time.sleep(0.2)
            count = self.partitions(topic)
        return count

    def empty(self, topic: str, count: int) -> bool:
        """Do all ``count`` partitions of ``topic`` hold nothing (end offsets 0)?"""
        with self._doing("reading end offsets", topic):
            consumer = no_auto_create(KafkaConsumer(**self.settings.clients["consumer"]))
            try:
                parts = [TopicPartition(topic, p) for p in range(count)]
                ends = consumer.end_offsets(parts, self.settings.request_timeout_ms)
                return all(ends[p] == 0 for p in parts)
            finally:
                consumer.close()

    def _config_request(self, request: Any) -> Any:
        """Send a DescribeConfigs or IncrementalAlterConfigs request and return its answer.

        kafka-python 3.0.12's ``describe_configs`` drops a resource's error code (a
        refused DESCRIBE_CONFIGS read as a topic without configs, "retention.ms=None"),
        and ``alter_configs`` returns a refusal as text: both are sent here instead, so
        a refusal is the broker's error.
        """
        manager = getattr(self.client, "_manager", None)
        if manager is None:
            raise ConfigError("kafka-python changed: cannot send a topic configs request; "
                              "use client=confluent")

        async def send() -> Any:
            return await manager.send(request)

        return manager.run(send)

    def topic_configs(self, topic: str, names: tuple[str, ...]) -> dict[str, str | None]:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict.fromkeys(names))
        with self._doing("describing topic configs", topic):
            response = self._config_request(self.client._describe_configs_request([resource]))
            for result in response.results:
                if result.error_code:
                    raise kerr.for_code(result.error_code)(result.error_message)
            entries = self.client._describe_configs_process_responses([response], "all")
        entries = entries.get("topic", {}).get(topic, {})
        return {n: entries[n]["value"] if n in entries else None for n in names}

    def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict(configs))
        with self._doing("altering topic configs", topic):
            response = self._config_request(
                self.client._alter_configs_request([resource], incremental=True))
            for result in response.responses:
                if result.error_code:
                    raise kerr.for_code(result.error_code)(result.error_message)

    def delete_records(self, topic: str, offset: int) -> bool:
        """DeleteRecords below ``offset``; False if the broker does not support it."""
        tp = TopicPartition(topic, 0)
        with self._doing("DeleteRecords", topic):
            try:
                self.client.delete_records({tp: offset},
                                           timeout_ms=self.settings.request_timeout_ms)
                return True
            except (kerr.KafkaConnectionError, kerr.UnsupportedVersionError,
                    kerr.KafkaProtocolError) as exc:
                # a Kafka-protocol service without DeleteRecords: unsupported if it answers
                self.partitions(topic)
                log.debug("DeleteRecords failed on a reachable broker: %s", exc)
                return False

    def close(self) -> None:
        try:
            self.client.close()
        except Exception as exc:  # noqa: BLE001 - closing must not mask the real error
            log.debug("closing the Kafka admin client failed: %s", exc)


CLIENT = KafkaClient("kafka-python", configs=client_configs, reader=KafkaPythonReader,
                     sender=KafkaPythonSender, admin=KafkaPythonAdmin,
                     keys=lambda: OPTION_KEYS, default_of=default_of)
