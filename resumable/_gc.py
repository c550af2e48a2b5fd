"""The cyclic garbage collector paused while a state is unpickled.

Unpickling builds every container of the state (a DEAP population: an individual, its
fitness and their dicts, 100,000 times over), and every 700 allocations start a
collection that walks the young objects, which are the state itself, and from time to
time the whole heap: nothing it builds is garbage until it is done. The cost grows with
the state: resumed in a fresh process, 100,000 individuals x 100 floats loaded in 0.77 s
paused against 1.24 s (10,000: 97 ms against 100 ms). The islands' migrants are loaded
the same way. Pickling allocates little (the default reductions' tuples), and measured
no faster paused, so saves leave the collector alone.

The pause is process-wide (``gc.disable``), as the collector is: two threads loading at
once keep it paused until both are done, and it is enabled again only if it was enabled
when the first began (a program that runs with the collector off keeps it off). A child
forked while another thread loads starts with the collector as it was before the load.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses: dict[int, int] = {}  # loads under way, by thread
_was_enabled = False  # the collector's state when the first of them began


@contextmanager
def paused() -> Iterator[None]:
    global _was_enabled
    me = threading.get_ident()
    with _lock:
        if not _pauses:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses[me] = _pauses.get(me, 0) + 1
    try:
        yield
    finally:
        with _lock:
            if _pauses[me] == 1:
                del _pauses[me]
            else:
                _pauses[me] -= 1
            if not _pauses and _was_enabled:
                gc.enable()


def _after_fork_in_child() -> None:
    # Only the forking thread lives on: loads other threads had under way never end here.
    global _lock
    _lock = threading.Lock()
    others = bool(_pauses)
    mine = _pauses.pop(threading.get_ident(), 0)
    _pauses.clear()
    if mine:  # (forked from inside a load: it ends in this process too)
        _pauses[threading.get_ident()] = mine
    elif others and _was_enabled:
        gc.enable()


os.register_at_fork(after_in_child=_after_fork_in_child)
