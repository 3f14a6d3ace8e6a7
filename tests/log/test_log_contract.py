"""The log contract, run on every backend (file, memory, and kafka when present)."""

from __future__ import annotations

import threading

import pytest

from pyspark_durable.errors import (
    ConfigError,
    EntryFreed,
    FreeUnsupported,
    LogNotFound,
    OffsetOutOfRange,
)
from pyspark_durable.log import Record

pytestmark = pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python", "s3",
                                  "s3-moto")


def rec(i: int, size: int = 20) -> Record:
    return Record(
        key=i.to_bytes(8, "big"),
        value=(f"value-{i}-".encode() * size)[: max(size, 1)],
        headers=(("attempt", b"a1"), ("n", str(i).encode())),
    )


def test_round_trip(make_store):
    """This tests that appended records read back identical, in order, with headers."""
    log = make_store().open_region(0)
    records = [rec(i) for i in range(50)]
    offsets = log.append(records)
    assert offsets == list(range(50))
    got = list(log.read(0))
    assert [(e.offset, e.key, e.value, e.headers) for e in got] == [
        (i, r.key, r.value, r.headers) for i, r in enumerate(records)
    ]
    assert all(e.timestamp_ms > 0 for e in got)
    assert got[3].header("n") == b"3" and got[3].header("missing") is None


def test_empty_region_boundaries(make_store):
    """This tests that an empty log has watermarks 0/0, reads nothing, and rejects reading past the end."""
    log = make_store().open_region(7)
    assert (log.low_watermark(), log.high_watermark()) == (0, 0)
    assert list(log.read(0)) == []
    with pytest.raises(OffsetOutOfRange, match="past the high watermark 0"):
        list(log.read(1))


def test_read_ranges_and_past_end(make_store):
    """This tests that read honours [start, end), clamps end, and start == end reads nothing."""
    log = make_store().open_region(0)
    log.append([rec(i) for i in range(10)])
    assert [e.offset for e in log.read(3, 6)] == [3, 4, 5]
    assert [e.offset for e in log.read(8, 100)] == [8, 9]
    assert list(log.read(10)) == []
    with pytest.raises(OffsetOutOfRange, match=r"readable offsets are \[0, 10\)"):
        log.read(11)


def test_an_acknowledged_range_reads_whole_in_a_handle_that_never_saw_it(make_store):
    """This tests that read_acknowledged (how the WAL reads a committed run) yields
    exactly [start, end) in a handle opened before another handle appended those
    entries, and that a deleted start is OffsetOutOfRange, as for read."""
    reader = make_store().open_region(0)
    writer = make_store().open_region(0)
    writer.append([rec(i) for i in range(4)])
    assert [e.offset for e in reader.read(0)] == [0, 1, 2, 3]  # the reader knows 4
    writer.append([rec(i) for i in range(4, 10)])
    got = list(reader.read_acknowledged(2, 9))
    assert [(e.offset, e.key) for e in got] == [(i, rec(i).key) for i in range(2, 9)]
    assert list(reader.read_acknowledged(9, 9)) == []
    writer.delete_before(5)
    with pytest.raises(OffsetOutOfRange, match="below the low watermark"):
        list(reader.read_acknowledged(3, 9))


def test_a_reader_goes_on_to_its_own_acknowledged_end_and_a_deleted_range_fails(make_store):
    """This tests that read_following (how a commit's replay reads what other writers
    appended before its own record) yields exactly [start, end) in a handle that had
    read up to start before another handle appended past it, where end is the handle's
    own acknowledged append's; and that a range the log no longer holds is
    OffsetOutOfRange (at the latest when the read reaches it), as for read."""
    reader = make_store().open_region(0)
    writer = make_store().open_region(0)
    writer.append([rec(i) for i in range(4)])
    assert [e.offset for e in reader.read(0)] == [0, 1, 2, 3]  # the reader stopped at 4
    writer.append([rec(i) for i in range(4, 10)])
    end = reader.append([rec(10)])[0] + 1  # its own append, acknowledged: [0, 11)
    assert end == 11
    got = list(reader.read_following(4, end))
    assert [(e.offset, e.key, e.value) for e in got] == [
        (i, rec(i).key, rec(i).value) for i in range(4, 11)]
    assert list(reader.read_following(end, end)) == []
    writer.delete_before(6)
    with pytest.raises(OffsetOutOfRange):
        list(reader.read_following(4, end))
    assert [e.offset for e in reader.read_following(7, end)] == [7, 8, 9, 10]


