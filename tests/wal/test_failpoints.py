"""Failpoints taken from the environment (for processes a test cannot hand a handler)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import pytest

from pyspark_durable.errors import ConfigError
from pyspark_durable.wal import failpoints

CHILD = """
import subprocess, sys
from pyspark_durable.wal import failpoints
sleeper = subprocess.Popen(["sleep", "60"])  # in this process group
print(sleeper.pid, flush=True)
failpoints.reached("commit.checked", writer_step=1)  # not the step: nothing happens
print("passed step 1", flush=True)
failpoints.reached("clean.recorded", writer_step=2)  # not the point: nothing happens
print("passed another point", flush=True)
failpoints.reached("commit.checked", writer_step=2)
print("survived", flush=True)
"""


@pytest.mark.crash
def test_an_environment_failpoint_kills_its_process_group_at_its_point_only(tmp_path):
    """This tests that DURABLEWAL_FAILPOINT=commit.checked:kill-group=PGID:writer_step=N
    SIGKILLs the whole process group, the process that reached it included, exactly when
    that point is reached with that writer step, and does nothing at other points or
    steps (how the demo kills a writer inside a micro-batch, after its tasks' writes)."""
    # the group is the child's own (a new session): it names it in the variable itself
    proc = subprocess.Popen([sys.executable, "-c",
                             "import os; os.environ['DURABLEWAL_FAILPOINT'] = "
                             "f'commit.checked:kill-group={os.getpgid(0)}:writer_step=2'\n"
                             + CHILD], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    out, _ = proc.communicate(timeout=60)
    lines = out.split("\n")
    assert proc.returncode == -signal.SIGKILL, out
    assert lines[1:3] == ["passed step 1", "passed another point"], out
    assert "survived" not in out
    sleeper = int(lines[0])
    try:
        fd = os.pidfd_open(sleeper)
    except ProcessLookupError:
        return  # gone already
    try:  # killed with the group: its pidfd turns readable at once
        assert select.select([fd], [], [], 30.0)[0], "the group's other process lives on"
    finally:
        os.close(fd)


def test_a_malformed_environment_failpoint_is_a_typed_error(monkeypatch):
    """This tests that a failpoint whose kill-group is not a number is a ConfigError
    naming the variable, raised where the point is reached."""
    monkeypatch.setenv(failpoints.ENV, "commit.checked:kill-group=abc")
    with pytest.raises(ConfigError, match="DURABLEWAL_FAILPOINT: kill-group must be"):
        failpoints.reached("commit.checked", writer_step=0)
    failpoints.reached("clean.recorded")  # another point: the rule is not read
