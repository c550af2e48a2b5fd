"""``resumable``: list, inspect, verify and delete the runs in a store.

Nothing here unpickles: objects are checked with the verified format alone, so the
command is safe to point at a bucket whose writers you do not trust.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar
from urllib.parse import quote

from . import __version__, _format, _settings
from ._decorator import _signing_key as _parse_signing_key
from ._errors import (
    EXIT_CONFIG,
    EXIT_CORRUPT,
    EXIT_STORE,
    EXIT_TAMPERED,
    ResumableError,
    StoreError,
    StoreURLError,
)
from ._run import CALL, EPOCH, RESULT, object_kind, parse_ckpt_name
from ._run import command as command_line
from ._runid import validate_run_id
from .stores import (
    Store,
    SupportsListInfo,
    default_store_url,
    from_store_variable,
    head_of,
    open_store,
)
from .stores._base import get_screened
from .stores._local import LocalStore

PROG = "resumable"
KEY_ENV = _settings.SIGNING_KEY.name
EXIT_FAILURE = 1
EXIT_USAGE = 2  # argparse's own status for a command line it cannot take
EXIT_NOT_FOUND = 66  # EX_NOINPUT: the run is not in the store
LS_WORKERS = 16  # header reads in flight for `ls --check` (each a small ranged GET)
# What `ls` and `show` read of an object: enough for the header of any object with up
# to ~8000 frames; a longer header is read in a second request.
HEAD_BYTES = 64 * 1024


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class CliError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UsageError(CliError):
    """A command line that cannot be meant as given (options that do not go together, a
    value no option takes): exit 2 with argparse's one-line form, as the errors argparse
    finds itself, instead of the plain failure (1) they had."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


# -- reading objects ----------------------------------------------------------------


_kind_of = object_kind  # (the record kind a name must hold)


@dataclass
class ObjectInfo:
    name: str
    kind: str
    bytes: int | None  # None: not read (a file resumable never writes)
    step: int | None = None
    epoch: int | None = None
    created: str | None = None
    serializer: str | None = None
    signed: bool | None = None
    final: bool = False  # a checkpoint of the state the body left at its return
    # True: checksum (and signature, with a key) checked; False: failed;
    # None: only the header was read and parsed (`ls`, `show` without --verify).
    verified: bool | None = False
    signature_checked: bool = False
    problem: str | None = None
    tampered: bool = False
    newer: bool = False  # written by a newer resumable (a format this one cannot read)
    # A name resumable never writes (someone's model.pt): not read, so neither verified
    # nor damage to the run (no problem, bytes and verified null in --json).
    foreign: bool = False
    # Listed, then deleted before it was read: retention of a live run (a checkpoint),
    # or a deletion of the run; no damage (its problem says what happened).
    gone: bool = False


def _read_head(store: Store, key: str) -> tuple[bytes | bytearray | memoryview, int] | None:
    """A prefix of the object that holds its header (when it is one), and its size."""
    found = head_of(store, key, HEAD_BYTES)
    if found is None:
        return None
    need = _format.header_length(found[0])
    if need is not None and len(found[0]) < need <= min(found[1], _format.MAX_HEADER):
        found = head_of(store, key, need)  # a header with thousands of frames
        if found is None:
            return None
        again = _format.header_length(found[0])
        if again is not None and len(found[0]) < again <= min(found[1], _format.MAX_HEADER):
            data = store.get(key)  # replaced in between by one with a longer header
            return None if data is None else (data, memoryview(data).nbytes)
    return found


FOREIGN = "a name resumable never writes: not read"


@dataclass
class ReadError:
    """An object of a run that `ls` could not read: the store failed for good on it (a
    ``StoreError`` after its retries). One such run is marked unreadable; the others are
    still listed (review 151: one persistent 500 of 1,000 runs failed the whole `ls`)."""

    key: str  # the object, as the store names it (``<run_id>/<name>``)
    reason: str  # why, in short (the StoreError without its store URL and hint)
    exit_code: int  # the StoreError's own: 74, or 78 for a permanent refusal

    @classmethod
    def of(cls, err: StoreError, key: str) -> ReadError:
        text = " ".join(str(err).split())
        _, failed, tail = text.partition(" failed")
        if failed:  # "get <url> key '<key>' failed after 4 attempts in 60.0s: S3 ..."
            text = "failed" + tail
        # The detail up to the S3 error code and status: not the botocore text and the hint
        short = ": ".join(text.split("; ", 1)[0].split(": ")[:2])
        if len(short) > 160:
            short = short[:157] + "..."
        return cls(err.key or key, short, err.exit_code)

    def __str__(self) -> str:
        return f"{self.key} could not be read ({self.reason})"


_T = TypeVar("_T")


def _or_read_error(read: Callable[[], _T], key: str) -> _T | ReadError:
    """``read()``, or a ReadError for the StoreError it raised (named ``key`` when the
    error names none)."""
    try:
        return read()
    except StoreError as err:
        return ReadError.of(err, key)


def _inspect(store: Store, run_id: str, name: str, key: bytes | None, *,
             full: bool = True, small: dict[str, Any] | None = None) -> ObjectInfo:
    """The object's header fields; with ``full``, download it and verify it completely.

    Without ``full`` only the head of the object is read (``Store.head``), so listing a
    run of 512 MiB checkpoints costs a few KiB each; ``verified`` is then None.
    """
    kind = _kind_of(name) or "?"
    if kind == "?":
        # Someone else's file (a model, notes, a FIFO): never read, not even its head (a
        # 400 MB file was read whole to be skipped; a FIFO hung the command, review 37)
        return ObjectInfo(name, kind, None, verified=None, foreign=True)
    found: tuple[bytes | bytearray | memoryview, int] | None
    if full:
        sizes: list[int] = []

        def screen(first: memoryview, size: int) -> None:
            sizes.append(size)
            _format.screen(first, size)

        try:  # (not read whole where its first bytes refuse it: a 1 TiB foreign file)
            whole = get_screened(store, f"{run_id}/{name}", screen, _format.SCREEN_BYTES)
        except _format.InvalidObject as err:
            return ObjectInfo(name, kind, sizes[-1], problem=err.reason, newer=err.newer)
        found = None if whole is None else (whole, memoryview(whole).nbytes)
    else:
        found = _read_head(store, f"{run_id}/{name}")
    if found is None:  # deleted (retention of a live run) between the listing and now
        return ObjectInfo(name, kind, 0, problem="disappeared while reading", gone=True)
    data, size = found
    if small is not None and memoryview(data).nbytes == size:
        small[name] = data  # the read covered the object (a small record): keep it
    info = ObjectInfo(name, kind, size)
    try:
        header = _format.read_header(data, size)
    except _format.InvalidObject as err:
        info.problem, info.newer = err.reason, err.newer
        return info
    info.kind = header.kind
    info.step, info.epoch = header.step, header.epoch
    info.created = _iso_time(header.created)
    if info.created is None:  # a damaged time field: verification fails on the checksum
        info.problem = info.problem or f"created time {header.created!r} is out of range"
    info.serializer, info.signed = header.serializer, header.signed
    info.final = header.final
    if not full:
        info.verified = None
        try:  # (another run's checkpoint, copied in, was "ok" here; review 138)
            _format.check_placed(header, _kind_of(name) or None, f"{run_id}/{name}")
        except _format.InvalidObject as err:
            info.problem, info.tampered = err.reason, err.tampered
        return info
    try:
        _format.decode(data, key=key, kind=_kind_of(name) or None, name=f"{run_id}/{name}")
    except _format.InvalidObject as err:
        info.problem, info.tampered, info.newer = err.reason, err.tampered, err.newer
        return info
    info.verified = True
    info.signature_checked = key is not None
    return info


