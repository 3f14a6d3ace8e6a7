"""A registered reader's lag, without Spark: ``reader_lags`` and ``durablewal lag``."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace, write_step
from pyspark_durable.endpoint.lag import reader_lags

NS = "lagging"


def test_lag_counts_steps_rows_bytes_and_seconds_behind(tmp_path: Path, capsys):
    """This tests that each registered reader's lag is the steps, rows and bytes from its
    next step to the WAL's end and the age of its next step's commit, in the API and in
    `durablewal lag --json`, and that a reader at the end is 0 behind."""
    ns = open_namespace({"backend": "file", "namespace": NS, "options": {"path": str(tmp_path)}})
    for step in range(4):
        write_step(ns, "loader", step, {"t": [{"id": i} for i in range(step + 1)]})
    ns.commit_reader("dashboard", 1)
    ns.commit_reader("archive", 4, hold=True)
    first_behind = ns.step_commit(1).timestamp_ms
    lags = {lag.reader: lag for lag in reader_lags(ns, now_ms=first_behind + 2500)}
    dashboard = lags["dashboard"]
    assert (dashboard.steps_behind, dashboard.rows_behind, dashboard.end_step) == (3, 2 + 3 + 4, 4)
    assert dashboard.bytes_behind == sum(ns.step_commit(s).size_bytes for s in (1, 2, 3)) > 0
    assert dashboard.seconds_behind == 2.5
    assert (lags["archive"].steps_behind, lags["archive"].rows_behind,
            lags["archive"].seconds_behind, lags["archive"].holds_retention) == (0, 0, 0.0, True)
    ns.close()

    assert main(["lag", str(tmp_path), "--namespace", NS, "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert err == "" and doc["end_step"] == 4
    by_reader = {r["reader"]: r for r in doc["readers"]}
    assert by_reader["dashboard"]["steps_behind"] == 3
    assert by_reader["dashboard"]["rows_behind"] == 9
    assert by_reader["dashboard"]["seconds_behind"] > 0
    assert main(["lag", str(tmp_path), "--namespace", NS]) == 0
    out, _ = capsys.readouterr()
    assert "dashboard" in out and "steps_behind" in out


def test_lag_in_prometheus_text_format(tmp_path: Path, capsys):
    """This tests that `durablewal lag --format prometheus` prints every measure as a gauge
    with HELP and TYPE, labelled by namespace and reader (quotes, backslashes and newlines
    in a reader id escaped), values as `--json` gives them."""
    ns = open_namespace({"backend": "file", "namespace": NS, "options": {"path": str(tmp_path)}})
    for step in range(3):
        write_step(ns, "loader", step, {"t": [{"id": i} for i in range(10)]})
    odd = 'team "a"\\night\nly'
    ns.commit_reader(odd, 1, hold=True)
    ns.commit_reader("dashboard", 3)
    ns.close()
    assert main(["lag", str(tmp_path), "--namespace", NS, "--format", "prometheus"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.endswith("\n")
    lines = out.splitlines()
    assert 'durablewal_wal_next_step{namespace="lagging"} 3' in lines
    families = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert families == ["durablewal_wal_next_step", "durablewal_reader_lag_steps",
                        "durablewal_reader_lag_rows", "durablewal_reader_lag_bytes",
                        "durablewal_reader_lag_seconds", "durablewal_reader_expired_steps",
                        "durablewal_reader_next_step", "durablewal_reader_holds_retention"]
    assert all(line.endswith(" gauge") for line in lines if line.startswith("# TYPE"))
    assert sum(line.startswith("# HELP ") for line in lines) == len(families)
    label = 'reader="team \\"a\\"\\\\night\\nly"'
    assert f'durablewal_reader_lag_steps{{namespace="lagging",{label}}} 2' in lines, out
    assert f'durablewal_reader_lag_rows{{namespace="lagging",{label}}} 20' in lines, out
    assert f'durablewal_reader_holds_retention{{namespace="lagging",{label}}} 1' in lines, out
    assert 'durablewal_reader_lag_seconds{namespace="lagging",reader="dashboard"} 0.0' in lines
    assert 'durablewal_reader_lag_steps{namespace="lagging",reader="dashboard"} 0' in lines
