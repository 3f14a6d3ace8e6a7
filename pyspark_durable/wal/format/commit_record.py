"""A record of the ``commits`` log in general: the base class every kind derives from,
and the registry that maps a kind (the ``k`` field) to its class.

It lies below the modules that define kinds, so each of them registers its own
(:mod:`.records`, :mod:`.table_records`) and :func:`.records.decode_record` finds every
kind once ``records`` (which imports the others) is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar


class CommitRecord:
    """One fact of the commits log; each kind is a subclass pairing ``to_json`` with
    ``from_json``, registered in :data:`RECORD_KINDS` by :func:`record_kind`."""

    __slots__ = ()
    kind: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CommitRecord:
        raise NotImplementedError


RECORD_KINDS: dict[str, type[CommitRecord]] = {}  # kind (the ``k`` field) -> its class
_R = TypeVar("_R", bound=type[CommitRecord])


def record_kind(kind: str) -> Callable[[_R], _R]:
    """Register a record class as the one that encodes and decodes ``kind``."""
    def register(cls: _R) -> _R:
        assert kind not in RECORD_KINDS, kind
        cls.kind = kind
        RECORD_KINDS[kind] = cls
        return cls
    return register
