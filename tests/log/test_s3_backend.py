"""The S3 log against a real server (SeaweedFS) and the faults a bucket delivers: lost
answers, throttling, a store that ignores preconditions, a missing bucket, wrong keys,
missing rights, paths of schemes the WAL cannot store to.

The rule under test (log/s3/log.py): an entry object is created only with
``If-None-Match: *`` at a boundary of the chain, so two creates of one offset can never
both succeed, and a create whose answer was lost is settled by the token in its metadata.
"""

from __future__ import annotations

import threading
import time
import uuid

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import open_namespace
from pyspark_durable.errors import (
    AccessDenied,
    AppendIndeterminate,
    AuthenticationFailed,
    BackendUnavailable,
    ConfigError,
    LogNotFound,
    OffsetOutOfRange,
)
from pyspark_durable.log import Record, open_store
from pyspark_durable.log.s3.client import PreconditionsIgnored
from pyspark_durable.wal import Namespace
from tests.helpers import S3_BUCKET, s3_options
from tests.s3proxy import s3_proxy

pytestmark = pytest.mark.s3
COMMITS_PUT = r"/logs/commits/e/"  # the path of a commit record's object


@pytest.fixture
def proxy(s3_server):
    with s3_proxy(s3_server.endpoint) as p:
        yield p


def rows(tag: str, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()),
                     "tag": pa.array([f"{tag}-{i}" for i in range(n)])})


def keys_below(server, options: dict) -> list[str]:
    prefix = options["path"].removeprefix(f"s3://{S3_BUCKET}/")
    listed = server.client().list_objects_v2(Bucket=S3_BUCKET, Prefix=prefix)
    return [item["Key"] for item in listed.get("Contents", ())]


def test_a_lost_answer_to_a_commit_is_settled_to_exactly_one_step(s3_server, proxy):
    """This tests that a commit whose PUT was stored but whose answer was lost (the
    client retries it, and the retry gets 412 from its own object) returns its step once:
    one step, its rows once, by content."""
    options = s3_options(s3_server, endpoint_url=proxy.endpoint)
    ns = Namespace(open_store("s3", "lost", **options))
    attempt = ns.begin("w", 0)
    attempt.write("t", rows("a", 5))
    attempt.receipt()
    proxy.lose_put_answers(1, path=COMMITS_PUT)
    assert attempt.commit() == 0
    assert len(proxy.lost) == 1 and "/logs/commits/e/" in proxy.lost[0][1]
    fresh = Namespace(open_store("s3", "lost", **options))
    assert fresh.steps() == range(0, 1)
    got = pa.Table.from_batches([b for sb in fresh.read_step(0) for b in sb.batches])
    assert got.equals(rows("a", 5))


def test_a_lost_answer_with_the_store_unreachable_is_indeterminate_and_a_recommit_settles_it(
        s3_server, proxy):
    """This tests that when the answer is lost and the object cannot be looked up either,
    the commit raises AppendIndeterminate saying so (never "failed"), and a recommit of the
    same writer step once the store is back finds the first: exactly one step."""
    options = s3_options(s3_server, endpoint_url=proxy.endpoint, max_attempts="2")
    ns = Namespace(open_store("s3", "indet", **options))
    attempt = ns.begin("w", 7)
    attempt.write("t", rows("b", 4))
    attempt.receipt()
    proxy.lose_put_answers(None, path=COMMITS_PUT, methods=("PUT", "HEAD"))
    with pytest.raises(AppendIndeterminate, match="may or may not be stored") as caught:
        attempt.commit()
    assert caught.value.retriable
    assert proxy.lost[0][0] == "PUT"  # the create reached the server
    proxy.forward()
    again = Namespace(open_store("s3", "indet", **options))
    retry = again.begin("w", 7)
    retry.write("t", rows("b", 4))
    assert retry.commit() == 0
    assert again.steps() == range(0, 1)
    got = pa.Table.from_batches([b for sb in again.read_step(0) for b in sb.batches])
    assert got.equals(rows("b", 4))