def _confirm_gone(store: Store, run_id: str, infos: list[ObjectInfo]) -> None:
    """A checkpoint that vanished between the listing and its read stays "gone" (the
    retention of a live run) only if a second listing no longer has it; any other object
    that vanished, or one still listed (a dangling symbolic link), fails as before
    (review 101: a missing result passed `verify` as retention)."""
    gone = [i for i in infos if i.gone]
    if not gone:
        return
    still = set(_run_names(store, run_id))
    for info in gone:
        if info.name in still or parse_ckpt_name(info.name) is None:
            info.gone = False
            if info.name in still:
                info.problem = "listed, but cannot be read (a dangling link?)"


def _iso_time(created: float) -> str | None:
    """The header's creation time as ISO 8601, or None when no date has it (damage)."""
    try:
        return datetime.fromtimestamp(created, UTC).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):  # NaN, infinities, year > 9999 or < 1
        return None


def _name_step(name: str) -> int | None:
    parsed = parse_ckpt_name(name)
    return None if parsed is None else parsed[1]


def _run_names(store: Store, run_id: str) -> list[str]:
    """The names of the objects directly in the run's folder. A key in a folder below
    it (``<run_id>/<run>/ckpt-...``: ``run_id`` is then a folder of runs) is no object
    of the run: the library writes none there."""
    prefix = f"{run_id}/"
    # (not the empty name of the folder marker `<run_id>/` that S3 consoles create: no
    # object of the run, shown as a blank row and kept as a nameless file, review 100)
    return [k[len(prefix):] for k in store.list(prefix)
            if k != prefix and "/" not in k[len(prefix):]]


def _require_store(store: Store, args: argparse.Namespace, what: str = "") -> None:
    """A CliError (exit 66) when the store is a local folder that does not exist: "no
    runs" there would hide a mistyped path. Called when a listing found nothing, so a
    store with runs costs nothing more. An existing empty folder is an empty store."""
    if not isinstance(store, LocalStore):
        return  # an S3 prefix or memory store exists as soon as something is put in it
    try:
        os.stat(store.root)
        return
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError:
        return  # unreadable: the listing said what it could
    if getattr(args, "store_given", True):
        how = "check the path"
    elif os.environ.get(_settings.STORE.name):
        how = f"check the path in ${_settings.STORE.name}"
    else:
        how = (f"no STORE was given and ${_settings.STORE.name} is not set, so the default "
               f"{_settings.STORE.default} was used: give the STORE or set "
               f"{_settings.STORE.name} (check the path)")
    raise CliError(f"{what}store folder {store.root} does not exist ({store.url}); {how}",
                   EXIT_NOT_FOUND)


def _run_id_problem(run_id: str) -> str | None:
    """Why a command cannot take ``run_id``, or None.

    The commands name runs that exist, so they take any folder name `ls` lists: the
    library's rules (``validate_run_id``) are for naming new runs, and a run folder
    copied or renamed by hand (``weird ☃ 100%``) is still shown, verified and removed.
    Refused: what is no single folder name or could leave the store's folder, and control
    characters (`ls` does not list such folders; it names them in a note).
    """
    if run_id in ("", ".", ".."):
        return "is not a folder name"
    if "/" in run_id or "\\" in run_id:
        return "contains a path separator"
    if _CONTROL.search(run_id):
        return "contains control characters"
    return None


def _drop_unnamable(store: Store, runs: dict[str, Any], done: str) -> None:
    """Folders of run objects under a name no command can take (`..` or the empty name
    of a doubled slash on S3) are taken out of ``runs``, with a note: what `ls` does not
    list, no command touches."""
    unnamable = {r: p for r in runs if (p := _run_id_problem(r))}
    for run_id in unnamable:
        del runs[run_id]
    if unnamable:
        named = [f"{r!r} {p}" for r, p in sorted(unnamable.items())]
        shown = ", ".join(named[:3]) + (", ..." if len(named) > 3 else "")
        print(f"note: {len(named)} folder(s) of run objects in {store.url} are not {done}, "
              f"as {PROG} show, verify and rm cannot name them ({shown}); use the store's "
              "own tools", file=sys.stderr)


def _require_run(store: Store, run_id: str, args: argparse.Namespace) -> list[str]:
    """The run's object names; a CliError (exit 66) when ``run_id`` names no run: nothing
    there, a folder of runs, or a folder with no object the library writes (someone
    else's data, which `rm` must never delete: `ls` does not list it as a run either)."""
    problem = _run_id_problem(run_id)
    if problem:
        raise CliError(f"RUN_ID {run_id!r} {problem}; give the run's name as `{PROG} ls "
                       f"{store.url}` lists it", EXIT_CONFIG)
    names = _run_names(store, run_id)
    if any(_kind_of(n) for n in names):
        return names
    listing = f"list the runs with {command_line('ls', store.url)}"
    if names:
        raise CliError(
            f"{run_id!r} in {store.url} is not a run: its {len(names)} object(s) "
            f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) are not written "
            f"by resumable; nothing was done ({listing})", EXIT_NOT_FOUND)
    inner = store.list(f"{run_id}/")
    if inner:
        runs, folders = _group_runs([k[len(run_id) + 1:] for k in inner])
        below = _below(store.url, run_id)
        if runs:
            raise CliError(
                f"{run_id!r} in {store.url} is not a run but a folder of runs; nothing was "
                f"done: list them with {command_line('ls', below)}, then name one "
                f"(`{PROG} {{show,verify,rm}} {shlex.quote(below)} RUN_ID`)", EXIT_NOT_FOUND)
        if folders:
            raise CliError(
                f"{run_id!r} in {store.url} is not a run: it holds folders of runs; nothing "
                f"was done: e.g. {command_line('ls', _below(below, folders[0]))}",
                EXIT_NOT_FOUND)
        raise CliError(
            f"{run_id!r} in {store.url} is not a run: a folder with no run in it "
            f"(no object resumable writes, {len(inner)} file(s) in its subfolders); nothing "
            f"was done ({listing})", EXIT_NOT_FOUND)
    _require_store(store, args, f"no run {run_id!r}: ")
    if _memory_note(store.url):
        listing = _MEMORY_NOTE  # (`ls memory://x` would be just as empty)
    raise CliError(f"no run {run_id!r} in {store.url} ({listing})", EXIT_NOT_FOUND)


_MEMORY_NOTE = ("a memory:// store lives in the process that made it: a `resumable` command "
                "run on its own never sees its runs; give the folder or s3:// URL the runs "
                "were saved to")