def test_a_handle_that_knew_an_older_end_appends_past_a_deletion_under_it(make_store):
    """This tests that an append through a handle whose idea of the end is older than
    a deletion another handle made (on S3 the deleted objects' keys may be created
    again) lands at the log's end, readable by every handle, never below the low
    watermark where no reader looks."""
    stale = make_store().open_region(0)
    other = make_store().open_region(0)
    assert stale.append([rec(0), rec(1)]) == [0, 1]  # it knows the end: 2
    for i in range(2, 8, 2):
        other.append([rec(i), rec(i + 1)])
    other.delete_before(6)
    assert stale.append([rec(8), rec(9)]) == [8, 9]
    fresh = make_store().open_region(0)
    assert (fresh.low_watermark(), fresh.high_watermark()) == (6, 10)
    assert [(e.offset, e.key) for e in fresh.read(6)] == [(i, rec(i).key) for i in range(6, 10)]


def test_offsets_dense_and_monotonic(make_store):
    """This tests that offsets continue densely across many appends of varied sizes."""
    log = make_store().open_region(1)
    seen: list[int] = []
    for n in (1, 5, 0, 17, 3, 64):
        seen += log.append([rec(len(seen) + i) for i in range(n)])
    assert seen == list(range(len(seen)))
    assert log.high_watermark() == len(seen)


def test_reopen_keeps_everything(make_store):
    """This tests that closing and reopening the store keeps every entry and the low watermark."""
    store = make_store()
    log = store.open_region(2)
    records = [rec(i, size=300) for i in range(400)]
    log.append(records)
    log.delete_before(5)
    store.close()
    log2 = make_store().open_region(2, create=False)
    assert (log2.low_watermark(), log2.high_watermark()) == (5, 400)
    assert [e.value for e in log2.read(5)] == [r.value for r in records[5:]]
    assert log2.append([rec(400)]) == [400]


def test_delete_before_moves_low_watermark_only(make_store):
    """This tests that delete_before raises the low watermark, never the high one, and never goes back."""
    log = make_store().open_region(0)
    log.append([rec(i, size=500) for i in range(300)])
    log.delete_before(120)
    assert (log.low_watermark(), log.high_watermark()) == (120, 300)
    with pytest.raises(OffsetOutOfRange, match="below the low watermark 120"):
        log.read(119)
    assert next(iter(log.read(120))).key == rec(120).key
    log.delete_before(50)
    assert log.low_watermark() == 120
    log.delete_before(10_000)
    assert (log.low_watermark(), log.high_watermark()) == (300, 300)
    assert log.append([rec(300)]) == [300]
    assert [e.offset for e in log.read(300)] == [300]


def test_regions_are_isolated(make_store):
    """This tests that several regions keep their own offsets, content and watermarks."""
    store = make_store()
    a, b = store.open_region(0), store.open_region(3)
    a.append([rec(i) for i in range(5)])
    b.append([rec(100 + i) for i in range(2)])
    a.delete_before(2)
    assert (a.high_watermark(), b.high_watermark()) == (5, 2)
    assert b.low_watermark() == 0
    assert [e.key for e in b.read(0)] == [rec(100).key, rec(101).key]
    assert store.list_regions() == [0, 3]


def test_open_missing_log_without_create(make_store):
    """This tests that opening a log that does not exist, without create, is a typed error."""
    with pytest.raises(LogNotFound, match="log=region_9"):
        make_store().open_region(9, create=False)


def test_bad_names_are_rejected(make_store):
    """This tests that log and region names that cannot be folder or topic names are refused."""
    store = make_store()
    with pytest.raises(ConfigError, match="invalid"):
        store.open_log("a/b")
    with pytest.raises(ConfigError, match="non-negative"):
        store.open_region(-1)


def test_snapshots_highest_version_wins(make_store):
    """This tests that the highest stored version of a snapshot is returned whatever the
    order of the writes (a slow writer of an older version never hides a newer one),
    that versions are listed and pruned, and None is returned when there is none."""
    store = make_store()
    assert store.read_snapshot("meta") is None
    store.write_snapshot("meta", 7, b"seven" * 1000)
    store.write_snapshot("meta", 3, b"three")  # late, older: must not win
    store.write_snapshot("other", 1, b"x")
    reopened = make_store()
    assert reopened.read_snapshot("meta") == (7, b"seven" * 1000)
    assert reopened.snapshot_versions("meta") == [3, 7]
    assert reopened.read_snapshot_version("meta", 3) == b"three"
    assert store.read_snapshot("other") == (1, b"x")
    store.write_snapshot("meta", 9, b"nine")
    store.prune_snapshots("meta", keep=2)
    assert make_store().snapshot_versions("meta") == [7, 9]
    store.delete_snapshot("meta", 9)
    assert make_store().read_snapshot("meta") == (7, b"seven" * 1000)