def test_a_put_cut_before_its_body_stores_nothing_and_every_entry_reads_back(s3_server, proxy):
    """This tests that a create whose head reached the server without one byte of its body
    (the writer's connection ended there, FIN, as when a writer dies between the two sends)
    leaves nothing damaged at its offset: the server refuses it, as every PUT carries its
    body's CRC-32, the client's retry creates the whole object, and a fresh handle reads
    every entry back by content. Without the checksum SeaweedFS stores an empty object
    with the create's metadata, which the retry then settles as its own."""
    options = s3_options(s3_server, endpoint_url=proxy.endpoint)
    log = open_store("s3", "cut", **options).open_log("region_0")
    assert log.append([Record(b"k", b"v0")]) == [0]
    proxy.cut_put_bodies(1, path=r"/logs/region_0/e/")
    assert log.append([Record(b"k", b"v1"), Record(b"k", b"v2")]) == [1, 2]
    [(path, status)] = proxy.cut
    assert path.endswith("/logs/region_0/e/00000000000000000001") and status != "200", proxy.cut
    assert log.append([Record(b"k", b"v3")]) == [3]
    direct = {**options, "endpoint_url": s3_server.endpoint}  # a fresh handle: no copies kept
    fresh = open_store("s3", "cut", **direct).open_log("region_0", create=False)
    assert [(e.offset, e.value) for e in fresh.read(0)] == [
        (0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"v3")]


def test_throttling_is_retried_with_backoff_then_typed_and_the_log_stays_dense(
        s3_server, proxy):
    """This tests that 503 SlowDown is retried by the client (bounded: max_attempts per
    request), is a typed, retriable BackendUnavailable naming the throttling once the
    attempts are spent, and that the appends after it keep the offsets dense."""
    options = s3_options(s3_server, endpoint_url=proxy.endpoint, max_attempts="3")
    log = open_store("s3", "slow", **options).open_log("region_0")
    assert log.append([Record(b"k", b"v0")]) == [0]
    proxy.throttle(2)
    assert log.append([Record(b"k", b"v1")]) == [1]  # two 503s, the third attempt passes
    assert proxy.throttled == 2
    proxy.throttle(None)
    with pytest.raises(BackendUnavailable, match="SlowDown") as caught:
        log.append([Record(b"k", b"v2")])
    assert caught.value.retriable
    assert proxy.throttled == 2 + 3 + 3  # the create's three attempts, the lookup's three
    proxy.forward()
    assert log.append([Record(b"k", b"v3")]) == [2]
    assert [e.value for e in log.read(0)] == [b"v0", b"v1", b"v3"]


def test_a_store_that_ignores_conditional_writes_is_refused_and_nothing_is_written(
        s3_server, proxy):
    """This tests that a store answering 200 to a second create-if-absent is refused
    with a typed error naming the endpoint, before any WAL object is written."""
    options = s3_options(s3_server, endpoint_url=proxy.endpoint)
    proxy.ignore_conditions()
    store = open_store("s3", "lying", **options)
    with pytest.raises(PreconditionsIgnored, match="ignores conditional writes") as caught:
        Namespace(store)
    assert proxy.endpoint in str(caught.value)
    assert keys_below(s3_server, options) == []


def test_a_missing_bucket_is_named_and_a_read_creates_nothing(s3_server):
    """This tests that a bucket that does not exist is a typed error naming it, for a
    writer and for a reader."""
    options = s3_options(s3_server)
    options["path"] = f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/wal"
    with pytest.raises(LogNotFound, match=r"bucket 'no-such-bucket-.*' does not exist"):
        Namespace(open_store("s3", "orders", **options))
    with pytest.raises(LogNotFound, match="does not exist"):
        open_namespace({"backend": "s3", "namespace": "orders", "options": options},
                       create=False)


@pytest.mark.parametrize("wrong", ["key", "secret"])
def test_wrong_keys_are_named_and_the_secret_is_never_printed(s3_server, wrong):
    """This tests that an unknown access key or a wrong secret is AuthenticationFailed
    saying which options to check, and that the secret appears in no message."""
    key, secret = s3_server.admin
    secret = f"{secret}-wrong" if wrong == "secret" else secret
    options = s3_options(s3_server, access_key_id=f"{key}X" if wrong == "key" else key,
                         secret_access_key=secret)
    with pytest.raises(AuthenticationFailed, match="refused the S3 credentials") as caught:
        Namespace(open_store("s3", "keys", **options))
    assert secret not in str(caught.value) and secret not in repr(caught.value)
    assert "access key id and secret" in str(caught.value)


