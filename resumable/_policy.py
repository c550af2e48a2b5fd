"""When to save: small frozen policy values, and parsing of the ``every`` shorthand."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from ._errors import ConfigurationError


@dataclass(frozen=True)
class EveryN:
    """Save when the run's global step is a multiple of ``n`` (a resume keeps the schedule)."""

    n: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ConfigurationError(f"every: n must be a positive int, got {self.n!r}")

    def due(self, step: int, seconds_since_save: float) -> bool:
        return step % self.n == 0


@dataclass(frozen=True)
class EverySeconds:
    """Save when at least ``seconds`` have passed since the last save."""

    seconds: float

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ConfigurationError(f"every: a duration must be positive, got {self.seconds!r}")

    def due(self, step: int, seconds_since_save: float) -> bool:
        return seconds_since_save >= self.seconds


@dataclass(frozen=True)
class KeepLast:
    """Keep the newest ``n`` checkpoints of a run (``None``: keep all)."""

    n: int | None = 3

    def __post_init__(self) -> None:
        if self.n is not None and (
            isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1
        ):
            raise ConfigurationError(f"keep must be a positive int or None, got {self.n!r}")


SavePolicy = EveryN | EverySeconds
_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d)\s*$")


def parse_every(every: object) -> SavePolicy:
    """``"generation"``, an int n, a duration string ("30s", "5m"), float seconds, a timedelta."""
    if isinstance(every, (EveryN, EverySeconds)):
        return every
    if every == "generation":
        return EveryN(1)
    if isinstance(every, bool):
        raise ConfigurationError(f"every={every!r} is not a schedule")
    if isinstance(every, int):
        return EveryN(every)
    if isinstance(every, float):
        return EverySeconds(every)
    if isinstance(every, timedelta):
        return EverySeconds(every.total_seconds())
    if isinstance(every, str):
        m = _DURATION.match(every)
        if m:
            return EverySeconds(float(m.group(1)) * _UNITS[m.group(2)])
    raise ConfigurationError(
        f'every={every!r} is not understood; use "generation", an int n, '
        'a duration like "30s" or "5m", float seconds, or a timedelta'
    )