def _memory_note(url: str) -> str:
    """`` (why it is empty)`` for a memory:// store, which a command never sees; else ""."""
    return f" ({_MEMORY_NOTE})" if url.lower().startswith("memory://") else ""


def _completed(store: Store, run_id: str, names: Sequence[str]) -> ObjectInfo | None:
    """The header of the run's result if the run is completed, else None.

    Completed means the result was written by the newest attempt (its header's epoch is
    at least the newest verified attempt record): a run called again with more
    generations (``ignore=``) keeps its old result while the newer attempt runs.
    """
    if RESULT not in names:
        return None
    info = _inspect(store, run_id, RESULT, None, full=False)
    if info.gone:  # (the run deleted since the listing)
        return None
    if info.problem or info.epoch is None:
        return info if info.problem else None
    key = _signing_key(KEY_ENV)
    for name in sorted((n for n in names if n.startswith(EPOCH)), reverse=True):
        tail = name[len(EPOCH):]
        if len(tail) != 8 or not tail.isdigit():
            continue
        if int(tail) <= info.epoch:
            break  # older records cannot be newer than the result
        data = store.get(f"{run_id}/{name}")
        if data is not None and _claims_run(store, run_id, name, data, key, info):
            return None  # a newer attempt claimed the run after the result: not completed
    return info


def _claims_run(store: Store, run_id: str, name: str, data: Any, key: bytes | None,
                result: ObjectInfo) -> bool:
    """Whether the attempt record ``name``, newer than the run's ``result``, is the run's
    own: an attempt started after the result, which may be extending the run.

    A damaged record, or one written under another name (copied), fences nothing, as for
    the library. One intact and named for this run whose signature does not check with
    ``key`` is the run's own when the key at hand is not the run's: the record unsigned
    in an unsigned run (a key set in the shell), or signed in a signed run whose result
    does not check with the key either (key rotation). Such a run is not taken for
    completed (review 100: `rm --completed` deleted a run under extension). Unsigned in a
    signed run, or signed when the result checks with the key: a forgery (review 101).
    """
    where = f"{run_id}/{name}"
    try:
        header = _format.decode(data, kind="epoch", name=where).header
    except _format.InvalidObject as err:
        # Damaged, or another run's record (copied: its name says so): it fences nothing.
        # A newer resumable's record claims the run (review 114: a run that version was
        # extending was deleted as completed during a mixed-version rollout).
        return err.newer
    if key is None:
        return True
    try:
        _format.decode(data, key=key, kind="epoch", name=where)
        return True
    except _format.InvalidObject:
        pass  # intact and named for this run: its signature does not check with the key
    if not header.signed:
        return not result.signed
    if not result.signed:
        return True  # (a signed attempt after an unsigned result: kept, to be safe)
    return _inspect(store, run_id, RESULT, key).problem is not None


def _signing_key(env_name: str) -> bytes | None:
    """The key in ``$env_name``, accepted exactly as the decorator accepts it."""
    value = os.environ.get(env_name)
    # Unset or empty means no key, as for $RESUMABLE_SIGNING_KEY in the library; the
    # library's own fallback to $RESUMABLE_SIGNING_KEY must not apply to another name.
    return _parse_signing_key(os.fsencode(value)) if value else None


def _key_env(args: argparse.Namespace) -> str:
    """The variable that holds the HMAC key: --signing-key-env's, else the default."""
    return args.signing_key_env or KEY_ENV


def _command_key(args: argparse.Namespace) -> bytes | None:
    """The key of `show`/`verify`. A variable named with --signing-key-env must hold one:
    the user asked for signatures to be checked with it, and passing on checksums alone
    would hide a typo in the name or a secret that was not mounted. Without the option
    an unset $RESUMABLE_SIGNING_KEY means checksums only, with a note."""
    _named_key_set(args)
    name = _key_env(args)
    try:
        return _signing_key(name)
    except ResumableError as err:  # (the library's message speaks of signing_key=)
        size = len(os.fsencode(os.environ.get(name, "")))
        raise CliError(f"${name} holds {size} bytes; an HMAC key needs at least "
                       f"{_settings.MIN_KEY_BYTES} bytes (e.g. `openssl rand -hex 32`): set "
                       "it to the key the run was signed with", EXIT_CONFIG) from err


def _named_key_set(args: argparse.Namespace) -> None:
    """CliError (78) if --signing-key-env names a variable that is unset or empty."""
    name = args.signing_key_env
    if name is not None and not os.environ.get(name):
        state = "is empty" if name in os.environ else "is not set"
        raise CliError(
            f"--signing-key-env {name}: ${name} {state}, so no signature could be checked; "
            f"export {name}=<the HMAC key the run was signed with>, or leave out "
            f"--signing-key-env to check checksums only (or with ${KEY_ENV})", EXIT_CONFIG)


def _age(created: str | None) -> str:
    if created is None:
        return "-"
    seconds = max(0.0, time.time() - datetime.fromisoformat(created).timestamp())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in cells)


# -- commands -----------------------------------------------------------------------


def _below(url: str, prefix: str) -> str:
    """The store URL one folder down (before any ?options of an s3 URL)."""
    base, q, query = url.partition("?")
    if base.startswith("file://"):  # (a folder named exp#1: file:///.../exp%231)
        prefix = quote(prefix)
    return f"{base.rstrip('/')}/{prefix}" + (q + query if q else "")


