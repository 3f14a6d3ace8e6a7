"""Imported first by the child scripts that run the package without Spark: each runs
with the package's own requirements only, and pandas is none of them.

pyarrow imports pandas, when it is installed, on its first ``pa.array()`` (to ask whether
the input is a pandas object): about 0.45 s of CPU in every child, and the quick lane
starts a few hundred of them. With pandas hidden, pyarrow takes the path it takes on a
machine without pandas; no child passes it a pandas object. Only a child script's own
process hides it: a test that imports a child's helpers keeps its pandas.
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec
from pathlib import Path


class _HidePandas:
    """A meta path finder that answers "not installed" for pandas and its submodules."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {name!r} (hidden from this child)",
                                      name=name)
        return None


def _run_as_child() -> bool:
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return main is not None and Path(main).resolve().parent == Path(__file__).resolve().parent


if _run_as_child() and "pandas" not in sys.modules:
    sys.meta_path.insert(0, _HidePandas)
