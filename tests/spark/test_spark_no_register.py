"""No ``register`` call where the package is installed: Spark 4 finds its DefaultSource."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import pyspark_durable
from pyspark_durable.spark import DurableWalDataSource

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# what a fresh clone needs to install (the rest of the checkout is not the package's)
CLONE = ["setup.py", "pyproject.toml", "README.md", "pyspark_durable"]


def test_default_source_is_the_data_source():
    """This tests that the package exposes the durablewal data source as DefaultSource,
    the name Spark's lookup of installed pyspark_* packages asks for."""
    assert pyspark_durable.DefaultSource is DurableWalDataSource
    assert DurableWalDataSource.name() == "durablewal"


def readme_install() -> str:
    """The install of README's first command (``python3 -m venv .venv && <this> && ...``)."""
    first = re.search(r"```bash\n(.*?)```", README, flags=re.S).group(1).strip()
    make, install, run = first.split(" && ")
    assert make == "python3 -m venv .venv" and run.endswith("-m pyspark_durable demo"), first
    return install


def clone(dest: Path) -> Path:
    """The checkout's tracked files of the package, as a fresh clone has them."""
    tracked = subprocess.run(["git", "ls-files", *CLONE], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    for name in tracked:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


def test_readme_quickstart_needs_no_register_after_the_readmes_install(tmp_path):
    """This tests that after exactly README's install (`pip install -e .` into a new venv
    of a clone), the quickstart's Spark block, a plain SparkSession.builder, runs in a new
    process and finds format("durablewal") for a batch write, a batch read and a stream,
    the driver never importing the package, which is the clone's. The new
    venv sees this venv's site-packages as a plain path (its .pth files not run) so that
    pip finds the dependencies installed instead of downloading them."""
    project = clone(tmp_path / "clone")
    subprocess.run([sys._base_executable,  # noqa: SLF001 - the interpreter outside any venv
                    "-m", "venv", ".venv"], cwd=project, check=True)
    [site] = (project / ".venv" / "lib").glob("python*/site-packages")
    (site / "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in (
        "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    install = subprocess.run(["bash", "-c", readme_install()], cwd=project, env=env,
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr[-3000:]
    quickstart = next(code for lang, code in re.findall(r"```(\w+)\n(.*?)```", README, re.S)
                      if lang == "python")
    assert "register(" not in quickstart and "SparkSession.builder" in quickstart, quickstart
    code = (quickstart.replace("/tmp/", f"{tmp_path}/")
            + "\nprint('IMPORTED', 'pyspark_durable' in sys.modules)"
            + "\nimport pyspark_durable\nprint('PACKAGE', pyspark_durable.__file__)\n")
    proc = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c", code],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert re.search(r"^streaming copy: 1000 new rows in \d+ micro-batch\(es\); the parquet "
                     r"copy holds 1000 rows$", proc.stdout, re.M), proc.stdout
    assert "IMPORTED False" in proc.stdout, "the driver imported the package: " + proc.stdout
    assert f"PACKAGE {project / 'pyspark_durable' / '__init__.py'}" in proc.stdout, proc.stdout
