"""Every code block of README.md runs: the Python blocks, the demo, the test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)

pytestmark = pytest.mark.spark


def test_readme_opens_with_the_two_commands():
    """This tests that README starts with exactly two set-up commands and CI runs the second."""
    bash = [code.strip() for lang, code in BLOCKS if lang == "bash"]
    assert len(bash) == 2
    assert bash[0].endswith("python -m pyspark_durable demo")
    assert "pytest" in bash[1] and "pip install" in bash[1]
    ci = subprocess.run(["bash", str(ROOT / ".ci" / "run"), "--print"],
                        capture_output=True, text=True, cwd=ROOT, check=True)
    assert ci.stdout.strip() == bash[1]


@pytest.mark.parametrize("index", [i for i, (lang, _) in enumerate(BLOCKS) if lang == "python"])
def test_python_blocks_run(spark, tmp_path, index):
    """This tests that a README Python block runs as written (paths moved to a temp folder)."""
    code = BLOCKS[index][1].replace("/tmp/", f"{tmp_path}/")
    exec(compile(code, f"README.md block {index}", "exec"), {"__name__": "readme"})
    assert any(tmp_path.iterdir()), "the block wrote nothing"


def test_python_blocks_run_in_any_order_and_again(spark, tmp_path):
    """This tests that README's Python blocks share one WAL and run in any order, twice."""
    python = [i for i, (lang, _) in enumerate(BLOCKS) if lang == "python"]
    for order in (list(reversed(python)), python):
        for index in order:
            code = BLOCKS[index][1].replace("/tmp/", f"{tmp_path}/")
            exec(compile(code, f"README.md block {index}", "exec"), {"__name__": "readme"})
    back = spark.read.format("durablewal").option("namespace", "shop").load(str(tmp_path / "wal"))
    counts = {r["_table"]: r["count"] for r in back.groupBy("_table").count().collect()}
    assert counts["orders"] == 2 * (1000 + 10) and counts["customers"] == 1
    assert set(back.columns) >= {"id", "amount", "reason", "name", "_region", "_sequence"}


@pytest.mark.crash
def test_main_job_proves_exactly_once(tmp_path):
    """This tests that the demo (README's first command) kills its writer and reports exactly once."""
    proc = subprocess.run(
        [sys.executable, "-m", "pyspark_durable", "demo", "--files", "5", "--rows", "200",
         "--kill-after", "2", "--path", str(tmp_path / "wal")],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout
    assert "killed the writer" in out
    assert re.search(r"rows in\s+1000\n\s+rows out\s+1000\n\s+duplicates\s+0\n\s+lost\s+0", out)
    assert "EXACTLY ONCE" in out
