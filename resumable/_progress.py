"""A tqdm bar for long runs; quiet when stdout is not a terminal."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("resumable")

Postfix = Callable[[Any], Mapping[str, Any]]


@dataclass(frozen=True)
class Bar:
    """A ``progress=`` value with both a total and a ``state -> dict`` postfix.

    ``total`` is an int or the name of the argument that holds it; the integrations use
    this to show the number of generations and the best fitness.
    """

    total: int | str | None = None
    postfix: Postfix | None = None


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


class Progress:
    def __init__(self, enabled: bool, *, total: int | None, initial: int, desc: str,
                 postfix: Postfix | None = None) -> None:
        self._bar: Any = None
        self._last_save: float | None = None
        self._postfix = postfix
        # The bar draws on stderr; it shows only when both streams are a terminal, so
        # neither a pod's log (stdout piped) nor `2>file` gets bar lines.
        if not enabled or not (sys.stdout.isatty() and sys.stderr.isatty()):
            return
        from tqdm import tqdm

        # Some terminals (a bare pty, `script`, some CI consoles) report a 0x0 size; tqdm
        # then draws a zero-width bar and hides it as below the last row. Assume 80x24.
        # Asked of the terminal itself (as tqdm's dynamic sizing does), not $COLUMNS.
        try:
            sized = os.get_terminal_size(sys.stderr.fileno()).columns > 0
        except (OSError, ValueError):
            sized = False
        fixed: dict[str, Any] = {} if sized else {"ncols": 80, "nrows": 24}
        self._bar = tqdm(
            total=total, initial=initial, desc=desc, unit="gen", file=sys.stderr,
            dynamic_ncols=sized, leave=True, **fixed,
        )

    def saved(self) -> None:
        self._last_save = time.monotonic()

    def _extra(self, state: Any) -> str:
        """The postfix callable's items as ``k=v`` text; a failing callable is dropped."""
        if self._postfix is None:
            return ""
        try:
            items = self._postfix(state)
            return "".join(f", {k}={_format(v)}" for k, v in dict(items).items())
        except Exception as err:  # a display helper must never end the run
            log.warning("progress: the postfix callable %r failed (%s: %s); the bar no "
                        "longer shows its items", self._postfix, type(err).__name__, err)
            self._postfix = None
            return ""

    def advance(self, step: int, state: Any = None) -> None:
        if self._bar is None:
            return
        age = "-" if self._last_save is None else f"{time.monotonic() - self._last_save:.0f}s"
        self._bar.set_postfix_str(f"step {step}, checkpoint {age} ago{self._extra(state)}",
                                  refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
