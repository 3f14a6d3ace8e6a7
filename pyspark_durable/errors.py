"""Typed errors of pyspark_durable.

One root, :class:`DurableWalError`, with a ``retriable`` flag (as kafka-python's
``errors.py``). Every message carries its coordinates first, in the form
``namespace=orders region=3 table=7 sequence=42: what went wrong``, so that a
failing Spark task or a CLI user sees where the problem is without a traceback.
"""

from __future__ import annotations

from typing import Any

from pyspark_durable.secrets import scrub


def coordinates(**where: Any) -> str:
    """Format ``key=value`` pairs, skipping ``None`` values, in the order given."""
    return " ".join(f"{k}={v}" for k, v in where.items() if v is not None)


class DurableWalError(Exception):
    """Root of every error this package raises on purpose."""

    retriable: bool = False

    def __init__(self, message: str, **where: Any) -> None:
        self.where = {k: v for k, v in where.items() if v is not None}
        self.reason = scrub(message)  # what went wrong, without the coordinates
        prefix = coordinates(**where)
        # a secret that reached a message by any path (an option's value quoted by a
        # client's error) is masked here: see pyspark_durable.secrets
        super().__init__(scrub(f"{prefix}: {message}" if prefix else message))


class ConfigError(DurableWalError, ValueError):
    """An option or configuration value is unknown or invalid."""


class DecodeError(DurableWalError):
    """Bytes read back are not what the format promises (garbage, short, foreign)."""


class InvalidVersion(DecodeError):
    """A key, value, snapshot or commits-log field carries a format version this code
    does not know."""


class NewerVersion(InvalidVersion):
    """Bytes in a format version newer than any this release reads: a newer release wrote
    them. Refused, never guessed at or skipped as damage (an older snapshot or a replay
    around it would silently drop what the newer release recorded); upgrade the reader.
    ``element`` names the format, ``found`` the version met, ``newest`` the newest read."""

    def __init__(self, element: str, found: int | str, newest: int | str,
                 **where: Any) -> None:
        self.element, self.found, self.newest = element, found, newest
        super().__init__(f"{element} version {found} is newer than this release reads "
                         f"(newest: {newest}); it was written by a newer pyspark_durable",
                         **where)

    def located(self, **where: Any) -> NewerVersion:
        """The same refusal with coordinates the raiser did not know (a record's offset)."""
        return NewerVersion(self.element, self.found, self.newest, **{**where, **self.where})


class CorruptEntryError(DecodeError):
    """A stored frame fails its CRC or framing check in the middle of a log."""


class CorruptOffset(DecodeError, ValueError):
    """A streaming checkpoint's offset is not one this source writes: not JSON, not a step
    number, negative, or of another namespace. The checkpoint is damaged or belongs to
    another query; it is not data loss, so ``failOnDataLoss=false`` never skips it (a
    guessed position would deliver again what the query already delivered, or skip)."""


class OffsetOutOfRange(DurableWalError):
    """A read asked for offsets below the low watermark (deleted) or a bad range."""


class StepsTrimmed(OffsetOutOfRange):
    """Steps a handle's step index holds were read back from a commits log already
    trimmed past them: a cleaner trimmed below snapshots newer than the handle's view.
    The handle recovers from the newest snapshot and asks again (it heals)."""


class LogNotFound(DurableWalError):
    """A namespace or region log that should exist does not."""


class NotAWal(LogNotFound):
    """A folder given as a WAL is something else (a Spark checkpoint or output folder) or
    holds the WAL one level off: the message says what it is and which folder to give."""


class UnknownNamespace(LogNotFound):
    """A name that is no namespace of the WAL, opened where nothing may be created; it
    carries the namespaces the WAL holds and, when known, their location (a folder, a
    broker), for a message that names what to give instead; ``root_missing`` is the
    backend's own words when the WAL's root itself is missing (a bucket, a folder)."""

    def __init__(self, namespace: str, names: list[str], location: str | None = None,
                 root_missing: str | None = None) -> None:
        self.namespace, self.names, self.location = namespace, list(names), location
        self.root_missing = root_missing
        super().__init__(f"unknown namespace {namespace!r}; namespaces: "
                         f"{', '.join(names) or 'none'}" + (f" in {location}" if location else "")
                         + (f" ({root_missing})" if root_missing else ""))


class SchemaMismatch(DurableWalError, ValueError):
    """Rows do not match the schema the table was created with."""


class UnreadableValue(SchemaMismatch):
    """A value its readers could not give back: a null where the column's type allows
    none (a variant's ``value``, a geometry's ``srid``), the rest of the value present.
    Refused before it is written, naming the column path; a read that meets one (in a
    WAL an older version wrote) names it the same way."""


