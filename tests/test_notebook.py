"""notebooks/quickstart.ipynb runs top to bottom, its own asserts pass, and it plots;
the committed copy is executed, and re-executing it gives the outputs it stores, so an
edit that was not re-run fails here."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from pyspark_durable.showcase.notebook import QUICKSTART, execute
from pyspark_durable.wal.metadata import METADATA_NAMES

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
CELL_TIMEOUT_S = 300
# what differs between two runs of the same notebook: when, where, which query
VOLATILE = [
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?(\+00:00)?"), "<time>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"(?<![\w.])/[\w.+-]+(/[\w.+-]+)*"), "<path>"),
]


def nbformat() -> ModuleType:
    """The ``notebook`` extra's nbformat; missing, the test fails saying how to get it."""
    try:
        import nbclient  # noqa: F401  (execute needs it)
        import nbformat as module
    except ModuleNotFoundError as exc:
        pytest.fail(f"{exc.name} is missing: pip install -e '.[notebook]'", pytrace=False)
    return module


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


def shape(text: str) -> list[list[str]]:
    """``text`` (a printed schema, a Spark or pandas table) as lines of cells, the volatile
    values masked and the padding gone: a column's width follows its widest value, so a
    table is compared by its cells, its borders only as borders."""
    for pattern, mask in VOLATILE:
        text = pattern.sub(mask, text)
    lines = []
    for line in text.strip().splitlines():
        if re.fullmatch(r"\+[-+]*\+", line.strip()):
            lines.append(["<border>"])
        elif line.strip():
            lines.append([cell for cell in re.split(r"\s*\|\s*|\s+", line.strip()) if cell])
    return lines


def deterministic_outputs(nb) -> list[list[tuple[str, object]]]:
    """Per code cell, what any run prints and shows: text by :func:`shape`, an image only
    as being there (its pixels follow the commit times)."""
    cells = []
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        outputs: list[tuple[str, object]] = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                outputs.append((out.name, shape(out.text)))
            elif "image/png" in out.get("data", {}):
                outputs.append(("image", None))
            elif "text/plain" in out.get("data", {}):
                outputs.append(("value", shape(out.data["text/plain"])))
        cells.append(outputs)
    return cells


def test_committed_notebook_is_executed():
    """This tests that notebooks/quickstart.ipynb is committed with its outputs and plots
    (run `python -m pyspark_durable.showcase.notebook --in-place` after changing it)."""
    nbf = nbformat()
    assert QUICKSTART == NOTEBOOK, "the runner's default is the committed notebook"
    check_executed(nbf.read(NOTEBOOK, as_version=4))
    # nbformat's own schema, and no machine-specific kernel in the metadata
    nbf.validate(nbf.read(NOTEBOOK, as_version=4))
    meta = json.loads(NOTEBOOK.read_text())["metadata"]
    assert meta["kernelspec"]["name"] == "python3", meta["kernelspec"]


def test_notebook_names_every_metadata_column():
    """This tests that the notebook's table of metadata columns and the list its asserts
    use name exactly the columns a read adds, in the reader's order."""
    nb = nbformat().read(NOTEBOOK, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    table = re.findall(r"^\| `(_\w+)` \|", text, flags=re.M)
    assert table == list(METADATA_NAMES), f"the markdown table lists {table}"
    listed = re.search(r"^META = \[(.*?)\]", text, flags=re.M | re.S)
    assert listed and re.findall(r'"(_\w+)"', listed.group(1)) == list(METADATA_NAMES)


@pytest.mark.spark
def test_quickstart_notebook_executes_and_matches_its_stored_outputs(tmp_path):
    """This tests that the quickstart notebook runs cleanly on a fresh WAL and draws its
    plots, through the same runner as `python -m pyspark_durable.showcase.notebook`, on a copy,
    and that every cell shows what the committed notebook stores for it (schemas, row
    counts, columns, the tables' cells; times, paths and query ids aside)."""
    nbf = nbformat()
    import nbclient

    copy = tmp_path / "quickstart.ipynb"
    shutil.copyfile(NOTEBOOK, copy)
    committed = NOTEBOOK.read_bytes()
    env = {
        "DURABLEWAL_NOTEBOOK_PATH": str(tmp_path / "wal"),
        "DURABLEWAL_NOTEBOOK_NAMESPACE": "quickstart",  # the default: the output names it
    }
    try:
        nb = execute(copy, env=env, cwd=tmp_path, timeout=CELL_TIMEOUT_S)
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"the notebook failed:\n{exc}", pytrace=False)

    check_executed(nb)
    check_executed(nbf.read(copy, as_version=4))  # what was written is what ran
    assert NOTEBOOK.read_bytes() == committed, "the test rewrote the committed notebook"
    assert (tmp_path / "wal" / env["DURABLEWAL_NOTEBOOK_NAMESPACE"]).is_dir(), \
        "the notebook wrote to the WAL path it was given"
    stored = deterministic_outputs(nbf.read(NOTEBOOK, as_version=4))
    ran = deterministic_outputs(nb)
    assert len(stored) == len(ran)
    for index, (was, now) in enumerate(zip(stored, ran, strict=True)):
        assert was == now, (f"code cell {index} shows other outputs than the committed "
                            "notebook stores: run `python -m pyspark_durable.showcase.notebook --in-place`")
