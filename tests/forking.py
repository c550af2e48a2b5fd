"""Run work in a forked child, bounded by an alarm: for locks a fork may leave held."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any


def in_child(work: Callable[[], Any]) -> int:
    """Fork; the child runs ``work`` and exits 0 if it returned True. Its exit status,
    or -SIGALRM if it hung (the defect): the child's alarm bounds the parent's wait."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(30)
            code = 0 if work() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