def test_no_right_to_delete_is_named_before_anything_is_written(s3_server):
    """This tests that credentials without s3:DeleteObject are refused at the first write
    with AccessDenied naming the right (the cleaner deletes objects below the retention
    bound), and that a read-only principal can still read a WAL but not write it."""
    key, secret = s3_server.nodelete
    options = s3_options(s3_server, access_key_id=key, secret_access_key=secret)
    with pytest.raises(AccessDenied, match="s3:DeleteObject"):
        Namespace(open_store("s3", "nodel", **options))
    admin = s3_options(s3_server, prefix=options["path"].rsplit("/", 1)[1])
    ns = Namespace(open_store("s3", "ro", **admin))
    a = ns.begin("w", 0)
    a.write("t", rows("r", 3))
    a.commit()
    key, secret = s3_server.readonly
    reader_options = {**admin, "access_key_id": key, "secret_access_key": secret}
    reader = open_namespace({"backend": "s3", "namespace": "ro", "options": reader_options},
                            create=False)
    assert reader.steps() == range(0, 1)
    with pytest.raises(AccessDenied, match="s3:PutObject"):
        w = reader.begin("w", 1)
        w.write("t", rows("r", 1))
        w.commit()


@pytest.mark.parametrize("path", ["s3a://b/wal", "gs://b/wal", "hdfs://nn/wal", "s3:/b/wal",
                                  "S3N://b/x"])