def _group_runs(keys: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Runs (a first path component holding run objects directly) and, when there are
    none, the folders below that hold runs (see ``_run_folders``; `ls` of a store with
    runs does not look for them)."""
    runs: dict[str, list[str]] = {}
    for key in keys:
        run_id, sep, name = key.partition("/")
        if sep and name and "/" not in name:  # (loose objects at the top belong to no run)
            runs.setdefault(run_id, []).append(name)
    # A folder without any object this library writes (notes/readme.txt) is no run.
    runs = {r: names for r, names in runs.items() if any(_kind_of(n) for n in names)}
    return runs, [] if runs else _run_folders(keys)


SUGGEST_DEPTH = 3  # how many folders down `ls` looks for runs to suggest
_RUN_MARKS = ("ckpt", "epoch", "result")  # what only a run's folder holds


def _run_folders(keys: Sequence[str]) -> list[str]:
    """The folders up to SUGGEST_DEPTH levels below the store that hold runs: a
    ``<folder>/<run>/<name>`` key whose name is a checkpoint, attempt record or result.
    Any folder with subfolders was offered before, so `ls` of a folder holding a
    virtualenv said "did you mean .../venv?", and so on down site-packages (user pass).
    Shallowest first; one inside another found is left out. Each key is split at most
    SUGGEST_DEPTH + 2 times: a deep tree costs no more per key than a shallow one."""
    found: set[str] = set()
    for key in keys:
        parts = key.split("/", SUGGEST_DEPTH + 2)
        if not 3 <= len(parts) <= SUGGEST_DEPTH + 2 or "" in parts:
            continue  # a run object at the top, one too deep, or an empty component
        if _kind_of(parts[-1]) in _RUN_MARKS:
            found.add("/".join(parts[:-2]))
    kept: list[str] = []
    kept_set: set[str] = set()  # (ancestors looked up: 10,000 folders took 12 s as a scan)
    for folder in sorted(found, key=lambda f: (f.count("/"), f)):
        parts = folder.split("/")
        if not any("/".join(parts[:i]) in kept_set for i in range(1, len(parts))):
            kept.append(folder)
            kept_set.add(folder)
    return kept


def cmd_ls(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    # One listing gives names, sizes and times (1,000 objects per S3 request); headers
    # are read only with --check, or from stores whose listing has no sizes and times.
    listed = store.list_info("") if isinstance(store, SupportsListInfo) else None
    keys = [item.key for item in listed] if listed is not None else store.list("")
    about = {item.key: item for item in listed or ()}
    runs, folders = _group_runs(keys)
    if not keys:
        _require_store(store, args)
    _drop_unnamable(store, runs, "listed")
    if not runs and folders:
        shown = " or ".join(_below(store.url, f) for f in folders[:3])
        more = f" (and {len(folders) - 3} more)" if len(folders) > 3 else ""
        raise CliError(f"no runs in {store.url}, but folders of runs below it: did you mean "
                       f"{shown}{more}? e.g. "
                       f"{command_line('ls', _below(store.url, folders[0]))}",
                       EXIT_CONFIG)
    ckpts = {run_id: [n for n in names if parse_ckpt_name(n) is not None]
             for run_id, names in runs.items()}
    newest = {run_id: max(names, default=None) for run_id, names in ckpts.items()}
    read_headers = args.check or listed is None
    headers: dict[str, ObjectInfo] = {}
    # Runs whose newest checkpoint or result the store failed to give (a StoreError):
    # their rows say "unreadable", the others are listed, and the command exits 74.
    unread: dict[str, dict[str, ReadError]] = {}
    if read_headers:
        todo = [(r, n) for r, n in sorted(newest.items()) if n is not None]

        def header(item: tuple[str, str]) -> ObjectInfo | ReadError:
            run_id, name = item
            return _or_read_error(lambda: _inspect(store, run_id, name, None, full=False),
                                  f"{run_id}/{name}")

        with ThreadPoolExecutor(max_workers=LS_WORKERS, thread_name_prefix="resumable-ls") as pool:
            for (run_id, _), info in zip(todo, pool.map(header, todo), strict=True):
                if isinstance(info, ReadError):  # (the run is listed all the same)
                    unread.setdefault(run_id, {})["newest"] = info
                else:
                    headers[run_id] = info
    with_result = [r for r, names in sorted(runs.items()) if RESULT in names]
    completed: dict[str, ObjectInfo | None] = {}
    with ThreadPoolExecutor(max_workers=LS_WORKERS, thread_name_prefix="resumable-ls") as pool:
        for run_id, done in zip(with_result, pool.map(
                lambda r: _or_read_error(lambda: _completed(store, r, runs[r]), f"{r}/{RESULT}"),
                with_result), strict=True):
            if isinstance(done, ReadError):
                unread.setdefault(run_id, {})["result"] = done
            else:
                completed[run_id] = done
    rows: list[dict[str, Any]] = []
    for run_id, names in sorted(runs.items()):
        ckpt = newest[run_id]
        row: dict[str, Any] = {
            "run_id": run_id,
            "checkpoints": len(ckpts[run_id]),
            # From the name, so a damaged newest checkpoint still shows where the run got.
            "newest_step": _name_step(ckpt) if ckpt else None,
            # Attempt records by name, unread: a GET per record would cost ls its speed.
            "attempts": sum(1 for n in names if n.startswith(EPOCH) and _kind_of(n) == "epoch"),
            "complete": (done := completed.get(run_id)) is not None and not done.problem,
            # The result's header fails (ls reads headers only): COMPLETE says "damaged".
            "result_problem": done.problem if done is not None else None,
            "result_newer": done is not None and done.newer,
            "newest_created": None,
            "newest_bytes": None,
            "newest_problem": None,
            "newest_newer": False,  # (its problem: a newer resumable wrote it)
            # The state the body left at its return, which no resume starts from: known
            # from its header only (null when ls reads none, as without --check on a
            # store whose listing has sizes and times, or cannot parse it)
            "newest_final": None,
            "header_checked": read_headers and ckpt is not None and run_id in headers,
            # Why an object of the run could not be read (null: all read): neither
            # damaged nor complete, just not known; the command exits 74.
            "read_error": "; ".join(map(str, unread[run_id].values()))
                          if run_id in unread else None,
        }
        if ckpt is not None and read_headers and run_id in headers:
            info = headers[run_id]
            row.update(newest_created=info.created, newest_bytes=info.bytes,
                       newest_problem=None if info.gone else info.problem,
                       newest_newer=info.newer and not info.gone,
                       newest_final=info.final if info.step is not None and not info.gone
                       else None)
        elif ckpt is not None and f"{run_id}/{ckpt}" in about:
            # (also a header that could not be read: the listing's time and size)
            item = about[f"{run_id}/{ckpt}"]
            if item.modified or "newest" not in unread.get(run_id, {}):
                # (an object the listing could not stat either, unreadable: time and size
                # 0, not 1970's and 0 bytes, review 154; a readable one keeps a time of 0,
                # an archive's, review 155)
                row.update(newest_created=_iso_time(item.modified), newest_bytes=item.size)
        rows.append(row)
    if args.json:
        print(json.dumps({"store": store.url, "runs": rows}, indent=2))
        _fail_unread(store, unread, len(rows), "their read_error says why")
        return 0
    if not rows:
        print(f"no runs in {store.url}{_memory_note(store.url)}", file=sys.stderr)
        return 0
    print(_table(
        ["RUN ID", "CKPTS", "STEP", "ATTEMPTS", "COMPLETE", "AGE", "SIZE"],
        [[r["run_id"], r["checkpoints"], "-" if r["newest_step"] is None else
          f"{r['newest_step']} final" if r["newest_final"] else r["newest_step"],
          r["attempts"],
          "unreadable" if "result" in unread.get(r["run_id"], {})
          else ("newer" if r["result_newer"] else "damaged") if r["result_problem"]
          else "yes" if r["complete"] else "no",
          _age(r["newest_created"]) + (
              " (unreadable)" if "newest" in unread.get(r["run_id"], {})
              else (" (newer)" if r["newest_newer"] else " (damaged)")
              if r["newest_problem"] else ""),
          "-" if r["newest_bytes"] is None else _size(r["newest_bytes"])] for r in rows],
    ))
    note = ("" if args.check or listed is None
            else "; `ls --check` reads their headers too, `verify` checks a run fully")
    print(f"\n{len(rows)} run(s) in {store.url}; SIZE is the newest checkpoint's{note}")
    newer = [r["run_id"] for r in rows if r["newest_newer"] and not r["result_newer"]]
    if newer:
        print(f"AGE (newer): the newest checkpoint of {', '.join(map(repr, newer[:3]))}"
              f"{' and more' if len(newer) > 3 else ''} was written by a newer resumable; "
              "upgrade resumable to resume the run")
    newer = [r["run_id"] for r in rows if r["result_newer"]]
    if newer:
        print(f"COMPLETE newer: the result of {', '.join(map(repr, newer[:3]))}"
              f"{' and more' if len(newer) > 3 else ''} was written by a newer resumable; "
              "upgrade resumable to read it")
    damaged = [r["run_id"] for r in rows if r["result_problem"] and not r["result_newer"]]
    if damaged:
        print(f"COMPLETE damaged: the result of {', '.join(map(repr, damaged[:3]))}"
              f"{' and more' if len(damaged) > 3 else ''} is stored but fails its header "
              f"check; {command_line('verify', store.url, 'RUN_ID')} tells more")
    _print_unread(unread)
    _fail_unread(store, unread, len(rows), "why is under the table")
    return 0


UNREAD_SHOWN = 10  # runs whose read error `ls` prints under its table (then a count)


def _print_unread(unread: dict[str, dict[str, ReadError]]) -> None:
    """Under the table: which object of each unreadable run failed, and why."""
    lines = [f"{'AGE' if what == 'newest' else 'COMPLETE'} unreadable: {run_id!r}: its "
             f"{'newest checkpoint' if what == 'newest' else 'result'} {err}"
             for run_id, errors in sorted(unread.items()) for what, err in errors.items()]
    for line in lines[:UNREAD_SHOWN]:
        print(line)
    if len(lines) > UNREAD_SHOWN:
        print(f"... and {len(lines) - UNREAD_SHOWN} more object(s) that could not be read")


def _fail_unread(store: Store, unread: dict[str, dict[str, ReadError]], runs: int,
                 why: str) -> None:
    """A CliError (the StoreError's exit code, 74) after a listing with unreadable runs,
    so that a script sees the listing is not whole."""
    if not unread:
        return
    codes = {err.exit_code for errors in unread.values() for err in errors.values()}
    code = codes.pop() if len(codes) == 1 else EXIT_STORE
    if isinstance(store, LocalStore):
        hint = "check the store's folder and disk"
    else:
        hint = (f"check the store's server and network (each read was retried for "
                f"{_settings.RETRY_DEADLINE.read():g}s: raise {_settings.RETRY_DEADLINE.name} "
                "to retry longer)")
    raise CliError(
        f"{len(unread)} of {runs} run(s) in {store.url} could not be read (the store failed "
        f"for good on an object of each, e.g. {min(unread)!r}: marked unreadable, {why}); "
        f"{_listed_anyway(unread, runs)}: "
        f"{hint}, then run the command again", code)


def _listed_anyway(unread: dict[str, dict[str, ReadError]], runs: int) -> str:
    if len(unread) < runs:
        return "the other runs are listed"
    if all("newest" in errors for errors in unread.values()):
        return "no run could be read"
    return "each run is listed with what could be read"  # (results only: review 155)


def _verified_text(info: ObjectInfo) -> str:
    if _foreign(info):
        return "not resumable's, not read"  # (no damage to the run: no "NO")
    if info.gone:
        return "gone: deleted after the listing"
    if info.problem:
        return f"NO: {info.problem}"
    if info.verified is None:
        return "ok"  # the HEADER column: it parses and its lengths match the size
    if info.signed and not info.signature_checked:
        return f"checksum (set ${KEY_ENV} to check the signature)"
    return "yes"


def _history(run_id: str, records: dict[str, Any]) -> list[dict[str, Any]]:
    """Each attempt's ``call-<epoch>`` record: when, from which step, with which ignored
    arguments (JSON, checksum-verified; nothing is unpickled)."""
    rows = []
    for name in sorted(records):
        data = records[name]
        try:
            record = json.loads(bytes(_format.decode(data, kind="call",
                                                     name=f"{run_id}/{name}").frames[0]))
            rows.append({
                "epoch": int(record["epoch"]),
                "started": datetime.fromtimestamp(record["started"], UTC).isoformat(
                    timespec="seconds"),
                "resumed_from_step": record.get("resumed_from_step"),
                "ignored": dict(record.get("shown") or {}),
                "code": record.get("code") or None,
            })
        except (_format.InvalidObject, ValueError, KeyError, TypeError, IndexError,
                OverflowError, OSError) as err:  # a start time no datetime holds: 1e30, inf
            rows.append({"epoch": None, "object": name, "problem": str(err) or repr(err)})
    return rows


def _print_history(history: list[dict[str, Any]]) -> None:
    if not history:
        return
    print("\nattempts, each with the ignored arguments it ran with:")
    rows, code = [], None
    for h in history:
        if h.get("problem"):
            rows.append([h["object"], "-", "-", f"unreadable: {h['problem']}"])
            continue
        changed = code is not None and h["code"] is not None and h["code"] != code
        code = h["code"] or code
        start = h["resumed_from_step"]
        ignored = " ".join(f"{k}={v}" for k, v in sorted(h["ignored"].items())) or "-"
        rows.append([h["epoch"], h["started"].replace("+00:00", ""),
                     "fresh" if start is None else f"step {start}",
                     ignored + ("  (code changed)" if changed else "")])
    print(_table(["ATTEMPT", "STARTED (UTC)", "FROM", "IGNORED ARGUMENTS"], rows))


def cmd_show(args: argparse.Namespace) -> int:
    # A variable named with --signing-key-env must be set, with or without --verify (it
    # was asked for); the key itself is read only to verify: a broken key setting does
    # not keep `show` from listing the headers (review 55).
    if args.verify:
        key = _command_key(args)
    else:
        _named_key_set(args)
        key = None
    store = open_store(args.store)
    names = _require_run(store, args.run_id, args)
    records: dict[str, Any] = {}
    whole: dict[str, Any] = {}  # attempt records and a small result, read whole
    infos = [_inspect(store, args.run_id, n, key, full=args.verify,
                      small=records if n.startswith(CALL)
                      else whole if _kind_of(n) in ("epoch", "result") else None)
             for n in names]
    _confirm_gone(store, args.run_id, infos)
    history = _history(args.run_id, records)
    attempts, failing, unchecked, by_newer = _verified_attempts(store, args.run_id, infos,
                                                                whole, key)
    complete, result_problem, status = _result_status(store, args, infos, whole, key,
                                                      attempts, unchecked, by_newer)
    if args.json:
        print(json.dumps({"store": store.url, "run_id": args.run_id,
                          "objects": [asdict(i) for i in infos], "history": history,
                          "complete": complete, "result_problem": result_problem,
                          "attempts": len(attempts), "attempt_records_failing": failing},
                         indent=2))
        return _verdict(args, store, infos) if args.verify else 0
    print(f"run {args.run_id} in {store.url}")
    print(_table(
        ["OBJECT", "KIND", "STEP", "EPOCH", "CREATED (UTC)", "BYTES", "SERIALIZER", "SIGNED",
         "VERIFIED" if args.verify else "HEADER"],
        [[i.name, i.kind, (f"{i.step} final" if i.final else i.step)
          if i.step is not None and i.kind == "ckpt" else "-",
          "-" if i.epoch is None else i.epoch,
          (i.created or "-").replace("+00:00", ""), "-" if _foreign(i) else i.bytes,
          i.serializer or "-",
          "-" if i.signed is None else ("yes" if i.signed else "no"), _verified_text(i)]
         for i in infos],
    ))
    print(f"\ncomplete: {status}")
    print(f"attempts: {len(attempts)}" + (
        f" (attempt records that verify; {len(failing)} more fail verification: "
        f"{', '.join(failing)}; `{PROG} verify` tells why)" if failing else ""))
    _print_history(history)
    return _verdict(args, store, infos) if args.verify else 0


def _result_status(store: Store, args: argparse.Namespace, infos: list[ObjectInfo],
                   whole: dict[str, Any], key: bytes | None, attempts: list[int],
                   unchecked: Sequence[int] = (),
                   by_newer: Sequence[int] = ()) -> tuple[bool, str | None, str]:
    """(completed, why the result fails verification or None, the `complete:` line).

    Without --verify a result of up to 64 KiB is held whole by its header read and is
    verified at no cost; a larger one is judged by its header.
    """
    result = next((i for i in infos if i.name == RESULT), None)
    if result is None:
        return False, None, "no (no result stored)"
    problem, checked = result.problem, bool(args.verify)
    if problem is None and not args.verify and RESULT in whole:
        checked = True
        try:
            _format.decode(whole[RESULT], key=key, kind="result",
                           name=f"{args.run_id}/{RESULT}")
        except _format.InvalidObject as err:
            problem = err.reason
    if problem:
        return False, problem, (
            f"no: the result exists but fails verification ({store.url} key "
            f"'{args.run_id}/{RESULT}': {problem}); check the run with "
            f"{command_line('verify', store.url, args.run_id)}")
    newer = [e for e in attempts if e > (result.epoch or 0)]
    if newer:
        return False, None, (f"no: attempt {max(newer)} started after the result (written by "
                             f"attempt {result.epoch}) and is extending the run")
    newer = [e for e in unchecked if e > (result.epoch or 0)]
    if newer:  # (as `rm --completed` reads it: such a run is not deleted as completed)
        return False, None, (
            f"no: attempt {max(newer)} started after the result (written by attempt "
            f"{result.epoch}), and may be extending the run; its record is intact but its "
            f"signature does not check with ${_key_env(args)}: set it to the run's key")
    newer = [e for e in by_newer if e > (result.epoch or 0)]
    if newer:  # (review 116: "yes" here, while `ls` and `rm --completed` kept the run)
        return False, None, (
            f"no: attempt {max(newer)} started after the result (written by attempt "
            f"{result.epoch}), and may be extending the run; a newer resumable wrote its "
            "record: upgrade resumable to read it")
    return True, None, "yes" + ("" if checked else " (the result's header was read; "
                                "`show --verify` verifies it whole)")


def _verified_attempts(store: Store, run_id: str, infos: list[ObjectInfo],
                       claims: dict[str, Any],
                       key: bytes | None
                       ) -> tuple[list[int], list[str], list[int], list[int]]:
    """The epochs of the run's attempt records that verify (checksum; the signature too
    with ``key``), the names of those that do not, the epochs among those whose
    record is intact but fails only its signature check (another key, or none), and
    those a newer resumable wrote (a format this one cannot read). The
    records are a few hundred bytes, so the header reads of `show` hold them whole: no
    request more. One larger than a header read is no record the library writes, and
    fails."""
    epochs, failing, unchecked, by_newer = [], [], [], []
    result = next((i for i in infos if i.name == RESULT), None)
    for info in infos:
        if _kind_of(info.name) != "epoch":
            continue
        data = claims.get(info.name)
        try:
            if data is not None:
                _format.decode(data, key=key, kind="epoch", name=f"{run_id}/{info.name}")
                epochs.append(int(info.name[len(EPOCH):]))
                continue
        except _format.InvalidObject as err:
            if err.newer:
                by_newer.append(int(info.name[len(EPOCH):]))
            elif (err.tampered and result is not None
                    and _claims_run(store, run_id, info.name, data, key, result)):
                unchecked.append(int(info.name[len(EPOCH):]))
        failing.append(info.name)
    return epochs, failing, unchecked, by_newer


def _foreign(info: ObjectInfo) -> bool:
    """An object whose name the library never writes in a run's folder (someone's
    notes, a tool's marker): never read, so its content is no damage to the run."""
    return info.foreign


def _verdict(args: argparse.Namespace, store: Store, infos: list[ObjectInfo]) -> int:
    """0 when every object of the run verified; else the error line and the exit code
    (tampered or corrupt) that `verify` and `show --verify` share."""
    bad = [i for i in infos if i.problem and not _foreign(i) and not i.gone]
    if not bad:
        if infos and all(i.gone or _foreign(i) for i in infos):
            print(f"{PROG}: error: run {args.run_id!r} in {store.url} was deleted while it "
                  f"was read: every object of it is gone", file=sys.stderr)
            return EXIT_NOT_FOUND
        return 0
    ours = sum(1 for i in infos if not _foreign(i))  # (files it never writes: not counted)
    if all(i.newer for i in bad):
        # Not damage: the library says "upgrade" (exit 78) for such a run (review 114)
        print(f"{PROG}: error: {len(bad)} of {ours} object(s) of run {args.run_id!r} in "
              f"{store.url} were written by a newer resumable, in a format this version "
              f"cannot read: {', '.join(i.name for i in bad)}; upgrade resumable to check "
              "them", file=sys.stderr)
        return EXIT_CONFIG
    print(f"{PROG}: error: {len(bad)} of {ours} object(s) of run {args.run_id!r} in "
          f"{store.url} fail verification: {', '.join(i.name for i in bad)}",
          file=sys.stderr)
    return EXIT_TAMPERED if any(i.tampered for i in bad) else EXIT_CORRUPT


def cmd_verify(args: argparse.Namespace) -> int:
    key = _command_key(args)
    store = open_store(args.store)
    names = _require_run(store, args.run_id, args)
    infos = [_inspect(store, args.run_id, n, key) for n in names]
    _confirm_gone(store, args.run_id, infos)
    ckpts = [i for i in infos if parse_ckpt_name(i.name) is not None]
    for info in infos:
        if _foreign(info):
            print(f"skip  {info.name}: {FOREIGN}")
            continue
        if info.gone:  # (retention of a live run: the newer checkpoints are checked)
            print(f"gone  {info.name}: deleted after the listing, before it was read (the "
                  "run's retention, if it is running)")
            continue
        print(f"{'FAIL' if info.problem else 'ok  '}  {info.name}"
              + (f": {info.problem}" if info.problem else ""))
    unchecked = [i for i in infos if i.signed and not i.signature_checked and not i.problem]
    if unchecked:
        print(f"note: {len(unchecked)} object(s) are signed but no key is set; only checksums "
              f"were checked (set ${_key_env(args)})", file=sys.stderr)
    failed = _verdict(args, store, infos)
    if failed:
        return failed
    verified = sum(1 for i in infos if not i.problem and not _foreign(i))
    gone = sum(1 for i in ckpts if i.gone)
    print(f"run {args.run_id}: {verified} object(s) verified, {len(ckpts) - gone} "
          f"checkpoint(s)" + (f" ({gone} more deleted while verifying)" if gone else ""))
    return 0


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _parse_age(text: str) -> float:
    """'7d', '12h', '30m', '90s', '2w' -> seconds. The unit is required: a bare `7`
    deleted runs completed 7 seconds ago where 7 days was likely meant (user pass)."""
    t = text.strip().lower()
    unit = _DURATION_UNITS.get(t[-1:])
    number = t[:-1] if unit is not None else t
    try:
        value = float(number) * (unit or 1)
    except ValueError:
        value = -1.0
    if unit is None and 0 < value < float("inf"):  # (0 is 0 in any unit)
        raise UsageError(f"--older-than {text!r} has no unit: give one, e.g. {t}d for days "
                         f"({t}w weeks, {t}h hours, {t}m minutes, {t}s seconds)")
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"--older-than {text!r} is not a duration; use e.g. 7d, 12h, 30m or 90s")
    return value


