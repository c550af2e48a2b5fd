"""Every ``RESUMABLE_*`` environment variable: name, default, meaning and parser, in one table.

The rest of the package asks this module (``_settings.UPLOAD_DUTY.read()``) and never
reads ``os.environ`` for a ``RESUMABLE_*`` name itself. Values are read when they are
used (at each call of a decorated function, each retried operation), not at import,
so a test or a launcher may set them late; all are checked when a call (or a CLI
command) starts (``check_all``), so a bad one fails there, not at a SIGTERM. The
README's table of environment variables is this table (``markdown_table()`` prints it;
a test compares the two).

To add a variable: one ``Setting`` constant below, added to ``SETTINGS``; then paste
the README table from
``python -c 'import resumable._settings as s; print(s.markdown_table())'``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._errors import ConfigurationError

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable. ``parse`` raises ValueError for a bad value."""

    name: str
    default: T  # the value when the variable is unset or empty
    shown: str  # the default as the README shows it
    meaning: str  # the README's "meaning" cell (markdown)
    parse: Callable[[str], T]
    expected: str = ""  # completes "$NAME='x' must be ..." when parse fails
    strip: bool = True  # False: the value is used byte for byte (keys, names)
    secret: bool = False  # never echo the value in an error

    def read(self) -> T:
        raw = os.environ.get(self.name, "")
        if not raw or (self.strip and not raw.strip()):
            return self.default
        return self.parse_value(raw)

    def parse_value(self, raw: str) -> T:
        try:
            return self.parse(raw.strip() if self.strip else raw)
        except ConfigurationError:
            raise
        except ValueError as err:
            detail = f" ({err.args[0]})" if isinstance(err, _Why) else ""
            value = " (value not shown)" if self.secret else f"={raw!r}"
            raise ConfigurationError(
                f"${self.name}{value} must be {self.expected}{detail}; "
                f"unset it for the default ({self.shown})"
            ) from None


class _Why(ValueError):
    """A ValueError whose message is worth adding to the setting's own."""


# -- parsers --------------------------------------------------------------------------


def _text(raw: str) -> str:
    return raw


def _copies(raw: str) -> int:
    if raw not in ("1", "2"):
        raise ValueError(raw)
    return int(raw)


def _flag(raw: str) -> bool:
    value = raw.lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


FOREVER = 1e8  # seconds (3 years): what "inf" means, a wait a lock can make


def _seconds(raw: str) -> float:
    value = float(raw)
    if not value >= 0:  # NaN and negatives; inf is allowed (no limit)
        raise ValueError(raw)
    # (as a number every wait takes: inf, or 1e10, overflowed the SIGTERM watchdog's
    # waits, and its thread died; review 138)
    return min(value, FOREVER)


MIN_DUTY = 1e-6  # a save then waits at most a million times its own length


def _share(raw: str) -> float:
    value = float(raw)
    # (1e-15 was taken: the upload thread's pause overflowed a lock's wait, the thread
    # died, and the process hung at its final flush, SIGTERM or not; review 138. The
    # uploader's waits are bounded now; this keeps 1 / duty a number of any use)
    if not MIN_DUTY <= value <= 1:
        raise ValueError(raw)
    return value


_SIZE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
               "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_size(text: str) -> float:
    """'256MiB', '1Gi', '500MB', '1e9', 'inf' -> bytes; ValueError otherwise."""
    t = text.strip().lower().replace(" ", "")
    if t in ("inf", "none", "unlimited"):
        return float("inf")
    unit = t.rstrip("b") if t.endswith("b") and not t[:-1].endswith("e") else t
    digits = unit.rstrip("kmgti")
    factor = _SIZE_UNITS.get(unit[len(digits):])
    if factor is None or not digits:
        raise ValueError(text)
    value = float(digits) * factor
    if not value >= 0 or value == float("inf"):
        raise ValueError(text)
    return value


def _spill_dir(raw: str) -> str | None:
    if raw.lower() in ("off", "0", "no", "none", "false"):
        return None
    if not os.path.isdir(raw):
        raise _Why("no such folder" if not os.path.exists(raw) else "not a folder")
    if not os.access(raw, os.W_OK | os.X_OK):
        raise _Why("not writable by this process")
    # The folder checked now, not one of that name under wherever the body goes (chdir)
    return os.path.abspath(raw)


