"""The CLI pointed at the folder a job keeps its WAL, checkpoints and output in: it knows a
Spark checkpoint and a Spark output folder when it sees one, and names the WAL root."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_durable.cli import main

pytestmark = pytest.mark.spark


def cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def files_of(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*")}


@pytest.fixture
def job_folder(spark, tmp_path: Path) -> Path:
    """README's layout: ``wal`` (namespace 'shop'), a parquet copy's ``ckpt`` and ``out``,
    and a durablewal -> durablewal copy's ``ckpt-r`` (into namespace 'copy'), all made by
    real queries."""
    job = tmp_path / "job"
    wal = str(job / "wal")
    (
        spark.range(30)
        .selectExpr("id", "id % 3 as region")
        .write.format("durablewal")
        .option("namespace", "shop")
        .option("regionColumn", "region")
        .mode("append")
        .save(wal)
    )
    for sink, ckpt, target, extra in (
        ("parquet", "ckpt", str(job / "out"), {}),
        ("durablewal", "ckpt-r", wal, {"namespace": "copy"}),
    ):
        q = (
            spark.readStream.format("durablewal")
            .option("namespace", "shop")
            .load(wal)
            .writeStream.format(sink)
            .options(**extra)
            .option("checkpointLocation", str(job / ckpt))
            .trigger(availableNow=True)
            .start(target)
        )
        q.awaitTermination()
        assert q.exception() is None
    return job


def test_cli_names_spark_checkpoints_and_the_wal_root(job_folder, capsys):
    """This tests that the CLI pointed one folder above the WAL root lists no Spark
    checkpoint or output folder as a namespace: `namespaces` fails (exit 2) naming the
    checkpoints as Spark checkpoints and giving the WAL root as the PATH; a command for a
    namespace names the folder that holds it; a checkpoint given as PATH is called one; a
    checkpoint or stray folder inside the WAL root is no namespace; and none of this
    writes a byte into the checkpoints."""
    job = job_folder
    before = {name: files_of(job / name) for name in ("ckpt", "ckpt-r", "out")}
    for extra in ([], ["--names-only"]):
        code, out, err = cli(capsys, "namespaces", job, *extra)
        assert (code, out) == (2, ""), (out, err)
        assert err == (
            f"durablewal: error: no WAL namespace in folder {job}: the WAL root is "
            f"inside it: give PATH {job / 'wal'} (namespaces copy, shop); ckpt, "
            "ckpt-r are Spark checkpoints, not WALs; out is a Spark output folder\n"
        )
    code, out, err = cli(capsys, "steps", job, "--namespace", "shop")
    assert (code, out) == (2, "")
    assert err.startswith(
        f"durablewal: error: unknown namespace 'shop'; namespaces: none; namespace 'shop' is "
        f"in {job / 'wal'}: give PATH {job / 'wal'}; ckpt, ckpt-r are Spark checkpoints, not WALs"
    ), err
    for ckpt in ("ckpt", "ckpt-r"):
        code, out, err = cli(capsys, "steps", job / ckpt, "--namespace", "shop")
        assert (code, out) == (2, "")
        assert err.startswith(
            f"durablewal: error: PATH {job / ckpt} is a Spark checkpoint "
            "(a query's checkpointLocation), not a WAL: give the WAL root"
        ), err
        assert err.endswith(f"the WAL root beside it: {job / 'wal'} (namespaces copy, shop)\n")
    # a checkpoint (and a stray folder) kept inside the WAL root is no namespace: not
    # listed, named as what it is when asked for, never opened
    (job / "ckpt").rename(job / "wal" / "ckpt")
    (job / "wal" / "stray").mkdir()
    code, out, err = cli(capsys, "namespaces", job / "wal")
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert sorted(rows) == ["copy", "shop"]
    code, out, err = cli(capsys, "steps", job / "wal", "--namespace", "ckpt")
    assert (code, out) == (2, "")
    assert err.startswith("durablewal: error: unknown namespace 'ckpt'; namespaces: copy, shop; "
                          f"'ckpt' in folder {job / 'wal'} is a Spark checkpoint, not a WAL"), err
    (job / "wal" / "stray").rmdir()
    (job / "wal" / "ckpt").rename(job / "ckpt")
    assert {name: files_of(job / name) for name in before} == before
    code, out, _ = cli(capsys, "steps", job / "wal", "--namespace", "copy")
    assert code == 0 and "retained steps [0, 1)" in out


def test_a_read_names_no_checkpoint_or_stray_folder_as_a_namespace(spark, job_folder):
    """This tests that a read of a missing namespace from a WAL root that also keeps a
    Spark checkpoint and a stray folder lists only the WAL's namespaces, and writes
    nothing into the checkpoint."""
    from pyspark.errors import PySparkException

    wal = job_folder / "wal"
    (job_folder / "ckpt").rename(wal / "ckpt")
    (wal / "stray").mkdir()
    before = files_of(wal / "ckpt")
    for name in ("nope", "ckpt", "stray"):
        with pytest.raises(PySparkException) as info:
            spark.read.format("durablewal").option("namespace", name).load(str(wal)).collect()
        assert (f"unknown namespace '{name}': pick one with .option(\"namespace\", NAME); "
                f"namespaces in folder {wal}: copy, shop") in str(info.value), str(info.value)
    assert files_of(wal / "ckpt") == before
