"""Review 126 D3: with ``install_signal_handlers()`` and no run active, a SIGTERM the
kernel hands to a thread other than the main one, while the main thread waits in C (a
join, an event without a timeout), did nothing: without the library the default action
ends the process whichever thread receives it; with ours installed only the main thread
runs Python handlers, and it was not woken (the relay skipped it with no run active)."""

from __future__ import annotations

import signal
from pathlib import Path

from .signal_children import as_without

_SOURCE = """
import time
install()
print("RESULT", count(3), flush=True)
main = threading.main_thread()

def main_blocked():  # in the wait below, asleep in the kernel (an event, not a sleep)
    with open(f"/proc/self/task/{main.native_id}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    frame = sys._current_frames().get(main.ident)
    while frame is not None and frame.f_back is not None:
        frame = frame.f_back
    return state == "S" and frame is not None and frame.f_lineno == WAIT_LINE

def worker():
    while not main_blocked():
        time.sleep(0.001)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread only
    forever()

WAIT_LINE = sys._getframe().f_lineno + 2
threading.Thread(target=worker, daemon=True).start()
forever()  # the main thread, in C with no timeout
"""


def test_a_sigterm_to_another_thread_ends_the_process_as_without_the_library(
        tmp_path: Path) -> None:
    as_without(tmp_path, _SOURCE, (-signal.SIGTERM, []), signals=0)
