"""notebooks/quickstart.ipynb runs top to bottom, its own asserts pass, and it plots;
the committed copy is executed, so its tables and plots show where it is published."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from pyspark_durable.notebook import QUICKSTART, execute

# the "notebook" extra; without it this test fails (conftest turns skips into failures)
# instead of breaking the collection of the whole suite
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
CELL_TIMEOUT_S = 300


def check_executed(nb) -> None:
    """Every code cell ran, none failed or wrote to stderr, and the 3 plots are there."""
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells and all(c.get("execution_count") for c in code_cells), \
        "every code cell ran"
    outputs = [o for c in code_cells for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, errors
    stderr = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, f"stderr in the cells' outputs (Spark's log noise?): {stderr}"
    images = [o for o in outputs
              if o.output_type in ("display_data", "execute_result") and "image/png" in o.data]
    assert len(images) >= 3, f"expected the 3 plots, got {len(images)} images"


def test_committed_notebook_is_executed():
    """This tests that notebooks/quickstart.ipynb is committed with its outputs and plots
    (run `python -m pyspark_durable.notebook` after changing it)."""
    assert QUICKSTART == NOTEBOOK, "the runner's default is the committed notebook"
    check_executed(nbformat.read(NOTEBOOK, as_version=4))
    # nbformat's own schema, and no machine-specific kernel in the metadata
    nbformat.validate(nbformat.read(NOTEBOOK, as_version=4))
    meta = json.loads(NOTEBOOK.read_text())["metadata"]
    assert meta["kernelspec"]["name"] == "python3", meta["kernelspec"]


@pytest.mark.spark
def test_quickstart_notebook_executes_and_plots(tmp_path):
    """This tests that the quickstart notebook runs cleanly on a fresh WAL and draws its
    plots, through the same runner as `python -m pyspark_durable.notebook`, on a copy."""
    copy = tmp_path / "quickstart.ipynb"
    shutil.copyfile(NOTEBOOK, copy)
    committed = NOTEBOOK.read_bytes()
    env = {
        "DURABLEWAL_NOTEBOOK_PATH": str(tmp_path / "wal"),
        "DURABLEWAL_NOTEBOOK_NAMESPACE": f"nb{uuid.uuid4().hex[:10]}",
    }
    try:
        nb = execute(copy, env=env, cwd=tmp_path, timeout=CELL_TIMEOUT_S)
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"the notebook failed:\n{exc}", pytrace=False)

    check_executed(nb)
    check_executed(nbformat.read(copy, as_version=4))  # what was written is what ran
    assert NOTEBOOK.read_bytes() == committed, "the test rewrote the committed notebook"
    assert (tmp_path / "wal" / env["DURABLEWAL_NOTEBOOK_NAMESPACE"]).is_dir(), \
        "the notebook wrote to the WAL path it was given"
