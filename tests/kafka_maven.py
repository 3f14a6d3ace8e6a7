"""Apache Kafka's jars as Maven resolves ``jars/kafka-broker/pom.xml`` of the checkout:
the test suite's brokers run from them, and the package's lock file is made from them.

* :func:`kafka_classpath`: the jars copied into ``jars/kafka-broker/libs/`` (ignored by
  git) the first time a test's broker starts, once for every process that asks at the
  same time; the test suite keeps Maven so that its brokers need nothing the package
  fetches.
* :func:`lock_text`: the package's lock file
  (``pyspark_durable/showcase/localkafka/kafka-jars.txt``): each jar the pom resolves,
  its coordinates and the SHA-256 and size of the file Maven resolved.
  ``python -m tests.kafka_maven`` rewrites it after the pom changes.
* :func:`maven_mirror`: ``libs/`` laid out as a Maven repository (links), for the
  package's fetch without the internet (``DURABLEWAL_MAVEN_MIRROR``).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import http.server
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark_durable.showcase.localkafka.jars import LOCK, MIRROR_VAR, Jar, parse_lock
from pyspark_durable.showcase.localkafka.node import BrokerStartError

ROOT = Path(__file__).resolve().parents[1]

POM = ROOT / "jars" / "kafka-broker" / "pom.xml"
LIBS = POM.parent / "libs"
REPO = POM.parent / "repo"  # libs/ as a Maven repository (ignored by git)
HEADER = """\
# Apache Kafka's broker jars, as Maven resolves jars/kafka-broker/pom.xml (runtime scope):
# group:artifact:version[:classifier] sha256 size. Made by `python -m tests.kafka_maven`
# (rerun it after changing the pom); `durablewal kafka start` fetches and verifies these.
"""


def mvn(*args: str) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(["mvn", "-q", "-B", "-f", str(POM), *args],
                              capture_output=True, text=True)
    except FileNotFoundError:
        raise BrokerStartError(
            "resolving Apache Kafka's jars needs Maven ('mvn') and Java 17 on the PATH") from None
    if done.returncode != 0:
        raise BrokerStartError(f"mvn {' '.join(args)} with {POM} failed:\n"
                               f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done


def kafka_classpath() -> str:
    """``libs/*`` of Apache Kafka's jars, resolved once (file-locked, so parallel
    processes resolve it once; again when the pom is newer)."""
    stamp = LIBS / ".resolved"
    with open(POM.parent / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.stat().st_mtime < POM.stat().st_mtime:
            mvn("dependency:copy-dependencies", f"-DoutputDirectory={LIBS}",
                "-DincludeScope=runtime")
            stamp.touch()
    return f"{LIBS}/*"


def resolved() -> list[Jar]:
    """Every jar the pom resolves (Maven's ``dependency:list``, runtime scope), with the
    SHA-256 and size of the file in Maven's local repository."""
    out = POM.parent / ".dependencies.txt"
    mvn("dependency:list", "-DincludeScope=runtime", "-DoutputAbsoluteArtifactFilename=true",
        f"-DoutputFile={out}")
    jars = []
    for line in out.read_text().splitlines():
        fields = line.strip().split()[0].split(":") if line.strip() else []
        if len(fields) < 6 or not fields[-1].endswith(".jar"):
            continue  # the header, blank lines
        group, artifact, _type, *middle, _scope, path = fields
        classifier, version = (middle[0], middle[1]) if len(middle) == 2 else (None, middle[0])
        data = Path(path).read_bytes()
        jars.append(Jar(group, artifact, version, classifier,
                        hashlib.sha256(data).hexdigest(), len(data)))
    out.unlink()
    return sorted(jars, key=lambda jar: jar.coordinates)


def lock_text() -> str:
    return HEADER + "".join(jar.line() + "\n" for jar in resolved())


def maven_repo() -> Path:
    """A Maven repository of the jars in ``libs/`` (links), at the paths the lock file
    names: the package's fetch reads it as it would Maven Central."""
    kafka_classpath()
    for jar in parse_lock(LOCK.read_text()):
        link = REPO / jar.repo_path
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(LIBS / jar.file_name)
    return REPO


def maven_mirror() -> str:
    """:func:`maven_repo` as a ``file://`` URL, for ``DURABLEWAL_MAVEN_MIRROR``."""
    return maven_repo().as_uri()


def fetch_env(cache: Path) -> dict[str, str]:
    """The environment of a ``durablewal kafka start`` that fetches from
    :func:`maven_mirror` (no internet) into the cache folder ``cache``."""
    return {MIRROR_VAR: maven_mirror(), "XDG_CACHE_HOME": str(cache)}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """``folder`` served over HTTP on 127.0.0.1 (a Maven mirror), its URL while open."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    LOCK.write_text(lock_text())
    print(f"wrote {LOCK}: {len(parse_lock(LOCK.read_text()))} jars")
