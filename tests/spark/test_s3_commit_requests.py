"""What a streaming micro-batch's commit costs on S3, in requests, and the rule that lets
it skip a catch-up: the commit's early answers use a state just caught up, and the
replay after its append decides (docs/protocol.md, "Early answers from a state just
caught up"). No Spark session: the driver's functions, as its commit calls them."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

import pyspark_durable.wal.namespace as namespace_module
from pyspark_durable.log import open_store
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.spark.session_cache import namespace_for
from pyspark_durable.spark.sink import (
    WalCommitMessage,
    commit_receipts,
    keep_retention,
    write_batches,
)
from pyspark_durable.wal import Namespace
from tests.helpers import s3_options

pytestmark = pytest.mark.s3


def calls_of(client) -> list[str]:
    """The S3 operations ``client`` sends from now on, as they are sent."""
    calls: list[str] = []
    client.meta.events.register("before-call.s3",
                                lambda model, **_: calls.append(model.name))
    return calls


def test_a_micro_batch_commit_is_a_list_a_put_and_a_get_and_its_retention_check_none(s3_server):
    """This tests that a streaming micro-batch's driver side on S3, through the session's
    cached handle, sends one LIST (the handle's catch-up before), one conditional PUT
    (the commit record) and one GET of the commits log's ``low`` (the record did not land
    below it), and nothing to read its record back (it landed where the handle's replay
    stood), and the retention check after it nothing when no pass is due; the steps are
    committed once each."""
    options = s3_options(s3_server)
    opts = WalOptions.parse({"backend": "s3", "namespace": f"mb{uuid.uuid4().hex[:8]}",
                             "path": options.pop("path"),
                             **{f"s3.{k}": v for k, v in options.items()}})
    ns = namespace_for(opts)
    calls = calls_of(ns.store.client)
    rows = pa.table({"id": list(range(100)), "v": [f"v{i}" for i in range(100)]})
    commits, checks = [], []
    for batch_id in range(4):
        receipt = write_batches(opts, iter(rows.to_batches()), "query-requests", batch_id,
                                uuid.uuid4().hex, rows.schema)
        calls.clear()
        assert commit_receipts(opts, [WalCommitMessage(receipt)], None, batch_id,
                               consecutive=True) == batch_id
        commits.append(sorted(calls))
        calls.clear()
        keep_retention(opts)
        checks.append(sorted(calls))
    assert commits[1:] == [["GetObject", "ListObjectsV2", "PutObject"]] * 3, commits
    assert checks[1:] == [[]] * 3, checks  # the first one's cleaner pass was due
    assert namespace_for(opts).steps() == range(4)


def test_a_commit_answered_early_from_a_stale_state_returns_the_step_replay_decides(
        s3_server, monkeypatch):
    """This tests the rule that makes the skipped catch-up safe: a handle whose state
    missed another handle's commit of the same pair (caught up within the window, so
    it does not look again) appends its own record, finds it did not land where its
    replay stood, reads the log back, and replay ignores the record as a duplicate:
    both committers are told the one step, and the WAL holds one step."""
    monkeypatch.setattr(namespace_module, "JUST_CAUGHT_UP_S", 3600.0)  # no look again
    options = s3_options(s3_server)
    path = options.pop("path")
    first = Namespace(open_store("s3", "race", path=path, **options))
    second = Namespace(open_store("s3", "race", path=path, **options))
    first.refresh()  # caught up now: its early answer will not see second's commit
    receipts = {}
    for name, ns in (("first", first), ("second", second)):
        attempt = ns.begin("writer", 7, attempt_id=name)
        attempt.write("t", pa.table({"id": [1, 2]}))
        receipts[name] = attempt.receipt()
    step = second.commit("writer", 7, [receipts["second"]])
    calls = calls_of(first.store.client)
    assert first.commit("writer", 7, [receipts["first"]]) == step
    assert "PutObject" in calls, "the stale handle answered without appending: " + str(calls)
    assert "ListObjectsV2" in calls[calls.index("PutObject"):], f"nothing read back: {calls}"
    fresh = Namespace(open_store("s3", "race", path=path, **options))
    assert fresh.steps() == range(step, step + 1)
    assert fresh.step_commit(step).attempts == ("second",)
