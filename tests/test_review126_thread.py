"""Review 126 D3: with ``install_signal_handlers()`` and no run active, a SIGTERM the
kernel hands to a thread other than the main one, while the main thread waits in C (a
join, an event without a timeout), did nothing: without the library the default action
ends the process whichever thread receives it; with ours installed only the main thread
runs Python handlers, and it was not woken (the relay skipped it with no run active)."""

from __future__ import annotations

import signal
from pathlib import Path

from .signal_children import SIGTERM_TO_A_THREAD, as_without

_SOURCE = """
import time
install()
print("RESULT", count(3), flush=True)
""" + SIGTERM_TO_A_THREAD


def test_a_sigterm_to_another_thread_ends_the_process_as_without_the_library(
        tmp_path: Path) -> None:
    as_without(tmp_path, _SOURCE, (-signal.SIGTERM, []), signals=0)
