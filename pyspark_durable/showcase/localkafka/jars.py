"""Apache Kafka's jars, as the lock file beside this module lists them
(``kafka-jars.txt``: each jar's Maven coordinates, SHA-256 and size), fetched once from
Maven Central into a cache folder and verified there.

The lock travels with the package, so an install from a package index starts a broker
with neither Maven nor a source checkout: the first start downloads the jars (about
46 MB) with the standard library into ``$XDG_CACHE_HOME/durablewal/kafka-jars/<Kafka
version>/`` (default ``~/.cache/...``); later starts, and every folder's broker, use that
copy. ``DURABLEWAL_MAVEN_MIRROR`` names another Maven repository (an ``https://`` mirror,
or ``file://`` a local one such as ``~/.m2/repository``). Each jar is written to a
temporary file, checked against its SHA-256 and only then renamed into place, so the
cache never holds a half-written or unverified jar; a file lock makes processes that
start at once fetch once. The lock is made from ``jars/kafka-broker/pom.xml`` by Maven
(``python -m tests.kafka_maven`` in a source checkout), which the test suite's own
brokers still resolve with.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark_durable.errors import DurableWalError

LOCK = Path(__file__).with_name("kafka-jars.txt")
MIRROR_VAR = "DURABLEWAL_MAVEN_MIRROR"
CENTRAL = "https://repo1.maven.org/maven2"
BROKER_ARTIFACT = "org.apache.kafka:kafka_2.13"  # its version names the cache folder
TIMEOUT_S = 30.0  # per connect and per read: a dead route fails in seconds, not minutes
CHUNK = 1 << 16


class KafkaJarsError(DurableWalError):
    """Apache Kafka's jars could not be made ready (the lock file, the cache, a fetch)."""


class JarChecksumError(KafkaJarsError):
    """A fetched jar is not the one the lock file names (its SHA-256 or size differs):
    a broken mirror or a tampered download. Nothing of it is kept."""

    def __init__(self, jar: Jar, url: str, got: str, size: int) -> None:
        self.jar = jar
        super().__init__(
            f"{jar.coordinates} from {url} is not the jar the lock file names: SHA-256 "
            f"{got} ({size} bytes), expected {jar.sha256} ({jar.size} bytes); nothing was "
            f"kept: check the mirror ({MIRROR_VAR}) and start again")


class JarsUnreachableError(KafkaJarsError):
    """The Maven repository could not be reached (no route, no DNS, a timeout, HTTP
    errors): what failed and what to do instead."""


@dataclass(frozen=True)
class Jar:
    """One line of the lock file: ``group:artifact:version[:classifier] sha256 size``."""

    group: str
    artifact: str
    version: str
    classifier: str | None
    sha256: str
    size: int

    @property
    def coordinates(self) -> str:
        tail = f":{self.classifier}" if self.classifier else ""
        return f"{self.group}:{self.artifact}:{self.version}{tail}"

    @property
    def file_name(self) -> str:
        tail = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{tail}.jar"

    @property
    def repo_path(self) -> str:
        """Its path in a Maven repository (Maven Central's layout)."""
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"

    def line(self) -> str:
        return f"{self.coordinates} {self.sha256} {self.size}"


def parse_lock(text: str, source: str = "kafka-jars.txt") -> list[Jar]:
    """The jars of a lock file's text; ``#`` starts a comment. A malformed line is an
    error naming it: a lock that is wrong must not be half used."""
    jars = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        parts = fields[0].split(":")
        if (len(fields) != 3 or len(parts) not in (3, 4) or not all(parts)
                or len(fields[1]) != 64 or not fields[2].isdigit()):
            raise KafkaJarsError(f"{source} line {number} is not 'group:artifact:version"
                                 f"[:classifier] sha256 size': {raw!r}")
        try:
            int(fields[1], 16)
        except ValueError:
            raise KafkaJarsError(f"{source} line {number}: {fields[1]!r} is no SHA-256") from None
        jars.append(Jar(*parts[:3], parts[3] if len(parts) == 4 else None,
                        fields[1].lower(), int(fields[2])))
    if not jars:
        raise KafkaJarsError(f"{source} lists no jar")
    return jars