class RoutingError(DurableWalError, ValueError):
    """A region or table value is null, negative, out of range or conflicting."""


class DataLoss(DurableWalError):
    """Committed data the caller relied on is gone: expired, lost, or a recreated WAL."""


class ContentMismatch(DataLoss):
    """An entry's bytes are not those its step committed (rewritten, restored from
    another copy, or a different WAL under the same names); the message names the step."""


class StepExpired(DataLoss):
    """A step was asked for that has been expired; the message names what is left."""


class StepLost(DataLoss):
    """A step an operator recorded as lost (``durablewal repair``, after ``check`` found
    an entry it needs damaged or gone): the message names the step and what was lost.
    The rest of the WAL reads on; a streaming read that reaches it fails naming it (a new
    checkpoint with ``startingStep`` past it goes on)."""


class EntryFreed(DataLoss):
    """An entry a caller needs was freed: a cleaner freed it because no step referred to
    it, so a step that does lost it. The message names the log and offset."""


class FreeUnsupported(DurableWalError):
    """The log's backend cannot free single entries (Kafka deletes only a prefix)."""


class IncarnationMismatch(DataLoss):
    """The WAL is not the one a handle, a checkpoint or a writer knew: it was lost,
    recreated or restored from an older copy. The message names both."""


class StepNotCommitted(DurableWalError):
    """A step beyond the committed range was asked for."""


class WriterStepExpired(DurableWalError):
    """A commit of a writer step older than the namespace's deduplication window: the WAL
    no longer remembers whether that step was committed, so it commits nothing rather
    than risk a duplicate. Not retriable: write the rows under a new writer id."""


class ClockSkew(DurableWalError):
    """This process's clock is far behind the WAL's clock, and a commit it started by that
    clock cannot be judged: the message names both clocks. Nothing was committed. Not
    retriable as is: correct the host's clock (NTP), then write the rows again."""

    def __init__(self, message: str, *, own_ms: int, wal_ms: int, **where: Any) -> None:
        self.own_ms, self.wal_ms = own_ms, wal_ms
        super().__init__(message, **where)


class AttemptLost(DurableWalError):
    """Entries of a writer attempt are gone (cleaned) before its step could commit."""

    retriable = True


class BackendUnavailable(DurableWalError):
    """The storage behind a log cannot be reached (a broker, a folder)."""

    retriable = True


class AppendIndeterminate(BackendUnavailable):
    """An append's records were made durable but the record acknowledging them could not
    be: they may be found acknowledged later, or not. Retry the same operation once the
    storage is healthy; a WAL commit of the same writer step is idempotent, so the retry
    either finds the first one or writes it again."""


class DiskFull(BackendUnavailable):
    """The storage has no room left (``ENOSPC``, ``EDQUOT``). Retriable once space is
    freed: the records that free it (a cleaner pass, ``expire``, a retention policy,
    dropping a reader) spend the space the file log keeps in reserve for them."""


class AuthenticationFailed(DurableWalError):
    """The broker refused the client's credentials (SASL), or the TLS handshake failed
    (an untrusted certificate). The message names the broker and the SASL mechanism,
    never the secret.

    Not retriable, and deliberately not a :class:`BackendUnavailable`: retrying with
    the same user name and password cannot succeed, and a retry loop would only lock
    the account or hide the cause. Fix the options (``kafka.sasl.*``, ``kafka.ssl.*``).
    """

    retriable = False


class AccessDenied(DurableWalError):
    """The broker's authorizer refused a request: the principal lacks a right (an ACL).

    The message names the principal, the topic (or the cluster), the operation and the
    ACL that would grant it, never a secret. Not retriable: the same request is refused
    again until an operator grants the right; a client that the refusal left unusable
    is replaced, so the running process succeeds once the ACL is there.
    """

    retriable = False

    def __init__(self, message: str, *, principal: str, operation: str,
                 resource: str, **where: Any) -> None:
        self.principal, self.operation, self.resource = principal, operation, resource
        super().__init__(message, **where)


class BackupRefused(DurableWalError):
    """A backup was not started, and nothing was written: its destination exists and is
    not empty, or holds what an interrupted backup left (``DEST.partial``), or the WAL's
    backend keeps its copies itself (the message names what to use instead)."""


class BackupCheckFailed(DurableWalError):
    """A backup's copy failed the check it is given before it becomes the destination:
    the message names the problems and the partial copy, which stays for inspection.
    The same problems in ``durablewal check`` of the source are damage the copy took
    along; otherwise it is a bug in the copy."""
