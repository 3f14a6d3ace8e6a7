"""Records that free space get room on a full disk.

A WAL that filled its disk is freed by its own records: a retention policy, an
``expire``, a dropped reader, then a cleaner pass (an ``expire`` and a ``clean``
record, low watermarks, a snapshot) that deletes segments. Each of those writes
before anything is freed, so each would fail with :class:`DiskFull`. The store keeps
room for them (:meth:`LogStore.release_reserve`, the file log's ``cleaner.reserve``):
a writer of such records that gets :class:`DiskFull` releases it and tries once more,
and the cleaner takes the room back at the end of its pass
(:meth:`LogStore.restore_reserve`). Step commits and region entries never release it,
so a writer that filled the disk cannot also eat the room meant for freeing it.

Trying again is safe: each action decides from a fresh replay (an ``expire`` or a
policy already recorded is not appended twice), and a cleaner pass may run any number
of times.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pyspark_durable.errors import DiskFull
from pyspark_durable.log import LogStore

T = TypeVar("T")


def using_reserve(store: LogStore, action: Callable[[], T]) -> T:
    """Run ``action``; on :class:`DiskFull`, release the store's reserve and run it again
    (a second :class:`DiskFull`, or one with no reserve left, is raised)."""
    try:
        return action()
    except DiskFull:
        if not store.release_reserve():
            raise
    return action()
