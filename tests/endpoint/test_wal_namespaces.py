"""Which namespaces a WAL holds, as the endpoint says for every backend: a listed name
with a commits log, and on the file backend no Spark checkpoint."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from pyspark_durable.endpoint import is_wal_namespace, open_namespace, wal_namespaces, write_step
from pyspark_durable.errors import ConfigError, LogNotFound, UnknownNamespace
from pyspark_durable.log import open_store
from pyspark_durable.log.kafka.store import KafkaLogStore
from tests.helpers import S3_BUCKET, s3_options, spark_checkpoint_like, tree


@pytest.fixture
def file_wal(tmp_path: Path) -> Path:
    """A file WAL root with namespaces 'shop' and 'other', a Spark checkpoint 'ckpt', an
    empty folder 'stray' and a folder 'loose' with a folder but no commits log."""
    root = tmp_path / "wal"
    for name in ("shop", "other"):
        ns = open_namespace({"namespace": name, "options": {"path": str(root)}})
        write_step(ns, "w", 0, {"t": [{"id": 1}]})
        ns.close()
    spark_checkpoint_like(root / "ckpt")
    (root / "stray").mkdir()
    (root / "loose" / "region-0").mkdir(parents=True)
    return root


def test_a_file_wal_holds_neither_a_spark_checkpoint_nor_a_stray_folder(file_wal):
    """This tests that wal_namespaces lists only the real namespaces of a file WAL root
    (no Spark checkpoint, no folder without a commits log), that is_wal_namespace says
    the same of each name, and that a root that does not exist is LogNotFound."""
    options = {"path": str(file_wal)}
    assert wal_namespaces({"options": options}) == ["other", "shop"]
    for name, held in [("shop", True), ("other", True), ("ckpt", False), ("stray", False),
                       ("loose", False), ("nope", False)]:
        assert is_wal_namespace({"namespace": name, "options": options}) is held, name
    with pytest.raises(LogNotFound, match="no WAL folder"):
        wal_namespaces({"options": {"path": str(file_wal / "absent")}})
    assert not is_wal_namespace({"namespace": "shop",
                                 "options": {"path": str(file_wal / "absent")}})


def test_opening_what_is_no_namespace_names_only_the_namespaces(file_wal):
    """This tests that opening a Spark checkpoint, a stray folder or a missing name to
    read is UnknownNamespace listing only the real namespaces and where they are, and
    writes nothing into the checkpoint or the stray folder; a real namespace opens."""
    before = tree(file_wal / "ckpt")
    for name in ("ckpt", "stray", "loose", "nope"):
        with pytest.raises(UnknownNamespace) as info:
            open_namespace({"namespace": name, "options": {"path": str(file_wal)}}, create=False)
        assert (info.value.names, info.value.location) == (["other", "shop"], f"folder {file_wal}")
        assert str(info.value) == (f"unknown namespace {name!r}; namespaces: other, shop in "
                                   f"folder {file_wal}")
    assert tree(file_wal / "ckpt") == before
    assert list((file_wal / "stray").iterdir()) == []
    assert not (file_wal / "nope").exists()
    ns = open_namespace({"namespace": "shop", "namespace_id": None,
                         "options": {"path": str(file_wal)}}, create=False)
    assert ns.steps() == range(0, 1)
    ns.close()


def test_a_writer_into_a_spark_checkpoint_is_refused_and_writes_nothing(file_wal):
    """This tests that opening a Spark checkpoint to write (create) is a ConfigError naming
    the folder and the fix, and leaves the checkpoint exactly as it was."""
    before = tree(file_wal / "ckpt")
    with pytest.raises(ConfigError, match=r"'ckpt' there is a Spark checkpoint .* give the "
                                          r"WAL a path of its own") as info:
        open_namespace({"namespace": "ckpt", "options": {"path": str(file_wal)}})
    assert f"folder {file_wal}" in str(info.value)
    assert tree(file_wal / "ckpt") == before


def test_a_memory_namespace_needs_its_commits_log():
    """This tests that on the memory backend a store holding some log but no commits log
    is no namespace, and a namespace written to is."""
    real, half = f"m{uuid.uuid4().hex[:8]}", f"m{uuid.uuid4().hex[:8]}"
    ns = open_namespace({"backend": "memory", "namespace": real})
    write_step(ns, "w", 0, {"t": [{"id": 1}]})
    store = open_store("memory", half)
    store.open_log("region-0")
    names = wal_namespaces({"backend": "memory"})
    assert real in names and half not in names
    ns.close()
    store.close()


def test_a_kafka_namespace_needs_its_commits_topic(monkeypatch):
    """This tests that on Kafka a name with a snapshots topic but no commits topic (or a
    stray topic) is no namespace: one topic listing answers, no broker needed here."""
    topics = ["shop_snapshots", "shop_commits", "shop_region-0", "half_snapshots",
              "orders", "__consumer_offsets"]
    monkeypatch.setattr(KafkaLogStore, "_topics", staticmethod(lambda config: topics))
    assert KafkaLogStore.list_namespaces({}) == ["half", "shop"]
    assert wal_namespaces({"backend": "kafka", "options": {}}) == ["shop"]


@pytest.mark.s3
def test_an_s3_wal_holds_neither_a_spark_checkpoint_nor_a_stray_prefix(moto_s3_server):
    """This tests that below an S3 WAL's prefix a Spark checkpoint and a stray prefix are
    no namespaces (their objects are not below ``logs/commits/``), and a real one is."""
    import boto3

    options = s3_options(moto_s3_server)
    ns = open_namespace({"namespace": "orders", "options": options})
    write_step(ns, "w", 0, {"t": [{"id": 1}]})
    ns.close()
    prefix = options["path"].removeprefix(f"s3://{S3_BUCKET}/")
    client = boto3.client("s3", endpoint_url=moto_s3_server.endpoint, region_name="us-east-1",
                          aws_access_key_id=moto_s3_server.admin[0],
                          aws_secret_access_key=moto_s3_server.admin[1])
    for key in ("ckpt/metadata", "ckpt/commits/0", "ckpt/offsets/0", "stray/x"):
        client.put_object(Bucket=S3_BUCKET, Key=f"{prefix}/{key}", Body=b"{}")
    assert wal_namespaces({"options": options}) == ["orders"]
    with pytest.raises(UnknownNamespace) as info:
        open_namespace({"namespace": "ckpt", "options": options}, create=False)
    assert info.value.names == ["orders"]
