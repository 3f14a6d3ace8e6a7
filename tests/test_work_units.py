"""The suite's ``--dist loadgroup`` keeps each shared-server folder on one worker: a
3-node Kafka cluster, a Spark standalone cluster or a Connect server started by every
worker costs minutes and cores the others wait on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).parent / "conftest.py"


def scheduler_source() -> str:
    """The conftest's scheduling code, as it is: from its folders to its hook."""
    text = CONFTEST.read_text()
    start = text.index("SHARED_SERVER_FOLDERS =")
    end = text.index("@pytest.hookimpl(tryfirst=True)", start)
    return "import pytest\n\n" + text[start:end]


def test_each_shared_server_folder_runs_on_one_worker_and_other_modules_spread(tmp_path):
    """This tests that under ``-n 3 --dist loadgroup`` (the README's command, with a
    worker more), with the conftest's own scheduler, every test of a shared-server
    folder runs on one worker, and modules elsewhere are spread over the workers."""
    tests = tmp_path / "tests"
    (tests / "kafka_cluster").mkdir(parents=True)
    (tests / "wal").mkdir()
    (tests / "conftest.py").write_text(scheduler_source())
    ran = tmp_path / "ran"
    ran.mkdir()
    body = ("import os, time\n\n\ndef test_{n}():\n    time.sleep(0.2)\n"
            f"    open('{ran}/{{folder}}-{{n}}', 'w').write(os.environ['PYTEST_XDIST_WORKER'])\n")
    for n in range(6):
        for folder in ("kafka_cluster", "wal"):
            (tests / folder / f"test_{folder}{n}.py").write_text(body.format(n=n, folder=folder))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}  # the outer run's
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup",
                          "-p", "no:cacheprovider", "tests"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    workers: dict[str, set[str]] = {"kafka_cluster": set(), "wal": set()}
    for done in ran.iterdir():
        workers[done.name.rsplit("-", 1)[0]].add(done.read_text())
    assert sum(1 for _ in ran.iterdir()) == 12, sorted(p.name for p in ran.iterdir())
    assert len(workers["kafka_cluster"]) == 1, workers
    assert len(workers["wal"]) > 1, workers
