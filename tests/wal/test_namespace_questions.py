"""Outside ``wal/``, code asks a Namespace questions (``info``, ``tables``, the reads); the
replayed state is its ledger's, and no answer hands out a part of it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.replay.stored_state import ReaderPosition


def test_answers_cannot_change_the_namespace(tmp_path):
    """This tests that what a Namespace answers (readers, table regions, tables, steps) are
    copies or read-only views: changing them leaves the namespace as it was."""
    ns = Namespace(open_store("file", "q", path=str(tmp_path)))
    attempt = ns.begin("w", 0)
    attempt.write("t", pa.table({"id": [1, 2]}), region_id=3)
    ns.commit("w", 0, [attempt.receipt()])
    ns.commit_reader("r", 1, hold=True)
    assert ns.refresh() is None  # the replayed state stays inside the handle
    assert ns.info.readers() == {"r": ReaderPosition(1, True)}
    assert ns.info.reader_position("r") == ReaderPosition(1, True)
    tid = ns.tables.resolve("t")
    assert dict(ns.tables.regions(tid)) == {3: 1} and ns.tables.region_pairs() == {(3, tid)}
    assert ns.info.regions() == (3,) and ns.info.newest_committed_writer_step("w") == 0
    assert [c.step for c in ns.info.indexed_steps()] == [0] and ns.info.first_indexed_step() == 0
    for handed in (ns.info.indexed_steps()[0], ns.step_commit(0)):
        handed.first_sequences.clear()
        handed.step = 7
    assert ns.info.indexed_steps()[0].step == 0 and ns.step_commit(0).first_sequences == {(3, tid): 0}
    for view in (ns.info.readers(), ns.tables.regions(tid)):
        with pytest.raises(TypeError):  # read-only views
            view[9] = 9  # type: ignore[index]
    ns.tables.by_id(refresh=False).clear()
    assert ns.info.readers() == {"r": ReaderPosition(1, True)} and dict(ns.tables.regions(tid)) == {3: 1}
    assert tid in ns.tables.by_id(refresh=False)
    ns.close()
