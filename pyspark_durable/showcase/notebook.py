"""Execute a notebook (by default ``notebooks/quickstart.ipynb``) on this Python.

    python -m pyspark_durable.showcase.notebook [NOTEBOOK] [--output PATH | --in-place]

The executed notebook is written to ``NAME.executed.ipynb`` in the working folder (or
``--output``), so a checkout stays clean; ``--in-place`` rewrites the notebook itself,
which is how the committed one is kept executed (its tables and plots show on GitHub;
run it after changing the notebook). The WAL the notebook writes lives in a temporary
folder that is removed afterwards, unless ``DURABLEWAL_NOTEBOOK_PATH`` names one.

The kernel is THIS interpreter (a kernel spec written to a temp folder), whatever
kernels Jupyter knows elsewhere, so the notebook runs on the environment
pyspark_durable is installed in. Needs the ``notebook`` extra
(``pip install -e '.[notebook]'``). ``tests/test_notebook.py`` runs the same code on
a temp copy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"
KERNEL_NAME = "durablewal-python"
CELL_TIMEOUT_S = 300


@contextlib.contextmanager
def jvm_stderr_to(log_path: str | os.PathLike) -> Iterator[None]:
    """Start Spark inside this block to send its JVM's stderr to ``log_path`` (appended).

    In Jupyter the kernel shows whatever its child processes write to file descriptor
    2 in the cell that happens to be running: the JDK's "Using incubator modules"
    notice when Spark starts, later Spark's error logs and its Python workers' stderr.
    The JVM inherits file descriptor 2 when it starts, so pointing it at a log file
    for that moment keeps the notebook to what Python prints (errors still raise in
    the cell); the kernel's own stderr is restored on exit.
    """
    saved = os.dup(2)
    try:
        with open(log_path, "ab") as log:
            os.dup2(log.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def kernel_manager(kernels_dir: Path, env: Mapping[str, str] | None = None):
    """A kernel that runs on THIS interpreter (this venv), whatever kernelspecs exist elsewhere."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = kernels_dir / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"pyspark_durable ({sys.executable})",
        "language": "python",
        "env": dict(env or {}),
    }))
    specs = KernelSpecManager(kernel_dirs=[str(kernels_dir)], ensure_native_kernel=False)
    # IPC (unix sockets in kernels_dir), not TCP: nothing listens on a port, and the
    # kernel does not warn about unencrypted TCP
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs, transport="ipc",
                         ip=str(kernels_dir / "ipc"))


def execute(notebook: Path, output: Path | None = None, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, timeout: int = CELL_TIMEOUT_S):
    """Run every cell of ``notebook``; write the executed notebook to ``output``.

    ``output`` defaults to ``notebook`` (in place); ``env`` is added to the kernel's
    environment, ``cwd`` is its working folder (default: the notebook's). Returns the
    executed notebook; a failing cell raises ``nbclient.exceptions.CellExecutionError``
    and writes nothing. The notebook's own kernelspec metadata is kept, so the file
    does not name this machine's interpreter.
    """
    import nbclient
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    kernelspec = nb.metadata.get("kernelspec")
    with tempfile.TemporaryDirectory(prefix="durablewal-kernels-") as kernels:
        client = nbclient.NotebookClient(
            nb, km=kernel_manager(Path(kernels), env), kernel_name=KERNEL_NAME,
            timeout=timeout, record_timing=False,
            resources={"metadata": {"path": str(cwd or notebook.parent)}})
        client.execute()
    if kernelspec is not None:
        nb.metadata["kernelspec"] = kernelspec
    nbformat.write(nb, output or notebook)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyspark_durable.showcase.notebook",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", type=Path, default=QUICKSTART,
                        help=f"the notebook (default: {QUICKSTART})")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--output", type=Path,
                       help="write the executed notebook here (default: "
                            "NAME.executed.ipynb in the working folder)")
    where.add_argument("--in-place", action="store_true",
                       help="rewrite the notebook itself (to commit it executed)")
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        parser.error(f"no notebook at {args.notebook}")
    try:
        import nbclient
    except ModuleNotFoundError:
        parser.error("needs the notebook extra: pip install -e '.[notebook]'")
    output = args.notebook if args.in_place else \
        args.output or Path.cwd() / f"{args.notebook.stem}.executed.ipynb"
    try:
        with tempfile.TemporaryDirectory(prefix="durablewal-notebook-") as work:
            env = {} if os.environ.get("DURABLEWAL_NOTEBOOK_PATH") else \
                {"DURABLEWAL_NOTEBOOK_PATH": str(Path(work) / "wal")}
            execute(args.notebook, output, env=env)
    except nbclient.exceptions.CellExecutionError as exc:
        print(f"the notebook failed; {output} is unchanged:\n{exc}", file=sys.stderr)
        return 1
    print(f"executed {args.notebook} -> {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
