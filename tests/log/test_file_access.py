"""Who can read a file WAL: its folders and files are made 0700/0600 (``access=private``,
the default) or 0750/0640 (``access=group``) whatever the umask, and ``check`` warns
about a WAL wider than that, saying how to tighten it. Real files, real modes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import ConfigError
from pyspark_durable.log import Record, open_store
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.wal import Cleaner, RetentionPolicy

NS = "shop"
MODES = {"private": (0o700, 0o600), "group": (0o750, 0o640)}


@pytest.fixture(params=[0o000, 0o022], ids=["umask000", "umask022"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under this umask (the modes must not come from it), then restore it."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def modes_below(root: Path) -> dict[str, int]:
    """Every folder and file below and at ``root``, by relative path, with its mode bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def config(root: Path, access: str | None) -> dict:
    options: dict = {"path": str(root), "segment_size_bytes": 1024}
    if access is not None:
        options["access"] = access
    return {"backend": "file", "namespace": NS, "options": options}


def rows(step: int) -> list[dict]:
    return [{"id": step * 10 + i, "note": "x" * 200} for i in range(5)]


def write_and_clean(root: Path, access: str | None) -> None:
    """A WAL written through the Python API, then a retention policy and cleaner passes
    (snapshots, low watermarks and deleted segments come after the first writes)."""
    ns = open_namespace(config(root, access))
    try:
        for step in range(12):
            write_step(ns, "loader", step, {"orders": rows(step)})
            write_step(ns, "events", step, {"events": rows(step)}, region_id=1)
        ns.set_retention(RetentionPolicy(max_steps=3))
        Cleaner(ns, grace_ms=0).run_once()
        write_step(ns, "loader", 12, {"orders": rows(12)})
        Cleaner(ns, grace_ms=0).run_once()
        assert read_steps(ns, "orders")["_step"].to_pylist()[-1] == 24
    finally:
        ns.close()


@pytest.mark.parametrize("access", [None, "private", "group"])
def test_every_folder_and_file_of_a_new_wal_has_the_access_mode_whatever_the_umask(
        tmp_path, umask, access):
    """This tests that a WAL written, given a retention policy and cleaned (so snapshots,
    low watermarks and later segments are made after the first writes) has every folder
    0700 and file 0600 by default or with access=private, and 0750/0640 with
    access=group, under a umask of 000 (which would widen them) and 022 alike."""
    root = tmp_path / "wal"
    write_and_clean(root, access)
    folder_mode, file_mode = MODES[access or "private"]
    found = modes_below(root)
    names = {Path(p).name for p in found}
    # every kind of thing the file log makes is there, so every kind is checked
    assert {"shop", "commits", "region_0", "region_1", "snapshots", "lock", "acked",
            "low_watermark", "cleaner.reserve"} <= names, sorted(names)
    assert any(n.startswith("wal.") for n in names), sorted(names)  # a snapshot version
    assert sum(n.endswith(".seg") for n in names) >= 3, sorted(names)
    assert not [n for n in names if n.endswith(".tmp")]
    for rel, mode in found.items():
        expected = folder_mode if (root / rel).is_dir() else file_mode
        assert mode == expected, f"{rel}: {mode:04o}, expected {expected:04o} (umask {umask:03o})"


def test_group_access_survives_a_umask_that_would_take_the_groups_read_away(tmp_path):
    """This tests that access=group gives the group read access under a umask of 077
    too: the mode is set on creation, not left to the umask to narrow."""
    old = os.umask(0o077)
    try:
        write_and_clean(tmp_path / "wal", "group")
    finally:
        os.umask(old)
    for rel, mode in modes_below(tmp_path / "wal").items():
        assert mode == (0o750 if (tmp_path / "wal" / rel).is_dir() else 0o640), rel


@pytest.mark.parametrize("access", ["private", "group"])
def test_freed_frames_and_low_watermark_files_of_a_log_keep_the_mode(tmp_path, umask, access):
    """This tests that the files a log makes when it frees entries in place (``freed``)
    and deletes below a point (``low_watermark``, a replaced ``freed``) have the mode."""
    store = open_store("file", NS, path=str(tmp_path / "wal"), segment_size_bytes=1024,
                       access=access)
    try:
        log = store.open_log("region_0")
        log.append([Record(key=b"k", value=bytes(300)) for _ in range(20)])
        log.free([(2, 4)])
        log.delete_before(10)
        log.free([(12, 14)])
    finally:
        store.close()
    region = tmp_path / "wal" / NS / "region_0"
    assert {"freed", "low_watermark"} <= {p.name for p in region.iterdir()}
    folder_mode, file_mode = MODES[access]
    for rel, mode in modes_below(tmp_path / "wal").items():
        assert mode == (folder_mode if (tmp_path / "wal" / rel).is_dir() else file_mode), rel


