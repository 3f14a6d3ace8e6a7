"""Secrets in options: which keys hold one, and keeping their values out of text.

A Kafka password reaches this package as an option (``kafka.sasl.plain.password``,
``sasl.password``, a JAAS line in ``kafka.sasl.jaas.config``...). It must never be
printed: not in an error message, a log line (ours or a Kafka client's), the WAL's
stored metadata, the CLI's output or what Spark shows. Three tools, no dependencies
(:mod:`pyspark_durable.errors` uses this module):

* :func:`is_secret` tells a secret option by its key (:data:`SECRET_KEY`, which is
  Spark's ``spark.redaction.regex`` widened by ``jaas``, ``credential``, ``pem`` and
  private keys); :func:`redact_options` is a mapping fit for printing.
* :func:`remember` records the secret values of an option mapping (the Kafka backend
  calls it when it parses options), and :func:`scrub` replaces every remembered value
  (and its ``bytes`` repr spelling) in a text: every :class:`DurableWalError` message
  passes through it, so a secret that reached a message by any path is masked.
* :class:`RedactingFilter` does the same to log records; it is installed on the Kafka
  clients' loggers (kafka-python logs every request at DEBUG, SASL PLAIN's
  ``auth_bytes`` holding the password in clear) and on this package's librdkafka logger.

Values shorter than :data:`MIN_SCRUB_LEN` are not scrubbed from free text (they would
mask ordinary words); their options are still redacted by key, and so is any value
printed right after a secret key (``'sasl_plain_password': 'pw'``, ``password="pw"``,
``sasl.password=pw``: :data:`KEYED_VALUE`), as a client's configuration is at DEBUG.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "*********(redacted)"
MIN_SCRUB_LEN = 6
# Spark's default spark.redaction.regex is (?i)secret|password|token|access[.]?key
SECRET_KEY = re.compile(
    r"(?i)secret|passw(or)?d|token|access[._-]?key|api[._-]?key|jaas|credential|"
    r"private[._-]?key|key[._-]?pem|oauthbearer[._-]?config")
# keys SECRET_KEY matches that name no secret: an OAuth token endpoint's address (its
# errors must name it)
NOT_SECRET_KEY = re.compile(r"(?i)token[._-]?endpoint[._-]?url['\"]?$")
# a JAAS line: username="..." password="..." (quoted, as Kafka's JAAS parser wants them)
JAAS_VALUE = re.compile(r"""(?i)\b(password|username)\s*=\s*("(?:[^"\\]|\\.)*"|'[^']*'|[^\s;]+)""")
# any JAAS option: name="..." (OAuthBearerLoginModule: clientId, clientSecret, scope)
JAAS_OPTION = re.compile(r"""([A-Za-z_][\w.-]*)\s*=\s*("(?:[^"\\]|\\.)*"|'[^']*'|[^\s;]+)""")
# kafka-python's DEBUG lines show SASL requests: auth_bytes=b'\x00user\x00password'
AUTH_BYTES = re.compile(r"""auth_bytes=b(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
# a value printed beside its key: a client's configuration at DEBUG ('sasl_plain_password':
# 'pw'), key=value, a JAAS password="pw". Keys start a token and are matched possessively,
# so a long token costs linear time; :func:`_keyed` masks the values of secret keys
KEYED_VALUE = re.compile(
    r"""(?P<key>(?<![\w.-])['"]?(?P<name>[A-Za-z_][\w.-]*+)['"]?\s*[:=]\s*)"""
    r"""(?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,;'"}\])]+)""")
UNSET = frozenset({"None", "null", "''", '""'})  # no secret to hide: kept as it is

_known: set[str] = set()
_lock = threading.Lock()


def is_secret(key: Any) -> bool:
    """Does the option named ``key`` (any spelling: ``kafka.sasl.plain.password``,
    ``sasl_password``) hold a secret? Not an OAuth token endpoint's URL."""
    return bool(SECRET_KEY.search(str(key))) and not NOT_SECRET_KEY.search(str(key))


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` fit for printing: secret values replaced by :data:`REDACTED`."""
    return {k: REDACTED if is_secret(k) and v is not None else v for k, v in options.items()}


def jaas_values(text: str) -> dict[str, str]:
    """``username`` and ``password`` of a JAAS line (``... required username="a"
    password="b";``), unquoted; only those present."""
    found = {}
    for key, raw in JAAS_VALUE.findall(text):
        value = raw[1:-1] if raw[:1] in "\"'" and raw[-1:] == raw[:1] else raw
        found[key.lower()] = re.sub(r"\\(.)", r"\1", value) if raw[:1] == '"' else value
    return found


def jaas_options(text: str) -> tuple[str, dict[str, str]]:
    """The login module of a JAAS line and its options, unquoted, under their names
    (``org...OAuthBearerLoginModule required clientId="a" clientSecret="b";``)."""
    module, _, rest = re.sub(r"\s+", " ", text.strip()).partition(" ")
    rest = re.sub(r"^\s*(required|requisite|sufficient|optional)\b", "", rest, flags=re.I)
    found = {}
    for key, raw in JAAS_OPTION.findall(rest):
        value = raw[1:-1] if raw[:1] in "\"'" and raw[-1:] == raw[:1] else raw
        found[key] = re.sub(r"\\(.)", r"\1", value) if raw[:1] == '"' else value
    return module, found


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The secret values of an option mapping (and a JAAS line's password)."""
    values = []
    for key, value in options.items():
        if value is None or not is_secret(key):
            continue
        text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        if text:
            values.append(text)
            password = jaas_values(text).get("password")
            if password:
                values.append(password)
            values += [v for k, v in jaas_options(text)[1].items()
                       if k.lower() == "clientsecret" and v]
    return values


def remember(options: Mapping[str, Any]) -> None:
    """Record the secret values of ``options`` for :func:`scrub` (this process only)."""
    values = [v for v in secret_values(options) if len(v) >= MIN_SCRUB_LEN]
    if values:
        with _lock:
            _known.update(values)


def _spellings(secret: str) -> Iterable[str]:
    """The secret as it is, and as it shows inside a ``bytes`` or ``str`` repr."""
    yield secret
    as_bytes = repr(secret.encode())[2:-1]
    if as_bytes != secret:
        yield as_bytes
    as_str = repr(secret)[1:-1]
    if as_str != secret:
        yield as_str


def _keyed(match: re.Match) -> str:
    """A secret key's value masked (any length); another key's quoted value is searched
    for keys in turn (``'x': 'a password="pw"'``)."""
    value = match.group("value")
    if is_secret(match.group("name")):
        return match.group(0) if value in UNSET else match.group("key") + REDACTED
    if value[:1] in "'\"" and SECRET_KEY.search(value):
        return match.group("key") + value[0] + KEYED_VALUE.sub(_keyed, value[1:-1]) + value[-1]
    return match.group(0)


def scrub(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with every remembered secret (and ``extra`` ones) replaced by
    :data:`REDACTED`, the value printed beside a secret key masked (any length), and
    SASL ``auth_bytes`` of a logged request masked."""
    if "auth_bytes=" in text:
        text = AUTH_BYTES.sub(f"auth_bytes={REDACTED}", text)
    if SECRET_KEY.search(text):
        text = KEYED_VALUE.sub(_keyed, text)
    with _lock:
        secrets = [*_known, *(s for s in extra if s and len(s) >= MIN_SCRUB_LEN)]
    for secret in sorted(secrets, key=len, reverse=True):
        for spelling in _spellings(secret):
            if spelling in text:
                text = text.replace(spelling, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """Scrubs every record of the logger it is installed on (see :func:`scrub`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is logging's problem, not ours
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = str(record.exc_info[1])
            if scrub(text) != text:  # a traceback would print the secret: drop it
                record.msg = f"{record.msg} ({type(record.exc_info[1]).__name__}: " \
                             f"{scrub(text)})"
                record.exc_info = record.exc_text = None
        return True


_FILTER = RedactingFilter()
# kafka-python's loggers that print requests or configs (filters do not propagate:
# each logger that creates records needs its own)
KAFKA_PYTHON_LOGGERS = ("kafka.protocol.parser", "kafka.net.connection", "kafka.net.manager",
                        "kafka.net.transport", "kafka.conn", "kafka.client_async",
                        "kafka.producer.kafka", "kafka.consumer.group", "kafka.admin.client")


def install_log_filter(names: Iterable[str] = (), prefix: str | None = None) -> None:
    """Put :class:`RedactingFilter` on the named loggers and on every existing logger
    whose name starts with ``prefix`` (idempotent)."""
    chosen = set(names)
    if prefix is not None:
        chosen |= {n for n in list(logging.root.manager.loggerDict) if n.startswith(prefix)}
    for name in chosen:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