def test_a_url_the_wal_cannot_store_to_is_refused_by_name(tmp_path, monkeypatch, path):
    """This tests that a URL of another scheme is refused naming it, and never becomes a
    local folder named after the scheme."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="is not a location the WAL can store to"):
        open_namespace({"backend": "file", "namespace": "x", "options": {"path": path}})
    with pytest.raises(ConfigError, match="is not a location"):
        open_store("file", "x", path=path)
    assert list(tmp_path.iterdir()) == []


def test_an_s3_path_opens_the_s3_log_from_every_entry_point(s3_server, tmp_path, monkeypatch):
    """This tests that an s3:// path given as the file backend's path (the Python API's
    ``options.path``) writes to the bucket, not to a local folder named ``s3:``."""
    monkeypatch.chdir(tmp_path)
    options = s3_options(s3_server)
    ns = open_namespace({"namespace": "api", "options": options})
    assert ns.store.type_name == "s3"
    a = ns.begin("w", 0)
    a.write("t", rows("p", 2))
    a.commit()
    assert list(tmp_path.iterdir()) == []
    assert any("/api/logs/commits/" in k for k in keys_below(s3_server, options))


def test_the_cleaner_deletes_the_objects_below_the_bound(s3_server):
    """This tests that retention on S3 deletes the entry objects below the region's and the
    commits log's low watermarks (each ends at or below it), keeps every later one, and
    that the retained steps read back by content from a fresh handle."""
    from pyspark_durable.wal import Cleaner

    options = s3_options(s3_server)
    ns = Namespace(open_store("s3", "ret", **options))
    for ws in range(6):
        a = ns.begin("w", ws)
        a.write("t", rows(f"s{ws}", 3))
        a.commit()
    ns.expire(4)
    Cleaner(ns, grace_ms=0).run_once()
    a = ns.begin("w", 6)
    a.write("t", rows("s6", 3))
    a.commit()
    ns.expire(5)
    Cleaner(ns, grace_ms=0).run_once()  # the commits log is trimmed below the older snapshot
    prefix = options["path"].removeprefix(f"s3://{S3_BUCKET}/") + "/ret/logs/"
    for name in ("region_0", "commits"):
        log = ns.store.open_log(name, create=False)
        low, high = log.low_watermark(), log.high_watermark()
        firsts = [int(k.rsplit("/", 1)[1]) for k in keys_below(s3_server, options)
                  if k.startswith(f"{prefix}{name}/e/")]
        assert low > 0, name
        assert firsts == list(range(low, high)), (name, low, high, firsts)  # one entry each
    fresh = Namespace(open_store("s3", "ret", **options))
    assert fresh.steps() == range(5, 7)
    for step in (5, 6):
        got = pa.Table.from_batches([b for sb in fresh.read_step(step) for b in sb.batches])
        assert got.equals(rows(f"s{step}", 3))


def test_a_read_learns_low_from_its_listing_and_never_yields_below_it(s3_server):
    """This tests the requests a read saves and the rule they keep: a read of the tail is
    its LISTs and objects (``low``'s ETag rides on the LIST of the end, so ``low`` is
    fetched only once it changed), a read of a range the handle knows fetches ``low`` beside its object,
    a reader of ranges in order gets the next object fetched ahead, and that reader still
    gets OffsetOutOfRange once another handle moved ``low`` past the object fetched ahead."""
    options = s3_options(s3_server)
    writer = open_store("s3", "marks", **options).open_log("region_0")
    values = [bytes([i]) * 70_000 for i in range(4)]  # above what a handle keeps in memory
    for value in values:
        writer.append([Record(b"k", value)])
    writer.delete_before(1)
    store = open_store("s3", "marks", **options)
    reader = store.open_log("region_0", create=False)
    calls: list[str] = []
    store.client.meta.events.register(
        "before-parameter-build.s3",
        lambda model, params, **_: calls.append(
            f"{model.name} {params.get('Key', '').rsplit('/', 1)[-1]}".strip()))

    def read(start: int, end: int | None = None) -> list[str]:
        calls.clear()
        assert [e.value for e in reader.read(start, end)] == values[start:end]
        return sorted(calls)

    read(1)
    assert read(1) == ["GetObject 00000000000000000001", "GetObject 00000000000000000002",
                       "GetObject 00000000000000000003", "ListObjectsV2",
                       "ListObjectsV2"]  # the end, the range's objects; no GET of low
    assert read(1, 2) == ["GetObject 00000000000000000001", "GetObject low"]
    assert "GetObject 00000000000000000002" in read(2, 3)
    deadline = time.monotonic() + 30  # read in order: the object at 3 is fetched ahead
    while "GetObject 00000000000000000003" not in calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(calls) == ["GetObject 00000000000000000002", "GetObject 00000000000000000003",
                             "GetObject low"]
    assert read(3, 4) == ["GetObject low"]  # its object: the one fetched ahead
    read(1, 2)
    read(2, 3)
    writer.delete_before(4)
    with pytest.raises(OffsetOutOfRange, match="below the low watermark 4"):
        list(reader.read(3, 4))
    with pytest.raises(OffsetOutOfRange, match="below the low watermark 4"):
        list(reader.read(3))


def test_an_announced_append_sends_only_its_create_and_a_stale_end_still_lands_dense(s3_server):
    """This tests that a large append announced with ``expect_append`` (the writer is
    still encoding it) has its end listed meanwhile, so the append itself sends only its
    create and the GET of ``low`` after it; and the rule that makes that safe: an end
    another writer has moved past since the listing makes the create lose (412), never
    overwrite, and the append lands at the next boundary, every offset dense and each
    value once."""
    options = s3_options(s3_server)
    store = open_store("s3", "announced", **options)
    log = store.open_log("region_0")
    calls: list[str] = []
    listed = threading.Event()
    store.client.meta.events.register(
        "before-parameter-build.s3", lambda model, **_: calls.append(model.name))
    store.client.meta.events.register(
        "after-call.s3.ListObjectsV2", lambda **_: listed.set())
    big = [bytes([i]) * 100_000 for i in range(3)]

    log.expect_append(len(big[0]))
    assert listed.wait(30), f"no LIST after the announcement: {calls}"
    calls.clear()
    assert log.append([Record(b"k", big[0])]) == [0]
    assert calls == ["PutObject", "GetObject"], calls  # the create, then `low` (not below it)

    # announced again: then another writer's append ends the chain past that listing
    listed.clear()
    log.expect_append(len(big[1]))
    assert listed.wait(30)
    other = open_store("s3", "announced", **options).open_log("region_0", create=False)
    assert other.append([Record(b"o", b"another writer's")]) == [1]
    assert log.append([Record(b"k", big[1])]) == [2]
    assert log.append([Record(b"k", big[2])]) == [3]  # not announced: lists first, as ever
    fresh = open_store("s3", "announced", **options).open_log("region_0", create=False)
    assert [e.value for e in fresh.read(0)] == [big[0], b"another writer's", big[1], big[2]]
