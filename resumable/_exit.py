"""Exit codes for errors that end a program, so a Kubernetes podFailurePolicy can act on them.

An uncaught ``ResumableError`` makes the process exit with the error's ``exit_code``,
after what Python's own exit does: the traceback, threading's exit hooks and the join
of the other threads, the atexit handlers. Set ``RESUMABLE_EXIT_CODES=0`` to keep
Python's plain exit status 1. Exit codes are for scripts: in an interactive session
(``python -i``, the REPL, IPython/Jupyter) an error is only reported and the session
goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from types import TracebackType

from . import _settings
from ._errors import ResumableError
from ._signals import interactive

_installed = False


def install() -> None:
    global _installed
    try:
        wanted = _settings.EXIT_CODES.read()
    except ResumableError:
        # A bad value fails each decorated call with an error that names it
        # (``_settings.check_all``; the CLI reads only the variables it uses), not the
        # import (review 151: every program that imported resumable died of it, with a
        # traceback). Until then: the default.
        wanted = True
    if _installed or not wanted:
        return
    _installed = True
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        previous(kind, value, tb)
        if (isinstance(value, ResumableError) and not interactive()
                and threading.current_thread() is threading.main_thread()):
            # Only the main thread's uncaught error ends the program. An app may route
            # its threads' errors here (threading.excepthook calling sys.excepthook):
            # exiting from such a thread cut the main thread's run unsaved (review 32).
            try:
                # As Python's own exit, but for the status: threading's exit hooks (an
                # unfinished f.iter's state is saved there) and the join of the other
                # threads (their runs go on and save, as they would), then atexit.
                # Without them os._exit cut other threads' runs unsaved (review 29).
                # Each step on its own: a Ctrl-C during the join still runs atexit.
                for step in (getattr(threading, "_shutdown", None), atexit._run_exitfuncs,
                             sys.stdout.flush, sys.stderr.flush):
                    if step is not None:
                        with contextlib.suppress(BaseException):  # (an interrupt: go on)
                            step()
            finally:
                os._exit(value.exit_code)

    sys.excepthook = hook