def _rm_completed(args: argparse.Namespace) -> int:
    """``rm --completed [--older-than AGE] [STORE]``: delete runs that stored their result."""
    url = args.store
    if args.run_id is not None:  # `rm --completed STORE`: the one positional is the store
        # (whether STORE was given, not whether it equals the default: `rm --completed
        # $RESUMABLE_STORE run1` took the folder run1 for the store, review 55)
        if getattr(args, "store_given", url != default_store_url()):
            raise UsageError("rm --completed deletes every completed run of a store; give only "
                           "the STORE, not a RUN_ID (`resumable rm STORE RUN_ID` deletes one)")
        url = args.run_id
    min_age = _parse_age(args.older_than) if args.older_than is not None else None
    store = open_store(url)
    runs: dict[str, list[str]] = {}
    for key in store.list(""):
        run_id, sep, name = key.partition("/")
        if sep and name and "/" not in name:  # a folder below a run holds none of it
            runs.setdefault(run_id, []).append(name)
    if not runs:
        _require_store(store, args)
    _drop_unnamable(store, runs, "deleted")
    doomed: list[tuple[str, list[str], str]] = []
    now = time.time()
    for run_id, names in sorted(runs.items()):
        info = _completed(store, run_id, names)
        if info is None:
            continue  # no result, or a newer attempt is extending the run
        if info.problem or info.created is None:
            _skip_unreadable(store, run_id, info)
            continue
        seconds = now - datetime.fromisoformat(info.created).timestamp()
        if min_age is not None and seconds < min_age:
            continue
        doomed.append((run_id, names, _age(info.created)))
    if not doomed:
        print(f"no completed runs{'' if min_age is None else ' older than ' + args.older_than}"
              f" in {store.url}{_memory_note(store.url)}")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError(f"refusing to delete {len(doomed)} completed run(s) without "
                           "confirmation: stdin is not a terminal; pass --yes")
        for run_id, _, age in doomed:
            print(f"  {run_id} (completed {age} ago)")
        answer = input(f"delete these {len(doomed)} completed run(s) from {store.url}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted", file=sys.stderr)
            return EXIT_FAILURE
    total = deleted = 0
    for run_id, listed, age in doomed:
        # The whole result, checksum verified, before its run goes (one at a time, just
        # before: a refused or unconfirmed command reads none): a damaged result is no
        # result, and its checkpoints are the way back (review 100: a payload bit flip
        # passed the header read, and the run was deleted)
        info = _inspect(store, run_id, RESULT, None)
        if info.problem:
            _skip_unreadable(store, run_id, info)
            continue
        deleted += 1
        names = [n for n in listed if _kind_of(n)]  # (someone else's files stay)
        # The result last: a run whose deletion is interrupted still shows as complete.
        for name in sorted(names, key=lambda n: n == RESULT):
            store.delete(f"{run_id}/{name}")
        total += len(names)
        print(f"deleted {run_id} (completed {age} ago, {len(names)} object(s))"
              f"{_kept([n for n in listed if not _kind_of(n)])}")
    print(f"deleted {deleted} completed run(s), {total} object(s), from {store.url}")
    return 0


