"""The CLI on a WAL in a bucket: an s3:// PATH, the AWS variables, no secret printed."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pytest

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace
from tests.helpers import s3_options

pytestmark = pytest.mark.s3


def test_every_command_takes_an_s3_path_and_prints_no_secret(s3_server, monkeypatch, capsys,
                                                            caplog):
    """This tests that namespaces, steps, tables, regions, tail, check and clean read a
    WAL given as s3://bucket/prefix, with the credentials from the AWS variables and the
    server from --endpoint-url, and that the secret appears nowhere, even at -vv."""
    options = s3_options(s3_server)
    key, secret = s3_server.admin
    ns = open_namespace({"namespace": "orders", "options": options})
    for step in range(3):
        a = ns.begin("app", step)
        a.write("orders", pa.table({"id": pa.array(range(step * 10, step * 10 + 10), pa.int64())}))
        a.commit()
    ns.close()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    where = [options["path"], "--endpoint-url", s3_server.endpoint]
    caplog.set_level(logging.DEBUG)

    def run(*argv: str) -> str:
        capsys.readouterr()
        code = main([*argv])
        out, err = capsys.readouterr()
        assert code == 0, (argv, out, err)
        assert secret not in out + err + caplog.text
        return out

    listed = json.loads(run("namespaces", *where, "--json"))
    assert listed["backend"] == "s3" and options["path"] in listed["where"]
    assert [(n["name"], n["tables"], n["next_step"]) for n in listed["namespaces"]] == \
        [("orders", ["orders"], 3)]
    steps = json.loads(run("steps", *where, "--namespace", "orders", "--json"))
    assert [s["step"] for s in steps["steps"]] == [0, 1, 2]
    assert "orders" in run("tables", *where, "--namespace", "orders")
    assert "29" in run("tail", *where, "--namespace", "orders", "--table", "orders", "-vv")
    run("check", *where, "--namespace", "orders", "-vv")
    run("clean", *where, "--namespace", "orders")


def test_a_url_of_another_scheme_is_one_line_exit_2(capsys):
    """This tests that the CLI refuses gs:// by name, creating nothing."""
    code = main(["steps", "gs://bucket/wal", "--namespace", "x"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "is not a location the WAL can store to" in err and len(err.strip().splitlines()) == 1
