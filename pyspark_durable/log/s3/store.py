"""The S3 log store: the logs and snapshots of one namespace in a bucket.

Layout below ``s3://{bucket}/{prefix}``::

    {namespace}/logs/{log}/...                  one log (see :mod:`.log`)
    {namespace}/snapshots/{name}/{version:020d} one object per snapshot version
    .probe/{random}                             the conditional-write probe, deleted at once

Nothing else is needed: no lock service, no lease, no clock. A store checks once per
process and bucket, before its first write, that the server honours ``If-None-Match``
(:func:`.client.probe`); reads never write.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark_durable.errors import LogNotFound
from pyspark_durable.log.base import NAME_RE, Log, LogStore, check_name, check_version, is_decimal
from pyspark_durable.log.s3.client import (
    ERRORS,
    MISSING,
    OPTIONS,
    PRECONDITION,
    S3Config,
    client_for,
    get_or_none,
    is_code,
    listed,
    probe,
    typed,
)
from pyspark_durable.log.s3.log import S3Log

SNAPSHOTS = "snapshots/"
LOGS = "logs/"


def _children(client: Any, config: S3Config, prefix: str, doing: str,
              **where: Any) -> Iterator[str]:
    """The names one level below ``prefix`` (S3's common prefixes), page by page."""
    for page in listed(client, config, doing, where, Prefix=prefix, Delimiter="/"):
        for item in page.get("CommonPrefixes", ()):
            yield item["Prefix"][len(prefix):].rstrip("/")


class S3LogStore(LogStore):
    """The logs of one namespace below ``s3://{bucket}/{prefix}{namespace}/``."""

    type_name = "s3"
    OPTIONS = tuple(OPTIONS)
    # each commit record is an object, read with a request of its own: an open replays
    # at most 100 of them past the newest snapshot (a snapshot is one PUT per 100 commits)
    snapshot_every_records = 100
    # record_copies stays 1: an append is one object, so a copy would share its fate

    def __init__(self, namespace: str, **options: Any) -> None:
        super().__init__(namespace)
        self.options = dict(options)
        self.config = S3Config.parse(options)
        self.client = client_for(self.config)
        self.ns_prefix = f"{self.config.prefix}{namespace}/"
        self._logs: dict[str, S3Log] = {}
        self._lock = threading.Lock()

    def writable(self) -> None:
        """Before a first write: the store must honour conditional writes."""
        probe(self.client, self.config)

    def _where(self) -> dict[str, Any]:
        return {"namespace": self.namespace}

    @classmethod
    def list_namespaces(cls, config: Mapping[str, Any]) -> list[str]:
        cfg = S3Config.parse(config)
        return sorted(n for n in _children(client_for(cfg), cfg, cfg.prefix, "listing namespaces")
                      if NAME_RE.fullmatch(n))

    def sibling_namespaces(self) -> list[str]:
        return self.list_namespaces(self.options)

    def location(self) -> str:
        return f"bucket location {self.config.url} at {self.config.endpoint()}"

    def list_logs(self) -> list[str]:
        return sorted(n for n in _children(self.client, self.config, self.ns_prefix + LOGS,
                                           "listing logs", **self._where())
                      if NAME_RE.fullmatch(n))

    def open_log(self, name: str, create: bool = True) -> Log:
        check_name("log", name)
        with self._lock:
            opened = self._logs.get(name)
        if opened is not None:
            return opened
        meta = f"{self.ns_prefix}{LOGS}{name}/meta"
        created = False
        # a GET, not a HEAD: a refusal's body names its cause (wrong keys, no right); and not
        # a create first: a reader's principal may have no right to write
        if get_or_none(self.client, self.config, meta, f"opening log {name}",
                       self._where()) is None:
            if not create:
                raise LogNotFound("log does not exist", namespace=self.namespace, log=name)
            self.writable()
            try:
                self.client.put_object(Bucket=self.config.bucket, Key=meta, Body=b"1",
                                       IfNoneMatch="*")
                created = True
            except ERRORS as exc:
                if not is_code(exc, PRECONDITION):  # created meanwhile: as good
                    typed(exc, self.config, f"creating log {name}", **self._where())
        with self._lock:  # a log this call created has no hint yet: its end is listed from 0
            return self._logs.setdefault(name, S3Log(
                self.namespace, name, self.client, self.config,
                f"{self.ns_prefix}{LOGS}{name}/", self.writable, 0 if created else None))

    def _snapshot_key(self, name: str, version: int) -> str:
        return f"{self.ns_prefix}{SNAPSHOTS}{name}/{version:020d}"

    def write_snapshot(self, name: str, version: int, data: bytes) -> None:
        check_name("snapshot", name)
        check_version(version)
        self.writable()
        try:  # a PUT is atomic: a reader sees the whole object or none
            self.client.put_object(Bucket=self.config.bucket,
                                   Key=self._snapshot_key(name, version), Body=bytes(data))
        except ERRORS as exc:
            typed(exc, self.config, f"writing snapshot {name} version {version}", **self._where())

    def snapshot_versions(self, name: str) -> list[int]:
        check_name("snapshot", name)
        prefix = f"{self.ns_prefix}{SNAPSHOTS}{name}/"
        return sorted(int(item["Key"][len(prefix):])
                      for page in listed(self.client, self.config, f"listing snapshot {name}",
                                         self._where(), Prefix=prefix)
                      for item in page.get("Contents", ())
                      if is_decimal(item["Key"][len(prefix):]))

    def read_snapshot_version(self, name: str, version: int) -> bytes | None:
        got = get_or_none(self.client, self.config, self._snapshot_key(name, version),
                          f"reading snapshot {name} version {version}", self._where())
        return None if got is None else got[0]

    def delete_snapshot(self, name: str, version: int) -> None:
        try:
            self.client.delete_object(Bucket=self.config.bucket,
                                      Key=self._snapshot_key(name, version))
        except ERRORS as exc:
            if not is_code(exc, MISSING):
                typed(exc, self.config, f"deleting snapshot {name} version {version}",
                      **self._where())

    def close(self) -> None:
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
        for opened in logs:
            opened.close()
