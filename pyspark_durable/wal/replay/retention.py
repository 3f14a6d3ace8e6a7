"""The retention policy kept with a namespace, in the spirit of Kafka's ``retention.ms``.

A policy says which committed steps are no longer needed: steps committed longer
ago than ``max_age_ms``, and all but the newest ``max_steps`` steps (either limit
expires a step, as with Kafka's ``retention.ms`` and ``retention.bytes``). Readers
that registered with ``hold`` keep every step from their next one on, whatever the
policy says. Every cleaner applies the policy before it cleans (it appends an
``expire`` record), so the WAL needs no cron job of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark_durable.errors import ConfigError
from pyspark_durable.wal.replay.state import NamespaceState


@dataclass(frozen=True)
class RetentionPolicy:
    """``None`` for a limit means no limit; the default policy keeps everything."""

    max_age_ms: int | None = None
    max_steps: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_age_ms", "max_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 0):
                raise ConfigError(f"retention {name}={value!r} is not an integer >= 0")

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (("max_age_ms", self.max_age_ms),
                                  ("max_steps", self.max_steps)) if v is not None}

    @staticmethod
    def from_json(d: dict[str, Any]) -> RetentionPolicy:
        return RetentionPolicy(d.get("max_age_ms"), d.get("max_steps"))

    def expire_target(self, state: NamespaceState, now_ms: int) -> int:
        """The step below which the policy (held back by holding readers) expires steps."""
        target = state.expired_before
        if self.max_steps is not None:
            target = max(target, state.next_step - self.max_steps)
        if self.max_age_ms is not None:
            cutoff = now_ms - self.max_age_ms
            aged = state.expired_before
            for commit in state.index:
                if commit.step < aged:
                    continue
                if commit.timestamp_ms >= cutoff:
                    break
                aged = commit.step + 1
            target = max(target, aged)
        for reader in state.readers.values():
            if reader.hold:
                target = min(target, reader.next_step)
        return max(state.expired_before, min(target, state.next_step))