def test_concurrent_appenders(make_store):
    """This tests that threads appending at once all succeed with distinct, dense offsets."""
    log = make_store().open_region(0)
    results: dict[int, list[int]] = {}

    def worker(t: int) -> None:
        got = []
        for i in range(20):
            got += log.append([rec(t * 1000 + i * 3 + j) for j in range(3)])
        results[t] = got

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_offsets = sorted(o for offs in results.values() for o in offs)
    assert all_offsets == list(range(6 * 60))
    by_offset = {e.offset: e.key for e in log.read(0)}
    for t, offs in results.items():
        for i, off in enumerate(offs):
            assert by_offset[off] == rec(t * 1000 + i).key


def test_large_values(make_store):
    """This tests that a 1 MiB value round-trips byte for byte."""
    log = make_store().open_region(0)
    big = bytes(range(256)) * 4096
    log.append([Record(b"k", big)])
    assert next(iter(log.read(0))).value == big


def test_list_namespaces(make_store, store_config, namespace):
    """This tests that a namespace with logs is listed by its backend."""
    from pyspark_durable.log import store_class

    make_store().open_region(0).append([rec(0)])
    backend, config = store_config
    assert namespace in store_class(backend).list_namespaces(config)


def test_append_async_keeps_order_and_resolves_when_readable(make_store):
    """This tests that appends handed over without waiting get dense offsets in call
    order, that each future resolves to its records' offsets, and that what they
    acknowledged reads back identical (empty values included) after a reopen."""
    store = make_store()
    log = store.open_region(2)
    groups = [[rec(10 * g + i, size=(0 if i == 1 else 40 * g + 1)) for i in range(g % 4 + 1)]
              for g in range(12)]
    futures = [log.append_async(group) for group in groups]
    assert log.append_async([]).result() == []
    offsets = [f.result(timeout=30) for f in futures]
    flat = [r for group in groups for r in group]
    assert [o for offs in offsets for o in offs] == list(range(len(flat)))
    assert [len(o) for o in offsets] == [len(g) for g in groups]
    log2 = make_store().open_region(2, create=False)
    assert log2.high_watermark() == len(flat)
    assert [(e.key, e.value, e.headers) for e in log2.read(0)] == \
        [(r.key, r.value, r.headers) for r in flat]


@pytest.mark.backends("file", "memory")
def test_free_single_entries_reads_around_them_and_survives_a_reopen(make_store):
    """This tests freeing entries in the middle of a log: ``read`` skips them, a reader
    that needs every entry of a range (``read_acknowledged``) gets EntryFreed naming the
    first freed offset, the watermarks and every other entry stay, appends go on densely,
    and a fresh store sees the same after a reopen."""
    store = make_store()
    log = store.open_region(0)
    records = [rec(i, size=300) for i in range(400)]
    log.append(records)
    assert log.can_free
    log.free([(10, 20), (15, 30), (200, 201), (399, 400), (500, 600)])
    expected = [i for i in range(400) if not (10 <= i < 30 or i in (200, 399))]
    assert log.freed_ranges() == [(10, 30), (200, 201), (399, 400)]
    assert (log.low_watermark(), log.high_watermark()) == (0, 400)
    assert [e.offset for e in log.read(0)] == expected
    assert [e.offset for e in log.read(25, 35)] == list(range(30, 35))
    assert [e.value for e in log.read(195, 205)] == [records[i].value
                                                     for i in range(195, 205) if i != 200]
    assert [e.offset for e in log.read_acknowledged(30, 200)] == list(range(30, 200))
    with pytest.raises(EntryFreed, match="offset 200 was freed") as got:
        list(log.read_acknowledged(190, 210))
    assert got.value.where["offset"] == 200
    with pytest.raises(EntryFreed, match="offset 399 was freed"):
        list(log.read_acknowledged(398, 400))
    assert log.append([rec(400)]) == [400]
    store.close()
    again = make_store().open_region(0, create=False)
    assert again.freed_ranges() == [(10, 30), (200, 201), (399, 400)]
    assert [e.offset for e in again.read(0)] == [*expected, 400]
    again.free([(10, 12)])  # already freed: nothing changes
    again.delete_before(20)
    assert again.freed_ranges() == [(20, 30), (200, 201), (399, 400)]
    assert [e.offset for e in again.read(20, 32)] == [30, 31]


@pytest.mark.backends("kafka-confluent")
def test_a_backend_that_cannot_free_says_so(make_store):
    """This tests that a backend that deletes only a prefix (Kafka) says it cannot free
    single entries, and that asking it to is a typed error, not a silent no-op."""
    log = make_store().open_region(0)
    log.append([rec(i) for i in range(3)])
    assert not log.can_free
    with pytest.raises(FreeUnsupported, match="cannot free single entries"):
        log.free([(1, 2)])
    assert [e.offset for e in log.read(0)] == [0, 1, 2]
