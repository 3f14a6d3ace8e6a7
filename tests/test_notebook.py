"""notebooks/quickstart.ipynb runs top to bottom, its own asserts pass, and it plots."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

# the "notebook" extra; without it this test fails (conftest turns skips into failures)
# instead of breaking the collection of the whole suite
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.spark

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
KERNEL_NAME = "durablewal-test"
CELL_TIMEOUT_S = 300


def kernel_manager(kernels_dir: Path, env: dict[str, str]):
    """A kernel that runs on THIS interpreter (this venv), whatever kernelspecs exist elsewhere."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = kernels_dir / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"durablewal test ({sys.executable})",
        "language": "python",
        "env": env,
    }))
    specs = KernelSpecManager(kernel_dirs=[str(kernels_dir)], ensure_native_kernel=False)
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)


def test_quickstart_notebook_executes_and_plots(tmp_path):
    """This tests that the quickstart notebook runs cleanly on a fresh WAL and draws its plots."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {
        "DURABLEWAL_NOTEBOOK_PATH": str(tmp_path / "wal"),
        "DURABLEWAL_NOTEBOOK_NAMESPACE": f"nb{uuid.uuid4().hex[:10]}",
    }
    km = kernel_manager(tmp_path / "kernels", env)
    client = nbclient.NotebookClient(
        nb, km=km, kernel_name=KERNEL_NAME, timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"the notebook failed:\n{exc}", pytrace=False)

    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells and all(c.get("execution_count") for c in code_cells), \
        "every code cell ran"
    outputs = [o for c in code_cells for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, errors
    images = [o for o in outputs
              if o.output_type in ("display_data", "execute_result") and "image/png" in o.data]
    assert len(images) >= 3, f"expected the 3 plots, got {len(images)} images"
    assert (tmp_path / "wal" / env["DURABLEWAL_NOTEBOOK_NAMESPACE"]).is_dir(), \
        "the notebook wrote to the WAL path it was given"
