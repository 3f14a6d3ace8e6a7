"""Every public boundary answers bad input with a typed error naming what and where."""

from __future__ import annotations

import errno
import os
import re

import pytest

from pyspark_durable.endpoint import (
    DurableInputEndpoint,
    input_endpoint,
    open_namespace,
    read_steps,
    write_step,
)
from pyspark_durable.errors import (
    BackendUnavailable,
    ConfigError,
    DurableWalError,
    RoutingError,
    SchemaMismatch,
    StepExpired,
    StepNotCommitted,
)
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner


@pytest.fixture
def shop_wal(tmp_path):
    """A file WAL with two committed steps of table t (region 0) and u (region 1)."""
    config = {"backend": "file", "namespace": "shop", "options": {"path": str(tmp_path / "w")}}
    ns = open_namespace(config)
    write_step(ns, "w", 0, {"t": [{"id": 1}]})
    write_step(ns, "w", 1, {"u": [{"id": 2}]}, region_id=1)
    return config, ns


CASES = {
    "path is a file": (lambda c, ns, tmp: open_store("file", "x", path=str(tmp / "f")),
                       ConfigError, "is a file, not a folder"),
    "segment size not a number": (
        lambda c, ns, tmp: open_store("file", "x", path=str(tmp), segment_size_bytes="abc"),
        ConfigError, "segment_size_bytes='abc'"),
    "rows are not mappings": (lambda c, ns, tmp: write_step(ns, "w", 5, {"t": [1, 2]}),
                              ConfigError, "row 0 of table 't' is a int, not a mapping"),
    "rows are a string": (lambda c, ns, tmp: write_step(ns, "w", 5, {"t": "abc"}),
                          ConfigError, "rows of table 't' must be an Arrow table"),
    "data is not a mapping": (lambda c, ns, tmp: write_step(ns, "w", 5, [{"id": 1}]),
                              ConfigError, "data must map table names to rows, not list"),
    "rows of mixed types": (lambda c, ns, tmp: write_step(ns, "w", 5, {"t": [{"id": 1},
                                                                          {"id": "x"}]}),
                            SchemaMismatch, "rows of table 't' do not convert to Arrow"),
    "writer id None": (lambda c, ns, tmp: write_step(ns, None, 5, {"t": [{"id": 1}]}),
                       ConfigError, "writer id None is not a non-empty string"),
    "read_step of a string": (lambda c, ns, tmp: list(ns.read_step("abc")),
                              ConfigError, "step 'abc' is not an integer >= 0"),
    "regions of an unknown type": (lambda c, ns, tmp: input_endpoint({**c, "regions": 7}),
                                   ConfigError, "regions must be a list or a comma-separated"),
    "regions not ids": (lambda c, ns, tmp: input_endpoint({**c, "regions": ["x"]}),
                        ConfigError, "regions: 'x' is not a region id"),
    "unknown table": (lambda c, ns, tmp: input_endpoint({**c, "tables": ["nope"]}),
                      RoutingError, "unknown table 'nope'; tables: t, u"),
    "expire below 0": (lambda c, ns, tmp: ns.expire(-3), ConfigError,
                       "expire step -3 is not an integer >= 0"),
    "mark_deleted below 0": (lambda c, ns, tmp: ns.tables.mark_deleted("t", -4), ConfigError,
                             "sequence -4 is not an integer >= 0"),
    "reader commit below 0": (lambda c, ns, tmp: DurableInputEndpoint(ns, "r").commit(-1),
                              ConfigError, "step -1 is not an integer >= 0"),
    "read_steps start past the end": (lambda c, ns, tmp: read_steps(ns, "t", start=100),
                                      StepNotCommitted,
                                      "start step 100 is not committed yet; committed steps are"),
    "read_steps end past the end": (lambda c, ns, tmp: read_steps(ns, "t", end=100),
                                    StepNotCommitted, "end step 100 is past the committed steps; committed "),
    "read_steps start after end": (lambda c, ns, tmp: read_steps(ns, "t", start=2, end=1),
                                   ConfigError, "start 2 is after end 1"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_a_typed_error_naming_it(shop_wal, tmp_path, case):
    """This tests that one bad input at a public boundary raises the typed error that names
    it, and that the namespace still holds its two steps afterwards."""
    (tmp_path / "f").write_text("not a folder")
    config, ns = shop_wal
    call, kind, message = CASES[case]
    with pytest.raises(kind, match=re.escape(message)):
        call(config, ns, tmp_path)
    assert read_steps(open_namespace(config), "t").column("id").to_pylist() == [1]
    assert open_namespace(config).steps() == range(0, 2)


def test_comma_separated_regions_are_parsed_not_split_into_characters(shop_wal):
    """This tests that ``regions="0,1"`` in an endpoint config means regions 0 and 1."""
    config, _ = shop_wal
    assert input_endpoint({**config, "regions": "0,1"}).regions == {0, 1}
    assert input_endpoint({**config, "regions": "1"}).regions == {1}


def test_read_steps_of_an_expired_start_names_what_is_left(shop_wal):
    """This tests that read_steps from an expired step is StepExpired naming the range."""
    _, ns = shop_wal
    ns.expire(1)
    Cleaner(ns, grace_ms=0).run_once()
    with pytest.raises(StepExpired, match=re.escape("available steps are [1, 2)")):
        read_steps(ns, "t", start=0)


def test_disk_full_is_typed_names_log_and_path_and_loses_nothing(shop_wal, monkeypatch):
    """This tests that an append failing with ENOSPC is a BackendUnavailable naming the
    namespace, the log and the folder, that no step is committed by it, that the
    acknowledged steps stay readable, and that writing works again once space is back."""
    config, ns = shop_wal
    real = os.writev

    def full(fd, buffers):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "writev", full)
    with pytest.raises(BackendUnavailable) as err:
        write_step(ns, "w", 2, {"t": [{"id": 3}]})
    text = str(err.value)
    assert "namespace=shop log=region_0" in text and "(the disk is full)" in text
    assert str(config["options"]["path"]) in text
    monkeypatch.setattr(os, "writev", real)
    assert open_namespace(config).steps() == range(0, 2)
    assert write_step(ns, "w", 2, {"t": [{"id": 3}]}) == 2
    assert read_steps(open_namespace(config), "t").column("id").to_pylist() == [1, 3]


def test_records_that_free_space_spend_the_reserve_on_a_full_disk(shop_wal, monkeypatch,
                                                                   tmp_path):
    """This tests that on a disk full to the last byte (every write fails with ENOSPC while
    the namespace's reserve takes the room) a step fails with DiskFull and leaves the
    reserve alone, that setting a retention policy releases the reserve and succeeds, that
    the cleaner then frees, re-creates the reserve and says so, and that a cleaner pass
    on a full disk with no reserve left raises DiskFull rather than looping."""
    from pyspark_durable.errors import DiskFull
    from pyspark_durable.log.base import Reserve
    from pyspark_durable.wal import RetentionPolicy

    config, ns = shop_wal
    write_step(ns, "w", 2, {"t": [{"id": 3}]})
    reserve = tmp_path / "w" / "shop" / "cleaner.reserve"
    real = os.writev

    def full(fd, buffers):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def writev(fd, buffers):  # the reserve holds the last free bytes
        return full(fd, buffers) if reserve.exists() else real(fd, buffers)

    monkeypatch.setattr(os, "writev", writev)
    with pytest.raises(DiskFull, match=r"log=region_0: appending failed .*\(the disk is full\)"):
        write_step(ns, "w", 3, {"t": [{"id": 4}]})
    assert reserve.exists()
    ns.set_retention(RetentionPolicy(max_steps=1))
    assert not reserve.exists() and ns.retention().max_steps == 1
    report = Cleaner(ns, grace_ms=0).run_once()
    assert report.reserve is Reserve.RECREATED and report.expired_before == (0, 2)
    assert report.freed_entries == 2 and reserve.exists()
    assert read_steps(open_namespace(config), "t").column("id").to_pylist() == [3]

    ns.expire(3)  # spends the re-created reserve: the disk is still full
    assert not reserve.exists()
    monkeypatch.setattr(os, "writev", full)  # and now nothing is left at all
    with pytest.raises(DiskFull, match="log=commits: appending failed"):
        ns.set_retention(RetentionPolicy(max_steps=2))
    with pytest.raises(DiskFull):
        Cleaner(ns, grace_ms=0).run_once()


def test_failed_atomic_writes_leave_no_temporary_file(shop_wal, monkeypatch, tmp_path):
    """This tests that a cleaner whose low-watermark or snapshot write fails (disk full at
    fsync) raises a typed error naming what it wrote and where, leaves no temporary file
    behind, and that the next pass, with space back, cleans."""
    config, ns = shop_wal
    ns.expire(2)
    real = os.fsync
    failing = [".tmp"]

    def fsync(fd):
        target = os.readlink(f"/proc/self/fd/{fd}")
        if all(part in target for part in failing):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(BackendUnavailable, match=r"log=region_0: deleting failed at .*region_0"):
        Cleaner(ns, grace_ms=0).run_once()
    failing.append("snapshots")
    with pytest.raises(BackendUnavailable, match=r"writing a snapshot failed at .*snapshots"):
        Cleaner(ns, grace_ms=0).run_once()
    monkeypatch.setattr(os, "fsync", real)
    assert [p for p in (tmp_path / "w").rglob("*") if p.name.endswith(".tmp")] == []
    assert Cleaner(open_namespace(config), grace_ms=0).run_once().freed_entries == 0
    assert open_namespace(config).steps() == range(2, 2)


def test_except_durable_wal_error_catches_every_error_the_package_defines():
    """This tests that a user's ``except DurableWalError`` catches every exception class
    any module of pyspark_durable defines (all imported and searched), so a new error
    class outside the root fails here. The one exception is the CLI's CliError, which
    never leaves ``durablewal``'s main: it becomes a message and an exit status."""
    import importlib
    import inspect
    import pkgutil

    import pyspark_durable

    defined = {}
    for info in pkgutil.walk_packages(pyspark_durable.__path__, "pyspark_durable."):
        if info.name.endswith("__main__"):  # runs the CLI when imported
            continue
        module = importlib.import_module(info.name)
        defined.update({f"{module.__name__}.{obj.__qualname__}": obj for obj in vars(module).values()
                        if inspect.isclass(obj) and issubclass(obj, BaseException)
                        and obj.__module__ == module.__name__})
    assert {"pyspark_durable.errors.ConfigError", "pyspark_durable.errors.DiskFull"} <= set(defined)
    outside = {name for name, kind in defined.items() if not issubclass(kind, DurableWalError)}
    assert outside == {"pyspark_durable.cli.shared.CliError"}, outside


def test_handle_notices_a_restored_or_recreated_wal(shop_wal, tmp_path):
    """This tests that a long-lived handle whose WAL folder was restored from an older copy,
    or deleted and created again, raises IncarnationMismatch naming what it knew and what
    it finds (never stale rows, never a bogus corruption error), then follows the WAL."""
    import shutil

    from pyspark_durable.errors import IncarnationMismatch

    config, ns = shop_wal
    root = tmp_path / "w"
    shutil.copytree(root, tmp_path / "backup")
    for ws in range(2, 5):
        write_step(ns, "w", ws, {"t": [{"id": ws}]})
    assert ns.steps() == range(0, 5)
    shutil.rmtree(root)
    shutil.copytree(tmp_path / "backup", root)
    with pytest.raises(IncarnationMismatch, match=r"the commits log ends at offset \d+, but "
                                                  r"this handle already read up to \d+"):
        ns.steps()
    assert ns.steps() == range(0, 2)
    assert read_steps(ns, "t").column("id").to_pylist() == [1]
    first = ns.info.incarnation
    shutil.rmtree(root)
    fresh = open_namespace(config)
    for ws in range(3):
        write_step(fresh, "x", ws, {"t": [{"id": 100 + ws}]})
    write_step(fresh, "x", 3, {"u": [{"id": 200}]}, region_id=1)
    with pytest.raises(IncarnationMismatch, match=f"this handle knew incarnation {first}; "
                                                  f"the WAL now is incarnation {fresh.info.incarnation}"):
        ns.steps()
    assert read_steps(ns, "t").column("id").to_pylist() == [100, 101, 102]
