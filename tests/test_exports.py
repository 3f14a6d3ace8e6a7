"""The public surface, pinned: the names ``pyspark_durable.wal`` and
``pyspark_durable.endpoint`` export, and the public names of a ``Namespace``.

A name added to (or dropped from) one of them changes what callers may depend on, so
it is a decision this file records, never a side effect of an internal method
gaining or losing its underscore."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

import pyspark_durable.endpoint as endpoint
import pyspark_durable.wal as wal
from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace

WAL_EXPORTS = [
    "DEFAULT_TABLE", "Attempt", "AttemptReceipt", "CleanReport", "Cleaner", "Namespace",
    "RetentionPolicy", "Run", "StepBatch", "StepCommit", "TableInfo", "WrittenEntry",
    "table_id_for_name",
]
ENDPOINT_EXPORTS = [
    "DurableInputEndpoint", "EndpointConfig", "InputConsumer", "OutputEndpoint",
    "input_endpoint", "is_wal_namespace", "load_config", "open_namespace", "output_endpoint",
    "read_batches", "read_steps", "wal_namespaces", "write_step",
]
NAMESPACE_NAMES = [
    # what it is
    "entry_max_bytes", "name", "namespace_id", "store",
    # its parts: tables, frozen answers, and the ledger (the WAL's own upkeep's door)
    "info", "ledger", "tables",
    # reads
    "read_region_steps", "read_step", "read_step_table", "step_commit", "steps",
    # writes: steps, readers, retention
    "begin", "commit", "commit_reader", "committed_step", "drop_reader", "expire",
    "note_writer_step", "retention", "set_dedup_window", "set_retention",
    # the handle
    "close", "refresh",
]


def public(obj: object) -> list[str]:
    """``obj``'s public names; for a package, without its submodules (importing one
    binds it on the package, and that is no export)."""
    return sorted(n for n in dir(obj) if not n.startswith("_")
                  and not isinstance(getattr(obj, n), types.ModuleType))


@pytest.mark.parametrize("module, exports", [(wal, WAL_EXPORTS), (endpoint, ENDPOINT_EXPORTS)],
                         ids=["wal", "endpoint"])
def test_a_package_exports_exactly_its_pinned_names(module: types.ModuleType,
                                                    exports: list[str]) -> None:
    """This tests that a layer's package exports (``__all__``) exactly the pinned names
    and binds no other public name (an import of a helper would leak it)."""
    assert sorted(module.__all__) == sorted(exports)
    assert public(module) == sorted(exports)


def test_a_namespace_has_exactly_its_pinned_public_names(tmp_path: Path) -> None:
    """This tests that an open ``Namespace`` has exactly the pinned public names, at
    most 25: the façade stays narrow, and the ledger's members stay behind it."""
    ns = Namespace(open_store("file", "pinned", path=str(tmp_path)))
    try:
        assert public(ns) == sorted(NAMESPACE_NAMES)
        assert len(NAMESPACE_NAMES) <= 25
    finally:
        ns.close()


def test_the_usage_block_of_the_wal_package_runs(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """This tests that the usage block opening ``pyspark_durable.wal``'s docstring runs as
    written (on a temporary folder) and commits, reads and cleans one step."""
    doc = wal.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    code = "\n".join(line[4:] for line in block.splitlines())
    code = code.replace('"/data/wal"', repr(str(tmp_path)))
    assert re.search(r"begin.*write.*commit.*steps.*read_step", code, re.S)
    import pyarrow as pa

    exec(code, {"Namespace": Namespace, "open_store": open_store, "pa": pa,
                "Cleaner": wal.Cleaner})
    assert "[pyarrow.RecordBatch" in capsys.readouterr().out
