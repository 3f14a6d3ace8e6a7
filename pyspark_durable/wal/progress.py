"""How the long passes over a namespace (the checker, the cleaner) tell their progress.

They take any object with these three methods; the CLI passes its progress bars, the
Python API and tests nothing (:class:`Silent`). A pass only reports: it never waits on
the object or reads anything back.
"""

from __future__ import annotations

from typing import Any, Protocol


class Progress(Protocol):
    """What a pass tells of its progress (the CLI draws bars from it)."""

    def task(self, description: str, total: int, unit: str) -> Any: ...

    def advance(self, task: Any, n: int = 1) -> None: ...

    def update(self, task: Any, **fields: Any) -> None: ...


class Silent:
    """No progress shown (the Python API and tests)."""

    def task(self, description: str, total: int, unit: str) -> None:
        return None

    def advance(self, task: Any, n: int = 1) -> None:
        pass

    def update(self, task: Any, **fields: Any) -> None:
        pass