def _skip_unreadable(store: Store, run_id: str, info: ObjectInfo) -> None:
    if info.gone:  # (review 101: "cannot be read" was true, but not why)
        print(f"skipping {run_id}: its result was deleted since the listing (another "
              f"`{PROG} rm`, or f.reset?); the rest of the run is left as it is: "
              f"{command_line('show', store.url, run_id)} shows it",
              file=sys.stderr)
        return
    print(f"skipping {run_id}: its result record cannot be read ({info.problem}); "
          f"{command_line('verify', store.url, run_id)} tells more",
          file=sys.stderr)


def cmd_rm(args: argparse.Namespace) -> int:
    if args.completed:
        return _rm_completed(args)
    if args.older_than is not None:
        raise UsageError("--older-than goes with --completed (`resumable rm --completed "
                       "--older-than 7d STORE`)")
    if args.run_id is None:
        missing = _missing_run_id("rm", args.store)
        raise CliError(f"{missing}; or `{PROG} rm --completed {args.store}` to delete every "
                       "completed run", EXIT_CONFIG)
    store = open_store(args.store)
    listed = _require_run(store, args.run_id, args)
    # The run's own objects, as f.reset deletes them: someone else's file in its folder
    # (a model, notes) stays, and is named (review 38)
    names = [n for n in listed if _kind_of(n)]
    foreign = [n for n in listed if not _kind_of(n)]
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError(f"refusing to delete run {args.run_id!r} without confirmation: "
                           "stdin is not a terminal; pass --yes")
        answer = input(f"delete {len(names)} object(s) of run {args.run_id!r} from "
                       f"{store.url}{_kept(foreign)}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted", file=sys.stderr)
            return EXIT_FAILURE
    # Attempt records first: an attempt still writing the run stops at its next save
    # (FencedError) instead of finishing into a run that is gone.
    epochs = [n for n in names if n.startswith(EPOCH)]
    for name in epochs:
        store.delete(f"{args.run_id}/{name}")
    # An attempt whose last check passed before its record went may have written since
    # the listing (its last checkpoint, the result) and never looks again: list again.
    names = sorted(set(names) | {n for n in _run_names(store, args.run_id) if _kind_of(n)})
    for name in sorted((n for n in names if n not in epochs),
                       key=lambda n: not n.startswith(EPOCH)):
        store.delete(f"{args.run_id}/{name}")
    remove_temp = getattr(store, "remove_temp_files", None)
    if remove_temp is not None:  # left by saves that were killed mid-write
        remove_temp(f"{args.run_id}/")
    print(f"deleted {len(names)} object(s) of run {args.run_id} from {store.url}"
          f"{_kept(foreign)}")
    return 0


