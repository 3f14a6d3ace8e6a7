"""Apache Kafka's jars for ``durablewal kafka start``: the lock file the package carries,
and the fetch from a Maven repository into the cache folder: verified, nothing half
written kept, a typed error (never a traceback) when the repository is unreachable."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyspark_durable.showcase.localkafka import jars
from pyspark_durable.showcase.localkafka.jars import (
    LOCK,
    MIRROR_VAR,
    Jar,
    JarChecksumError,
    JarsUnreachableError,
    KafkaJarsError,
    kafka_version,
    parse_lock,
)
from tests.helpers import free_port
from tests.kafka_maven import lock_text, serve


def fake_lock(tmp_path: Path, served: dict[str, bytes]) -> tuple[Path, list[Jar]]:
    """A lock of small jars (Kafka's broker jar among them, for its version) and a Maven
    repository serving ``served`` (by file name) at their paths."""
    real = {"kafka_2.13-9.9.jar": b"broker bytes", "tiny-1.0-linux.jar": b"a classifier's jar"}
    locked = [Jar("org.apache.kafka", "kafka_2.13", "9.9", None,
                  hashlib.sha256(real["kafka_2.13-9.9.jar"]).hexdigest(), 12),
              Jar("com.example", "tiny", "1.0", "linux",
                  hashlib.sha256(real["tiny-1.0-linux.jar"]).hexdigest(), 18)]
    repo = tmp_path / "repo"
    for jar in locked:
        (repo / jar.repo_path).parent.mkdir(parents=True, exist_ok=True)
        (repo / jar.repo_path).write_bytes(served.get(jar.file_name, real[jar.file_name]))
    lock = tmp_path / "kafka-jars.txt"
    lock.write_text("# a test's lock\n" + "".join(jar.line() + "\n" for jar in locked))
    return repo, locked


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(jars, "LOCK", tmp_path / "kafka-jars.txt")
    return tmp_path / "cache" / "durablewal" / "kafka-jars" / "9.9"


def test_the_lock_file_lists_one_kafka_release_by_coordinates_and_sha256():
    """This tests that the package's lock file parses: Kafka's broker, its tools and its
    log4j binding, each jar once, with a SHA-256 and a size, named as Maven names them."""
    locked = parse_lock(LOCK.read_text())
    names = {f"{jar.group}:{jar.artifact}" for jar in locked}
    assert {"org.apache.kafka:kafka_2.13", "org.apache.kafka:kafka-tools",
            "org.apache.logging.log4j:log4j-slf4j-impl"} <= names
    assert len(names) == len(locked) == len({jar.file_name for jar in locked})
    assert kafka_version(locked) == "4.3.1"
    broker = next(jar for jar in locked if jar.artifact == "kafka_2.13")
    assert broker.repo_path == "org/apache/kafka/kafka_2.13/4.3.1/kafka_2.13-4.3.1.jar"
    assert Jar("g.h", "a", "1", "linux", "0" * 64, 1).repo_path == "g/h/a/1/a-1-linux.jar"
    assert parse_lock(broker.line() + "  # a comment\n\n") == [broker]


@pytest.mark.parametrize("line", [
    "org.apache:kafka 0123 5",  # two parts, short digest
    f"a:b:1 {'0' * 64}",  # no size
    f"a:b:1 {'z' * 64} 5",  # not hexadecimal
    f"a::1 {'0' * 64} 5",  # an empty part
])
def test_a_malformed_lock_line_is_an_error_naming_it(line):
    """This tests that a lock line that is not ``coordinates sha256 size`` is refused,
    naming the line, rather than half used."""
    with pytest.raises(KafkaJarsError, match="line 2"):
        parse_lock(f"# header\n{line}\n")


def test_the_first_start_fetches_verifies_and_caches_the_jars(tmp_path, cache, monkeypatch):
    """This tests that the jars are fetched from the mirror the variable names into the
    cache folder, announced in one line first and one at the end; the classpath names
    each jar; a second call fetches nothing (the mirror is gone by then)."""
    repo, locked = fake_lock(tmp_path, {})
    said: list[str] = []
    with serve(repo) as url:
        monkeypatch.setenv(MIRROR_VAR, url)
        classpath = jars.kafka_classpath(said.append)
    assert classpath == os.pathsep.join(str(cache / jar.file_name) for jar in locked)
    assert said[0] == (f"fetching Apache Kafka 9.9 from {url}: 2 jars, 0.0 MB "
                       f"(once; cached in {cache})")
    assert re.fullmatch(r"fetched Apache Kafka 9\.9: 2 jars, 0\.0 MB in \d+\.\d s", said[1])
    assert (cache / "tiny-1.0-linux.jar").read_bytes() == b"a classifier's jar"
    assert jars.kafka_classpath(said.append) == classpath and len(said) == 2


def test_a_jar_whose_checksum_differs_is_refused_and_nothing_is_kept(tmp_path, cache,
                                                                    monkeypatch):
    """This tests that a mirror serving another jar than the lock names (same size,
    other bytes) fails with JarChecksumError naming the jar, and the cache keeps no
    file of it, neither under its name nor half written."""
    repo, _ = fake_lock(tmp_path, {"tiny-1.0-linux.jar": b"a tampered jar...."})
    with serve(repo) as url:
        monkeypatch.setenv(MIRROR_VAR, url)
        with pytest.raises(JarChecksumError) as caught:
            jars.kafka_classpath(lambda line: None)
    assert caught.value.jar.coordinates == "com.example:tiny:1.0:linux"
    assert f"com.example:tiny:1.0:linux from {url}/com/example/tiny/1.0/tiny-1.0-linux.jar " \
           "is not the jar the lock file names" in str(caught.value)
    assert sorted(p.name for p in cache.iterdir()) == [".fetch.lock", "kafka_2.13-9.9.jar"]


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


def test_an_unreachable_mirror_is_a_typed_error_saying_what_to_do(tmp_path, cache,
                                                                  monkeypatch):
    """This tests that a mirror nobody answers (a closed port on 127.0.0.1, as an offline
    machine meets Maven Central) fails at once with JarsUnreachableError naming the URL
    and what to do, and leaves nothing in the cache; a 404 says so the same way."""
    fake_lock(tmp_path, {})
    url = closed_port_url()
    monkeypatch.setenv(MIRROR_VAR, url)
    begin = time.monotonic()
    with pytest.raises(JarsUnreachableError, match=re.escape(f"from {url}/")) as caught:
        jars.kafka_classpath(lambda line: None)
    assert time.monotonic() - begin < 5
    assert "connect to the internet once, or set DURABLEWAL_MAVEN_MIRROR" in str(caught.value)
    assert [p.name for p in cache.iterdir()] == [".fetch.lock"]
    (tmp_path / "empty").mkdir()
    with serve(tmp_path / "empty") as url:
        monkeypatch.setenv(MIRROR_VAR, url)
        with pytest.raises(JarsUnreachableError, match="HTTP 404"):
            jars.kafka_classpath(lambda line: None)


def test_kafka_start_offline_prints_one_error_line_and_no_traceback(tmp_path):
    """This tests that `durablewal kafka start` on a machine that cannot reach the Maven
    repository exits 2 with, after the line announcing the fetch, one `durablewal: error:`
    line saying what failed and what to do, and no traceback."""
    env = {**os.environ, MIRROR_VAR: closed_port_url(),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "pyspark_durable", "kafka", "start", "--dir", tmp_path / "kafka",
         "--port", str(free_port())], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    announce, error = done.stderr.splitlines()
    assert announce.startswith(f"fetching Apache Kafka 4.3.1 from {env[MIRROR_VAR]}: 47 jars, ")
    assert error.startswith("durablewal: error: could not fetch Apache Kafka 4.3.1's jar ")
    assert "connect to the internet once" in error


@pytest.mark.kafka
def test_the_lock_file_lists_exactly_the_jars_the_pom_resolves():
    """This tests that the lock file is what `python -m tests.kafka_maven` makes of
    jars/kafka-broker/pom.xml now: the jars Maven resolves, their SHA-256 and sizes
    (Maven reads its local repository: the Kafka lane resolved them for its brokers).
    Marked kafka: it runs Maven, as that lane does; a Maven that fails fails it."""
    assert LOCK.read_text() == lock_text(), "the pom changed: run python -m tests.kafka_maven"