def _run_id(raw: str) -> str | None:
    from ._runid import validate_run_id  # its own error names $RESUMABLE_RUN_ID

    return validate_run_id(raw, "$RESUMABLE_RUN_ID")


MIN_KEY_BYTES = 16


def _key(raw: str) -> bytes | None:
    # The environment's bytes, as Python decoded them (surrogateescape): a key of random
    # bytes (a Secret from `openssl rand 32`) is not UTF-8 text (review 115)
    key = os.fsencode(raw)  # (exactly the environment's bytes, as Python decoded them)
    if len(key) < MIN_KEY_BYTES:
        raise _Why(f"it has {len(key)} bytes")
    return key


# -- the table ------------------------------------------------------------------------

STORE = Setting(
    "RESUMABLE_STORE", "./.resumable", "`./.resumable`",
    "store when `store=None`", _text, "a store URL or path", strip=False)
RUN_ID: Setting[str | None] = Setting(
    "RESUMABLE_RUN_ID", None, "derived",
    "run id when `run_id=None` (letters, digits, `_.:@+=-`, at most 200 characters; "
    "anything else is rejected, not rewritten)",
    _run_id, "a run id: letters, digits and `_.:@+=-`, at most 200 characters", strip=False)
SIGNING_KEY: Setting[bytes | None] = Setting(
    "RESUMABLE_SIGNING_KEY", None, "none",
    "HMAC key when `signing_key=None` (at least 16 bytes)",
    _key, f"a key of at least {MIN_KEY_BYTES} bytes (e.g. `openssl rand -hex 32`)",
    strip=False, secret=True)
UPLOAD_DUTY = Setting(
    "RESUMABLE_UPLOAD_DUTY", 1 / 3, "0.33",
    "largest share of wall time spent saving (`1` = back to back)",
    _share, "a number from 1e-6 to 1, e.g. 0.33")
SYNC = Setting(
    "RESUMABLE_SYNC", False, "0",
    "`1` (or `true`): every save completes before the body goes on (nothing coalesced)",
    _flag, "1 or 0 (or true/false, yes/no, on/off)")
SNAPSHOT_LIMIT = Setting(
    "RESUMABLE_SNAPSHOT_LIMIT", float(256 * 2**20), "256MiB",
    "states larger than this are saved in place: no copy, the body waits for the save "
    "(`inf`: always copy; `0`: never; units `KiB` `MiB` `GiB`, `MB` `GB`, `Mi` `Gi`)",
    parse_size, "a size such as 256MiB, 2GiB, 0 (always save in place) or inf (always copy)")
SNAPSHOT_COPIES = Setting(
    "RESUMABLE_SNAPSHOT_COPIES", 2, "2",
    "copies of a state over 1 MiB that `every=\"generation\"` may hold: `2` goes on while "
    "the previous state uploads and keeps the newest beside it, in a file (see "
    "`RESUMABLE_SPILL_DIR`; the loop never waits for storage); `1` waits at that yield "
    "instead (the loop runs at the storage's pace when that is slower)",
    _copies, "1 or 2")
SPILL_DIR: Setting[str | None] = Setting(
    "RESUMABLE_SPILL_DIR", "", "derived",
    "the system's temporary folder (`$TMPDIR`, else `/tmp`) unless set: where a newer "
    "state over 1 MiB waits, as a file, while the one before it uploads "
    "(`every=\"generation\"`), instead of as a second copy in memory: up to two unnamed "
    "files of the state's size, in the page cache (which the kernel can write out and take "
    "back), gone when the call ends; `off`: keep that copy in memory (on tmpfs it is kept "
    "in memory anyway)",
    _spill_dir, "a folder this process can write to, or off", strip=False)
SNAPSHOT_FORK = Setting(
    "RESUMABLE_SNAPSHOT_FORK", False, "0",
    "`1`: a due yield forks a child that pickles the state (copy-on-write) and hands it "
    "to the upload; the loop pays the fork (a few ms), not the pickling: for states of "
    "many Python objects (a DEAP population). Linux; not with CUDA or other state that "
    "does not survive a fork",
    _flag, "1 or 0 (or true/false, yes/no, on/off)")