def _kept(foreign: Sequence[str]) -> str:
    """What a deletion leaves in the run's folder: files resumable never writes."""
    if not foreign:
        return ""
    shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
    return f" (keeping {len(foreign)} file(s) resumable never writes: {shown})"


# -- argument parsing ---------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse's usage block is noise for a one-line failure; keep the hint to --help.
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        dashed = [a for a in unknown.group(1).split() if a[:1] == "-" and a[:2] != "--"
                  ] if unknown else []
        if dashed:  # a run id like '-x' reads as an option
            message += (f"; if {dashed[0]!r} is a RUN_ID, give it after `--`, options "
                        f"first: `{PROG} COMMAND [OPTIONS] STORE -- {dashed[0]}`")
        self.exit(EXIT_USAGE, f"{PROG}: error: {_see_help(message, self.prog)}\n")


def _see_help(message: str, prog: str) -> str:
    """A usage error's line, as argparse's are given (see _Parser.error)."""
    return f"{message} (see `{prog} --help`)"


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", nargs="?", metavar="STORE",
                   help="a folder, file:///abs/path, s3://bucket/prefix or memory://name "
                        "(default: $RESUMABLE_STORE, else ./.resumable)")


def _key_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--signing-key-env", metavar="NAME",
                   help=f"environment variable holding the HMAC key (default: {KEY_ENV}; "
                        "one named here must be set)")