def test_an_existing_folders_mode_is_kept_and_an_unknown_access_is_refused(tmp_path):
    """This tests that the WAL never changes the mode of a folder it did not make (the
    root a user made 0755 stays so), and that an access other than private or group is
    refused naming both, before anything is created."""
    root = tmp_path / "wal"
    root.mkdir()
    os.chmod(root, 0o755)
    write_step(ns := open_namespace(config(root, None)), "w", 0, {"t": rows(0)})
    ns.close()
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert stat.S_IMODE((root / NS).stat().st_mode) == 0o700
    with pytest.raises(ConfigError, match="access='world' is not one of private, group"):
        open_namespace({**config(tmp_path / "other", "world")})
    assert not (tmp_path / "other").exists()


def test_spark_option_file_access_reaches_the_store(tmp_path):
    """This tests that the Spark option ``file.access`` is given to the file backend as
    its ``access``, and that a store opened with it makes group-readable folders."""
    opts = WalOptions.parse({"path": str(tmp_path / "wal"), "file.access": "group"})
    assert opts.store["access"] == "group"
    store = open_store("file", NS, **opts.store)
    try:
        store.open_log("region_0")
    finally:
        store.close()
    assert stat.S_IMODE((tmp_path / "wal" / NS / "region_0").stat().st_mode) == 0o750


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_warns_once_about_a_world_readable_wal_naming_path_mode_and_fix(tmp_path, capsys):
    """This tests that `durablewal check` on a WAL chmod'ed world-readable warns once,
    naming a path with its mode and the chmod that tightens it, and still exits 0 (it is
    not damage); that the command it names makes the warning go; and that a private WAL
    gets none."""
    root = tmp_path / "wal"
    write_and_clean(root, None)
    code, out, err = cli(capsys, "check", root, "--namespace", NS)
    assert (code, err) == (0, "") and "WARNING" not in out, out
    assert json.loads(cli(capsys, "check", root, "--namespace", NS, "--json")[1])["warnings"] == []

    subprocess.run(["chmod", "-R", "go+rX", str(root)], check=True)
    code, out, err = cli(capsys, "check", root, "--namespace", NS)
    assert (code, err) == (0, ""), out
    assert out.startswith("OK: namespace 'shop'")
    warnings = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, out
    ns_folder = root / NS
    assert "other users can read this WAL's rows" in warnings[0]
    assert f"{ns_folder} (mode 0755)" in warnings[0]
    fix = f"chmod -R go-rwx {ns_folder}"
    assert f"`{fix}`" in warnings[0]
    doc = json.loads(cli(capsys, "check", root, "--namespace", NS, "--json")[1])
    assert doc["ok"] is True and len(doc["warnings"]) == 1 and fix in doc["warnings"][0]

    subprocess.run(fix.split(), check=True)
    code, out, _ = cli(capsys, "check", root, "--namespace", NS)
    assert code == 0 and "WARNING" not in out, out


def test_check_of_a_group_wal_warns_only_when_its_access_is_not_given(tmp_path, capsys):
    """This tests that a WAL written with access=group passes `check --file-access group`
    quietly, while a check that takes it for private warns that its group can read it,
    names a file with mode 0640 and the group's way out; and that a group WAL others can
    read is told to drop only the others' bits."""
    root = tmp_path / "wal"
    write_and_clean(root, "group")
    code, out, _ = cli(capsys, "check", root, "--namespace", NS, "--file-access", "group")
    assert code == 0 and "WARNING" not in out, out
    code, out, _ = cli(capsys, "check", root, "--namespace", NS)
    assert code == 0, out
    warning = next(line for line in out.splitlines() if line.startswith("WARNING"))
    assert "its group can read this WAL's rows" in warning and "(mode 0640)" in warning
    assert f"`chmod -R go-rwx {root / NS}`" in warning and "access=group" in warning

    os.chmod(root / NS / "commits" / "acked", 0o644)
    code, out, _ = cli(capsys, "check", root, "--namespace", NS, "--file-access", "group")
    warning = next(line for line in out.splitlines() if line.startswith("WARNING"))
    assert f"{root / NS / 'commits' / 'acked'} (mode 0644)" in warning
    assert "1 folder(s) and file(s)" in warning
    assert f"`chmod -R g-w,o-rwx {root / NS}`" in warning


def test_file_access_is_refused_for_a_wal_that_is_not_a_folder(capsys):
    """This tests that --file-access with a bucket or a broker fails in one line naming
    the file backend, instead of being ignored."""
    code, out, err = cli(capsys, "check", "s3://bucket/wal", "--file-access", "group")
    assert code == 2 and "--file-access is for a WAL folder" in err, (out, err)