FORK_TIMEOUT = Setting(
    "RESUMABLE_FORK_TIMEOUT", 60.0, "60",
    "with `RESUMABLE_SNAPSHOT_FORK=1`: seconds a child may take to pickle a state, on top "
    "of 20 times what the first snapshot took on the loop's thread; a child that takes "
    "longer (a lock another thread held at the fork) is ended, and snapshots are taken "
    "on the loop's thread for the rest of the call",
    _seconds, "a number of seconds >= 0, e.g. 60")
RESTART_BACKOFF = Setting(
    "RESUMABLE_RESTART_BACKOFF", 0.0, "none",
    "seconds before the first in-process restart of a generation, doubling (max 60 s)",
    _seconds, "a number of seconds, e.g. 0.5")
RETRY_DEADLINE = Setting(
    "RESUMABLE_RETRY_DEADLINE", 60.0, "60",
    "seconds a storage operation is retried before `StoreError`",
    _seconds, "a number of seconds >= 0, e.g. 60")
TERM_TIMEOUT = Setting(
    "RESUMABLE_TERM_TIMEOUT", 20.0, "20",
    "seconds after SIGTERM a run may take to reach its next yield before its body is "
    "interrupted (also what the program's own cleanup and exit handlers get afterwards)",
    _seconds, "a number of seconds >= 0, e.g. 20 (the pod's terminationGracePeriodSeconds "
    "must cover it plus two saves: one under way, then the newest state)")
EXIT_CODES = Setting(
    "RESUMABLE_EXIT_CODES", True, "1",
    "`0` (or `false`): uncaught resumable errors exit with Python's plain 1",
    _flag, "1 or 0 (or true/false, yes/no, on/off)")

MIGRATION_TIMEOUT = Setting(
    "RESUMABLE_MIGRATION_TIMEOUT", 600.0, "600",
    "seconds an island waits for a neighbour's migrants (`resumable.islands`)",
    _seconds, "a number of seconds >= 0, e.g. 600")

AUDIT_CHILD: Setting[str] = Setting(
    "RESUMABLE_AUDIT_CHILD", "", "none",
    "set by `f.audit(fresh_process=True)` in the interpreters it starts, for the processes "
    "their body starts: their islands migrations are refused (an audit never writes to "
    "the experiment). Internal: never set it yourself",
    _text, "the audited function's name", strip=False)

SETTINGS: tuple[Setting[Any], ...] = (
    STORE, RUN_ID, SIGNING_KEY, UPLOAD_DUTY, SYNC, SNAPSHOT_LIMIT, SNAPSHOT_COPIES,
    SPILL_DIR, SNAPSHOT_FORK, FORK_TIMEOUT,
    RESTART_BACKOFF,
    RETRY_DEADLINE, EXIT_CODES, TERM_TIMEOUT, MIGRATION_TIMEOUT, AUDIT_CHILD,
)


# Read when a call starts (and a CLI command), whether or not this call comes to use them:
# a bad value found only where it is first used failed at a SIGTERM (in the timeout
# watchdog's thread) or at a store's first retry. RUN_ID, SIGNING_KEY and STORE are read
# at the call's start when they are used at all; AUDIT_CHILD is set by the library.
CHECKED_AT_START: tuple[Setting[Any], ...] = tuple(
    s for s in SETTINGS if s not in (STORE, RUN_ID, SIGNING_KEY, AUDIT_CHILD))


def check_all() -> None:
    """Raise ConfigurationError, naming the variable, for the first bad value among
    ``CHECKED_AT_START``."""
    for setting in CHECKED_AT_START:
        setting.read()


def markdown_table() -> str:
    """The README's environment-variable table."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for s in SETTINGS:
        shown = s.shown if s.shown in ("derived", "none") or s.shown.startswith("`") \
            else f"`{s.shown}`"
        lines.append(f"| `{s.name}` | {shown} | {s.meaning} |")
    return "\n".join(lines)