def _looks_like_store(text: str) -> bool:
    """A RUN_ID that cannot be one but reads as a store: the run id was left out.

    Only invalid run ids qualify, so a valid one is never second-guessed (a folder of
    that name in the working directory, say).
    """
    try:
        validate_run_id(text, "RUN_ID")
    except ResumableError:
        return "://" in text or os.sep in text or "/" in text or os.path.isdir(text)
    return False


def _missing_run_id(command: str, store_text: str) -> CliError:
    """`resumable show STORE` with the run id forgotten: say so, and name runs there."""
    try:
        store = open_store(store_text)
        keys = store.list("")
        runs, folders = _group_runs(keys)
    except (ResumableError, OSError) as err:
        return CliError(f"RUN_ID is missing: `{PROG} {command} STORE RUN_ID` ({err})",
                        EXIT_CONFIG)
    names = sorted(runs)
    base, q, query = store_text.partition("?")
    parent, _, name = base.rstrip("/").rpartition("/")
    if (not names and any("/" not in k and _kind_of(k) for k in keys)
            and parent and not parent.endswith((":", "/"))):  # not a bucket or a root
        # The run's own folder given as the store: its objects lie at the top.
        return CliError(f"RUN_ID is missing: {store_text} is the folder of run {name!r}, "
                        f"not a store; e.g. `{PROG} {command} {parent}{q}{query} {name}`",
                        EXIT_CONFIG)
    if names:
        listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return CliError(f"RUN_ID is missing: {store_text} is a store with run(s) {listed}; "
                        f"e.g. `{PROG} {command} {store_text} {names[0]}`", EXIT_CONFIG)
    hint = (f"; runs are in a folder below it, e.g. "
            f"{command_line('ls', _below(store_text, folders[0]))}"
            if folders else _memory_note(store_text)
            or f"; list its runs with {command_line('ls', store_text)}")
    return CliError(f"RUN_ID is missing: `{PROG} {command} STORE RUN_ID`; {store_text} is a "
                    f"store with no runs{hint}", EXIT_CONFIG)


def _swapped(args: argparse.Namespace, store_given: bool) -> str | None:
    """`resumable show RUN STORE` failed: the hint with the arguments the right way
    round, when the second reads as a store (a URL, or an existing folder where the first
    is none) and the first could be a run id. Else None: a failure with the arguments in
    order (a run that is not there) gets no such guess."""
    run_id = getattr(args, "run_id", None)
    if (args.command not in ("show", "verify", "rm") or not store_given or run_id is None
            or getattr(args, "completed", False)):
        return None
    first, second = args.store, run_id
    if _run_id_problem(first) is not None:
        return None
    if "://" not in second and not (os.path.isdir(second) and not os.path.isdir(first)):
        return None
    return (f"{second!r} reads as a store and {first!r} as a run id: STORE comes first, "
            f"{command_line(args.command, second, first)}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)
    commands: list[tuple[str, str, Callable[[argparse.Namespace], int]]] = [
        ("ls", "list the runs in a store, one row each, from one listing of the store "
               "(--check also reads each run's newest header; `verify` checks a run "
               "fully)", cmd_ls),
        ("show", "list a run's objects with their headers, reading only the headers; "
                 "--verify downloads and verifies every object too (nothing is unpickled)",
         cmd_show),
        ("verify", "check every object of a run (header, checksum, signature); "
                   "exit non-zero if any fails", cmd_verify),
        ("rm", "delete a run (its checkpoints, attempts and result)", cmd_rm),
    ]
    for name, help_text, func in commands:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        _store_arg(p)
        if name == "rm":
            p.add_argument("run_id", metavar="RUN_ID", nargs="?",
                           help="the run (see `resumable ls`); not with --completed")
        elif name != "ls":
            p.add_argument("run_id", metavar="RUN_ID", help="the run (see `resumable ls`)")
        if name in ("ls", "show"):
            p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "ls":
            p.add_argument("--check", action="store_true",
                           help="also read the newest checkpoint's header of every run (in "
                                "parallel) and mark damaged ones; without it AGE and SIZE "
                                "come from the listing")
        if name == "show":
            p.add_argument("--verify", action="store_true",
                           help="download every object and verify it as `verify` does "
                                "(VERIFIED column; exit as `verify` exits); without it "
                                "only headers are read, the HEADER column says whether "
                                "each one parses, and --json gives verified: null")
        if name in ("show", "verify"):
            _key_arg(p)
        if name == "rm":
            p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
            p.add_argument("--completed", action="store_true",
                           help="delete every completed run (one that stored its result) "
                                "instead of one RUN_ID: `rm --completed [STORE]`")
            p.add_argument("--older-than", metavar="AGE",
                           help="with --completed: only runs completed at least AGE ago "
                                "(e.g. 7d, 12h, 30m; the unit, s, m, h, d or w, is "
                                "required)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (args.command == "rm" and not args.completed and args.run_id is None
            and args.store is not None):
        # `rm [STORE] RUN_ID`: both positionals are optional (`rm --completed [STORE]`),
        # so argparse gave a lone one to STORE; as for show and verify, it is the run.
        args.store, args.run_id = None, args.store
    store_given = args.store is not None
    args.store_given = store_given
    if args.store is None:
        args.store = default_store_url()
    try:
        run_id = getattr(args, "run_id", None)
        if not store_given and run_id is not None and _looks_like_store(run_id):
            raise _missing_run_id(args.command, run_id)
        # The one setting the commands use (their storage retries): 78 now, not at a
        # retry. The others (the spill folder, timeouts) are the library's, not checked:
        # a debugging shell may not have the pod's folders (review 55).
        _settings.RETRY_DEADLINE.read()
        code: int = args.func(args)
        return code
    except UsageError as err:
        message, exit_code = _see_help(str(err), f"{PROG} {args.command}"), err.exit_code
    except (CliError, ResumableError) as err:
        message, exit_code = str(err), err.exit_code
        swapped = _swapped(args, store_given)
        if swapped:
            message = f"{swapped} ({message})"
        elif not store_given and isinstance(err, StoreURLError):  # (reviews 151, 154, 155)
            message = from_store_variable(message, "give STORE")
    except KeyboardInterrupt:
        message, exit_code = "interrupted", 130
    except BrokenPipeError:  # `resumable ls | head`: the reader left; not an error
        sys.stderr.close()
        return 0
    except Exception as err:  # the contract: one line, no traceback
        message, exit_code = f"{type(err).__name__}: {err}", EXIT_FAILURE
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
