"""Helpers the test suite shares, one definition each: ``from tests.helpers import ...``
in test modules, conftests and the child scripts the tests start (tests/ is a package of
the repository root, which the children get as their PYTHONPATH)."""

from __future__ import annotations

import hashlib
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# one port rule for brokers and every other server a test starts
from pyspark_durable.showcase.localkafka.ports import _ephemeral_ports, free_port  # noqa: F401

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the repository
CHILDREN = TESTS / "children"  # the scripts tests start as processes
PACKAGE_DIR = ROOT / "pyspark_durable"

# The backends a test can run on, by the name ``@pytest.mark.backends(...)`` takes and the
# test id shows: (``open_store`` backend, Kafka client). The Kafka log is named by its
# client: confluent-kafka (librdkafka, the product's default) and kafka-python.
BACKENDS: dict[str, tuple[str, str | None]] = {
    "file": ("file", None),
    "memory": ("memory", None),
    "kafka-confluent": ("kafka", "confluent"),
    "kafka-python": ("kafka", "kafka-python"),
    "s3": ("s3", None),
    "s3-moto": ("s3", None),  # the same log on moto's server: a second implementation of the API
}
S3_BUCKET = "wal"  # the bucket conftest's s3_server makes; each test writes below a prefix of its own


def s3_options(server: Any, prefix: str | None = None, **overrides: str) -> dict[str, str]:
    """S3 backend options of a fresh prefix in the session server's bucket, as its admin."""
    key, secret = server.admin
    return {"path": f"s3://{S3_BUCKET}/{prefix or uuid.uuid4().hex[:12]}",
            "endpoint_url": server.endpoint, "access_key_id": key, "secret_access_key": secret,
            **overrides}


def s3_spark_options(options: dict[str, str]) -> dict[str, str]:
    """S3 backend options as Spark's: ``path`` as it is, the rest as ``s3.*``
    (:func:`wal_config` turns them back)."""
    return {(k if k == "path" else f"s3.{k}"): v for k, v in options.items()}


KAFKA_CLIENTS = tuple(client for _, client in BACKENDS.values() if client)


def wait_until(condition: Callable[[], object], what: str | Callable[[], str],
               timeout_s: float, interval_s: float = 0.2) -> object:
    """``condition()``'s first truthy value, asked every ``interval_s``; an AssertionError
    naming ``what`` was awaited (a string, or a function saying what is missing) after
    ``timeout_s``. Only for conditions no event reports (a broker's background threads,
    another process's files): wherever an event exists, wait on the event instead."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {said}")
        time.sleep(interval_s)


def package_zip(dest: Path) -> Path:
    """pyspark_durable as a zip at ``dest``, as ``zip -r pyspark_durable.zip
    pyspark_durable`` makes it for ``--py-files`` or ``addArtifacts(pyfile=True)``."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(PACKAGE_DIR.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(PACKAGE_DIR.parent))
    return dest


def hashed_payload(i: int) -> str:
    """Row ``i``'s payload in the crash tests: its content proves which row it is."""
    return f"row-{i}-" + hashlib.sha1(str(i).encode()).hexdigest()


def wal_config(wal: dict) -> dict:
    """The endpoint config (``open_namespace``'s) of Spark options of conftest's ``wal``
    shape: the file log, Kafka with its ``kafka.client``, or S3 with its ``s3.*``."""
    if wal.get("backend") == "kafka":
        options = {"bootstrap_servers": wal["kafka.bootstrap.servers"],
                   "client": wal.get("kafka.client", "confluent")}
    else:
        options = {"path": wal["path"], **{k[3:]: v for k, v in wal.items() if k.startswith("s3.")}}
    return {"backend": wal.get("backend", "file"), "namespace": wal["namespace"],
            "options": options}


def wal_namespace(wal: dict, create: bool = True):
    """The Namespace behind Spark options of conftest's ``wal`` shape, opened with the
    Python API."""
    from pyspark_durable.endpoint import open_namespace

    return open_namespace(wal_config(wal), create=create)


def assert_acknowledged(ns, writer: str, writer_step: int, step: int) -> None:
    """An acknowledged pair is remembered as its step, or is older than the namespace's
    dedup window (wal/replay/dedup.py), so that a recommit of it is refused: never a second step."""
    got = ns.committed_step(writer, writer_step)
    if got is None:
        assert ns.ledger.state.dedup.too_old(writer, writer_step, None) is not None, \
            f"acknowledged ({writer}, {writer_step}) as step {step}, and the WAL forgot it"
    else:
        assert got == step, f"acknowledged ({writer}, {writer_step}) as step {step}, not {got}"


@contextmanager
def log_clock(shift_s: float) -> Iterator[None]:
    """Entries the file log appends in this process inside the block carry times
    ``shift_s`` off, so a test sets "older than the grace" instead of racing for it."""
    import pyspark_durable.log.file.log as file_log

    real = file_log.time
    file_log.time = SimpleNamespace(time=lambda: real.time() + shift_s,
                                    monotonic=real.monotonic, sleep=real.sleep)
    try:
        yield
    finally:
        file_log.time = real


def frame_spans(segment: Path) -> dict[int, tuple[int, int]]:
    """offset -> (first byte, end byte) of every frame of a whole file-log segment."""
    from pyspark_durable.log.file.segments import walk_frames

    with open(segment, "rb") as f:
        size = segment.stat().st_size
        found, end, _, bad = walk_frames(f, 0, size, int(segment.stem))
    assert bad is None and end == size
    ends = [*found[1:], end]
    return {int(segment.stem) + i: span for i, span in enumerate(zip(found, ends, strict=True))}


def flip_a_byte_of_entry(region: Path, offset: int) -> None:
    """Flip one byte in the body of the file log's entry at ``offset`` of the region
    folder ``region`` (its segment holds it whole), as a bad disk would."""
    segment = next(region.glob("*.seg"))
    first, end = frame_spans(segment)[offset]
    data = bytearray(segment.read_bytes())
    data[(first + end) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))


def spark_checkpoint_like(folder: Path) -> Path:
    """A folder laid out as Spark's checkpointLocation: a metadata file beside offsets
    and commits folders (a commits folder, as a file namespace has)."""
    for name in ("offsets", "commits", "sources"):
        (folder / name).mkdir(parents=True)
    (folder / "metadata").write_text('{"id":"5f0e2c7a"}\n')
    (folder / "commits" / "0").write_text("v1\n{}\n")
    return folder


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b""
            for p in sorted(folder.rglob("*"))}
