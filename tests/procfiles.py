"""This process's open files, read from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def open_fds_in(folder: Path) -> list[int]:
    """This process's file descriptors open on files in ``folder`` (an unnamed O_TMPFILE
    shows as ``folder/#123 (deleted)``)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder) + "/"):
            out.append(int(fd))
    return out
