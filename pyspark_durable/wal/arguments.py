"""Typed errors for arguments a caller hands the WAL: writer ids and steps, step numbers.

Every entry point (the namespace, its catalog and read path, the endpoints) checks
with these, so a wrong argument is the same :class:`ConfigError` wherever it comes
in, and never a silent no-op or a failure deep in replay.
"""

from __future__ import annotations

from pyspark_durable.errors import ConfigError


def check_writer(writer_id: object, writer_step: object, namespace: str) -> None:
    """Writer ids are non-empty strings and writer steps integers >= 0 (typed errors)."""
    if not isinstance(writer_id, str) or not writer_id:
        raise ConfigError(f"writer id {writer_id!r} is not a non-empty string",
                          namespace=namespace)
    if not isinstance(writer_step, int) or isinstance(writer_step, bool) or writer_step < 0:
        raise ConfigError(f"writer step {writer_step!r} is not an integer >= 0",
                          namespace=namespace, writer=writer_id)


def check_step_arg(name: str, value: object, namespace: str) -> int:
    """Step and sequence arguments are integers >= 0 (typed errors, never a silent no-op)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} {value!r} is not an integer >= 0", namespace=namespace)
    return value