def kafka_version(jars: list[Jar]) -> str:
    """The Apache Kafka release the lock holds (its broker jar's version)."""
    for jar in jars:
        if f"{jar.group}:{jar.artifact}" == BROKER_ARTIFACT:
            return jar.version
    raise KafkaJarsError(f"the lock file lists no {BROKER_ARTIFACT} jar")


def cache_folder(version: str) -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "durablewal" / "kafka-jars" / version


def mirror_url() -> str:
    """The Maven repository to fetch from: ``$DURABLEWAL_MAVEN_MIRROR`` or Maven Central."""
    return (os.environ.get(MIRROR_VAR) or CENTRAL).rstrip("/")


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def kafka_classpath(progress: Callable[[str], None] = _say) -> str:
    """The classpath of Apache Kafka's jars (each jar, so a stale jar left in the cache
    folder is never on it), fetched first when the cache lacks any."""
    jars = parse_lock(LOCK.read_text())
    folder = cache_folder(kafka_version(jars))
    ensure_jars(jars, folder, mirror_url(), progress)
    return os.pathsep.join(str(folder / jar.file_name) for jar in jars)


def ensure_jars(jars: list[Jar], folder: Path, mirror: str,
                progress: Callable[[str], None] = _say) -> None:
    """Fetch into ``folder`` the jars it lacks, verified, once for every process that
    asks at the same time (a file lock). A jar already there was verified when it was
    renamed into place. Two lines on ``progress``: what is fetched, and that it is done."""
    if all((folder / jar.file_name).is_file() for jar in jars):
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / ".fetch.lock", "w")  # held for the whole fetch
    except OSError as exc:
        raise KafkaJarsError(f"cannot create the jar cache {folder}: {exc}; set "
                             "XDG_CACHE_HOME to a writable folder") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = [jar for jar in jars if not (folder / jar.file_name).is_file()]
        if not missing:
            return
        version = kafka_version(jars)
        where = "Maven Central" if mirror == CENTRAL else mirror
        total = sum(jar.size for jar in missing)
        progress(f"fetching Apache Kafka {version} from {where}: {len(missing)} jars, "
                 f"{megabytes(total)} (once; cached in {folder})")
        began = time.monotonic()
        for jar in missing:
            fetch_jar(jar, folder, mirror, version)
        progress(f"fetched Apache Kafka {version}: {len(missing)} jars, {megabytes(total)} "
                 f"in {time.monotonic() - began:.1f} s")


def fetch_jar(jar: Jar, folder: Path, mirror: str, version: str) -> Path:
    """One jar, downloaded to a temporary file in ``folder``, verified, then renamed to
    its name: an interrupted or wrong download leaves nothing behind."""
    url = f"{mirror}/{jar.repo_path}"
    fd, tmp = tempfile.mkstemp(prefix=f".{jar.file_name}.", suffix=".part", dir=folder)
    try:
        digest, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                    while chunk := response.read(CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            except (urllib.error.URLError, OSError) as exc:
                raise unreachable(jar, url, exc, version) from None
        if digest.hexdigest() != jar.sha256 or size != jar.size:
            raise JarChecksumError(jar, url, digest.hexdigest(), size)
        os.replace(tmp, folder / jar.file_name)
        return folder / jar.file_name
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def unreachable(jar: Jar, url: str, exc: BaseException, version: str) -> KafkaJarsError:
    """What failed (the URL and why) and what to do: go online once, or name a mirror."""
    if isinstance(exc, urllib.error.HTTPError):
        why = f"HTTP {exc.code} {exc.reason}"
    else:
        why = str(getattr(exc, "reason", None) or exc) or type(exc).__name__
    return JarsUnreachableError(
        f"could not fetch Apache Kafka {version}'s jar {jar.coordinates} from {url} ({why}); "
        f"a local Kafka broker needs its jars once (cached after): connect to the internet "
        f"once, or set {MIRROR_VAR} to a Maven mirror (https://host/maven2, or a local "
        f"repository: file:///path/to/.m2/repository, which mvn -f jars/kafka-broker/pom.xml "
        f"dependency:resolve fills in a source checkout)")
