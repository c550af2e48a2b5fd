"""What a call is: its run id, its fingerprint, and the checks that use them.

A run's ``identity`` record holds one hash per identifying argument (and the function
and ``version=``); a call under a fixed run id whose arguments differ is refused with
``RunMismatchError`` before anything runs. Each attempt writes ``call-<epoch>``: the
hash and a short display of its ignored arguments (``ignore=``) and of the function's
code. The stored result counts only for a call whose ignored arguments equal those of
the attempt that wrote it; otherwise the run is extended from its last checkpoint.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import sys
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._errors import ConfigurationError, RunMismatchError
from ._run import CALL, IDENTITY, Checkpoint, Run
from ._runid import (
    ENCODING,
    _mod,
    code_fingerprint,
    derive_run_id,
    encode_arguments,
    encode_leniently,
    encode_value_as,
    fixed_run_id,
)

log = logging.getLogger("resumable")

_SHOWN = 60  # characters of an argument's repr kept in records (scalars only)


@dataclass(frozen=True)
class CallIdentity:
    run_id: str
    function: str
    version: str | int | None
    fixed: bool  # run_id= or $RESUMABLE_RUN_ID
    arguments: dict[str, str]  # identifying argument -> hash
    shown: dict[str, str]  # identifying argument -> short display
    ignored: dict[str, str] = field(default_factory=dict)  # ignored argument -> hash
    ignored_shown: dict[str, str] = field(default_factory=dict)
    code: str = ""  # hash of the decorated function's code
    # each closure variable of the decorated function -> the hash of its value where that
    # cannot change (a number, a string, a tuple of such), else ""; and its type shown
    # (never its value). Not part of the run id (a closure also holds a factory's lists,
    # loggers, counters, which change from call to call): a run made with other values
    # is warned about (_warn_if_changed).
    closure: dict[str, str] = field(default_factory=dict)
    closure_shown: dict[str, str] = field(default_factory=dict)
    # identifying argument -> its value: to hash it as older versions of the encoding did
    # (a run they recorded under a fixed id resumes), and to derive their run ids
    values: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # ignored argument -> its value: to hash it as the encoding of an older attempt's
    # record did (review 109)
    ignored_values: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    older_ids: Callable[[], dict[int, str]] = field(
        default=dict, compare=False, repr=False)

    def record(self) -> dict[str, Any]:
        return {"function": self.function, "version": self.version,
                "arguments": self.arguments, "shown": self.shown, "created": time.time(),
                "encoding": ENCODING}


def identify(func: Callable[..., Any], arguments: Mapping[str, Any], *,
             ignore: tuple[str, ...], version: str | int | None,
             run_id: str | None) -> CallIdentity:
    """The run id and fingerprint of a call (``arguments`` without the state)."""
    identifying = {k: v for k, v in arguments.items() if k not in ignore}
    fixed = fixed_run_id(run_id)
    older_ids: Callable[[], dict[int, str]] = dict
    if fixed is None:
        encoded = encode_arguments(identifying)  # no stable value: ConfigurationError
        hashes = {k: _hash(v) for k, v in encoded.items()}
        rid = derive_run_id(func, identifying, version, encoded)

        def older_ids() -> dict[int, str]:
            found: dict[int, str] = {}
            for encoding in range(ENCODING - 1, 0, -1):
                try:
                    old = derive_run_id(func, identifying, version,
                                        encode_arguments(identifying, encoding))
                except ConfigurationError:
                    continue
                if old != rid and old not in found.values():
                    found[encoding] = old
            return found
    else:
        # A fixed id never needed the arguments' values: a part without a stable value
        # (a lock, a connection) is compared by its type, the rest by value.
        hashes = {k: _lenient_hash(k, v) for k, v in identifying.items()}
        rid = fixed
    ignored = {k: v for k, v in arguments.items() if k in ignore}
    return CallIdentity(
        run_id=rid, function=f"{_mod(func.__module__)}.{func.__qualname__}", version=version,
        fixed=fixed is not None, arguments=hashes,
        shown={k: _show(v) for k, v in identifying.items()},
        ignored={k: _lenient_hash(k, v) for k, v in ignored.items()},
        ignored_shown={k: _show(v) for k, v in ignored.items()},
        code=code_fingerprint(func),
        **_closure(func),
        values=identifying, ignored_values=ignored, older_ids=older_ids,
    )


def _closure(func: Callable[..., Any]) -> dict[str, dict[str, str]]:
    """``closure`` and ``closure_shown`` of CallIdentity for ``func``."""
    code = getattr(func, "__code__", None)
    cells = getattr(func, "__closure__", None) or ()
    if not isinstance(code, types.CodeType) or len(code.co_freevars) != len(cells):
        return {}
    hashes, shown = {}, {}
    for name, cell in zip(code.co_freevars, cells, strict=True):
        try:
            value = cell.cell_contents
        except ValueError:  # (empty: assigned later in the enclosing function)
            continue
        # A value that cannot change by its hash, shown by its type alone (a factory's
        # API token or key stays out of the store and the logs, reviews 145, 146);
        # any other (a list, a logger, a hook) by "" and its type: not compared, but a
        # change from a fixed value to such a one is (make(3) -> make(np.int64(5))).
        hashes[name] = _hash(encode_value_as(value, name, ENCODING)) if _fixed_value(
            value) else ""
        shown[name] = "None" if value is None else f"<{type(value).__name__}>"
    if not hashes:
        return {}
    return {"closure": hashes, "closure_shown": shown}


def _fixed_value(value: Any, depth: int = 0) -> bool:
    """A value nothing can change: a number (numpy's scalars too), a string, bytes, None,
    a tuple or frozenset of such."""
    if type(value) in (type(None), bool, int, float, complex, str, bytes):
        return True
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic) and not value.dtype.hasobject:
        return True
    return (type(value) in (tuple, frozenset) and depth < 8
            and all(_fixed_value(v, depth + 1) for v in value))


def _hash(encoded: bytes) -> str:
    return hashlib.sha256(encoded).hexdigest()[:16]


def _lenient_hash(name: str, value: Any, encoding: int = ENCODING) -> str:
    """The hash of an argument; the parts of it without a stable value count by type.

    Versions before ENCODING 3 counted the whole argument by its type then (a lock in an
    object hid all of it): ``encoding`` < 3 gives their hash, to check their records.
    """
    if encoding >= 3:
        return _hash(encode_leniently(value, name, encoding))
    try:
        return _hash(encode_value_as(value, name, encoding))
    except ConfigurationError:
        return f"type:{_mod(type(value).__module__)}.{type(value).__qualname__}"


def _show(value: Any) -> str:
    """A short display for records and messages: scalars only (no secrets in bulk)."""
    if value is None or isinstance(value, (bool, float)) or (
            isinstance(value, int) and value.bit_length() <= 256):
        return repr(value)  # (not an int of thousands of digits: past str's limit)
    if isinstance(value, str) and len(value) <= _SHOWN:
        return repr(value)
    return f"<{type(value).__qualname__}>"


def _same_function(recorded: str, current: str) -> bool:
    """Equal names; or, where one side ran as a script (``__main__``), the same qualified
    name at the end of the other's module: ``python train.py`` and ``python -m
    pkg.train`` are the same code. (Not just the last name: ``__main__.GA.run`` is not
    ``__main__.PSO.run``.)"""
    if recorded == current:
        return True
    for main, other in ((recorded, current), (current, recorded)):
        if main.startswith("__main__."):
            qualname = main[len("__main__."):]
            if other.endswith("." + qualname) and not other.startswith("__main__."):
                return True
    return False


def check_call(run: Run, ident: CallIdentity,
               ignore: tuple[str, ...]) -> dict[str, Any] | None:
    """Record the run's identity on first use; refuse a call whose arguments differ.

    Returns the identity record the run had, verified (None: it had none). One that
    fails verification raises CheckpointCorruptError (or CheckpointTamperedError).
    """
    recorded = run.read_record(IDENTITY, "identity", strict=True)
    if recorded is None:
        if run.write_record(IDENTITY, "identity", ident.record(), create_only=True):
            return None
        recorded = run.read_record(IDENTITY, "identity", strict=True)  # another was first
        if recorded is None:
            return None
    theirs: dict[str, str] = recorded.get("arguments") or {}
    shown: dict[str, str] = recorded.get("shown") or {}
    names = sorted((set(theirs) | set(ident.arguments)) - set(ignore))
    # A record without "encoding" was written before paths had tags of their own: its
    # hash of an argument holding a path is the old one (a fixed run id kept the run).
    # A record without "encoding" was written before paths had tags of their own (1).
    # Under an older encoding, this call's hash is compared as that encoding made it.
    encoding = recorded.get("encoding", 1)
    older = isinstance(encoding, int) and 1 <= encoding < ENCODING

    def same(n: str) -> bool:
        if theirs.get(n) == ident.arguments.get(n):
            return True
        return (older and n in theirs and n in ident.values
                and theirs[n] == _lenient_hash(n, ident.values[n], encoding))

    differ = [n for n in names if not same(n)]
    parts = [f"{n!r} ({shown.get(n, 'absent')} in the run, "
             f"{ident.shown.get(n, 'absent')} in this call)" for n in differ]
    if recorded.get("version") != ident.version:
        differ.append("version=")
        parts.append(f"version= ({recorded.get('version')!r} in the run, "
                     f"{ident.version!r} in this call)")
    if not _same_function(str(recorded.get("function", ident.function)), ident.function):
        differ.insert(0, "function")
        parts.insert(0, f"the function ({recorded.get('function')} in the run, "
                        f"{ident.function} in this call)")
    if not differ:
        return recorded
    source = "run id" if ident.fixed else "derived run id (a hash collision?)"
    new = [n for n in differ if n in ident.arguments and n not in theirs]
    # An argument the run was started without (a parameter added since, say): leaving it
    # out of the identity is what resumes that run with this call.
    hint = (f"; or, if this call is to resume that run, ignore=({', '.join(map(repr, new))},)"
            " (the run id then no longer checks what it leaves out)"
            if new and len(new) == len(differ) else "")
    raise RunMismatchError(
        f"run {ident.run_id!r} in {run.store.url} was started by another call; "
        f"{', '.join(parts)} {'differs' if len(parts) == 1 else 'differ'}. This {source} "
        "belongs to that call: call it with the "
        "same arguments, give this call another run id (run_id= or $RESUMABLE_RUN_ID), "
        f"or delete the run with {run.rm_command(ident.run_id)} to start it over{hint}",
        differences=tuple(differ),
    )


def record_attempt(run: Run, ident: CallIdentity, resumed: Checkpoint | None) -> None:
    """``call-<epoch>``: which ignored values and which code this attempt ran with."""
    run.write_record(f"{CALL}{run.epoch:08d}", "call", {
        "epoch": run.epoch, "started": time.time(), "function": ident.function,
        "code": ident.code, "ignored": ident.ignored, "shown": ident.ignored_shown,
        "resumed_from_step": resumed.step if resumed is not None else None,
        "encoding": ENCODING,  # (what hashed "ignored": review 109)
        "closure": ident.closure, "closure_shown": ident.closure_shown,
    })


def result_applies(run: Run, ident: CallIdentity,
                   identity: Mapping[str, Any] | None = None) -> bool:
    """Whether the stored result answers this call: its ignored arguments are equal too.

    ``identity`` is the run's identity record as ``check_call`` read it.
    """
    if not ident.ignored:
        return True
    wrote = run.read_record(f"{CALL}{run.result_epoch:08d}", "call")
    if wrote is None:
        return False  # unknown: extending the run from its last checkpoint is always right
    theirs = wrote.get("ignored") or {}
    if theirs == ident.ignored:
        return True
    # Hashed by an older encoding, which the record names (review 109): equal values it
    # hashed otherwise are no change. A record without the field is from before it; its
    # encoding is not known, and trying each older one would take values they took as
    # equal (np.float32(0.5) and 0.5) for no change: the run is extended instead, which
    # is always right (it recomputes the return value from the last checkpoint)
    recorded = wrote.get("encoding")
    if isinstance(recorded, int) and 1 <= recorded < ENCODING and theirs == {
            n: _lenient_hash(n, v, recorded) for n, v in ident.ignored_values.items()}:
        return True
    # An ignored argument at None that the run never had (not ignored by the attempt that
    # wrote the result, not in the run's identity): a parameter added since, left at its
    # None. It is what the run was made without, so it is no change. (Only with the
    # identity the run had, read and verified: an unreadable one tells nothing.)
    ours = ident.ignored
    if identity is not None:
        had = set(theirs) | set(identity.get("arguments") or {})
        ours = {n: h for n, h in ident.ignored.items()
                if n in had or h != _lenient_hash(n, None)}
        if theirs == ours:
            return True
    before = wrote.get("shown") or {}
    changes = ", ".join(f"{n}: {before.get(n, '?')} -> {ident.ignored_shown.get(n, '?')}"
                        for n in sorted(ours) if theirs.get(n) != ours[n])
    older = "" if isinstance(recorded, int) else (
        "; or the same, hashed otherwise by the older version of resumable that wrote "
        "its record")
    log.info("run %s is complete, but with other ignored arguments (%s%s): extending it "
             "from its last checkpoint", run.where(), changes, older)
    return False


def warn_if_code_changed(run: Run, ident: CallIdentity, resumed: Checkpoint) -> None:
    """A WARNING when the checkpoint was written by other code of the function, or by
    the function with other values in its closure."""
    _warn_if_changed(run, ident, resumed.epoch, resumed.key.rsplit("/", 1)[1], "resuming it")


def warn_if_result_changed(run: Run, ident: CallIdentity) -> None:
    """The same for a stored result that a call is about to return (review 142: a
    factory's function made with n=5 returned the result of the one made with n=3, and
    changed code returned a stored result without a word, where a resume warned)."""
    _warn_if_changed(run, ident, run.result_epoch, "its stored result", "returning it")


def _warn_if_changed(run: Run, ident: CallIdentity, epoch: int, what: str,
                     doing: str) -> None:
    try:
        wrote = run.read_record(f"{CALL}{epoch:08d}", "call")
    except Exception as err:  # (only a warning depends on it: never the call, review 145)
        log.debug("run %s: could not read the record of attempt %d: %s", run.where(),
                  epoch, err)
        return
    if wrote is None:
        return
    if wrote.get("code") and ident.code and wrote["code"] != ident.code:
        log.warning(
            "run %s: %s was written by different code of %s (its bytecode changed since, "
            "or the Python version did); %s anyway. If the change is incompatible with "
            "the saved state, pass version= to @checkpointed (e.g. version=2) to start a "
            "new run", run.where(), what, ident.function, doing)
    theirs, before = wrote.get("closure"), wrote.get("closure_shown")
    if (not isinstance(theirs, dict) or not isinstance(before, dict)
            or wrote.get("encoding") != ENCODING):
        return  # (a record from before closures were recorded, hashed otherwise, or odd)
    ours, now = ident.closure, ident.closure_shown

    def differs(n: str) -> bool:
        # Both sides not fixed values: nothing to compare. None on one side and no fixed
        # value on the other: an optional hook, set in one call (the integrations' own
        # cell, review 145), no value of the run.
        if not theirs[n] and not ours[n]:
            return False
        if "None" in (before.get(n), now.get(n)) and not (theirs[n] and ours[n]):
            return False
        return bool(theirs[n] != ours[n])

    changed = sorted(n for n in set(theirs) & set(ours) if differs(n))
    if changed:
        values = ", ".join(f"{n}: {before.get(n, '?')} -> {now.get(n, '?')}"
                           for n in changed)
        log.warning(
            "run %s: %s was made by %s with other values in its closure (%s), which are "
            "no part of the run id; %s anyway. If they make it another computation, "
            "pass them as arguments (or change version=) so that each has a run of its own",
            run.where(), what, ident.function, values, doing)


def warn_if_older_version_derived_another(run: Run, ident: CallIdentity) -> None:
    """A fresh start under a derived id: one WARNING when an older version of the encoding
    derived another id for this call and that run has checkpoints.

    Not resumed on its own: the older encodings gave one id to calls that this one tells
    apart (np.float32(0.5) and 0.5), so that run may be another call's. The user knows.
    """
    if ident.fixed:
        return
    # Every encoding's ids begin with the function's name: with no other run of it in
    # the store, there is none to point out, and the older ids (each a walk of all the
    # arguments again, most of a large call's start) are not derived.
    name = run.run_id[: run.run_id.rindex("-") + 1]
    try:
        others = {key.split("/", 1)[0] for key in run.store.list(name)} - {run.run_id}
    except Exception:
        return  # the store fails: the run's own operations report that
    if not others:
        return
    try:
        older = ident.older_ids()
    except Exception:  # (an argument an older encoding could not take: no older run)
        return
    for encoding, old in sorted(older.items(), reverse=True):
        if old not in others:
            continue
        other = Run(run.store, old)
        try:
            names = other.checkpoint_names()
            record = other.read_record(IDENTITY, "identity") if names else None
        except Exception:
            return  # the store fails: the run's own operations report that
        if record is not None and record.get("encoding", 1) == ENCODING:
            continue  # this version started that run: it is another call's
        if names:
            log.warning(
                "run %s starts fresh, but %s has %d checkpoint(s): that is the id an older "
                "version of resumable (run id encoding %d) derived for this call. This "
                "version tells apart arguments that one took as equal (numpy scalars and "
                "Python numbers, a 0-d array and a 1-element one, an OrderedDict's order, "
                "classes made at run time, subclasses' slots, NaNs' bits, RNG subclasses' "
                "attributes, the class a __reduce__'s classmethod is bound to). If that run is "
                "this call's, "
                "resume it with run_id=%r (or $RESUMABLE_RUN_ID); if not, delete it with "
                "%s", run.where(), other.where(), len(names), encoding, old,
                run.rm_command(old))
            return


def check_version(version: Any) -> str | int | None:
    if version is None or (isinstance(version, (str, int)) and not isinstance(version, bool)):
        return version
    raise ConfigurationError(f"version must be a str or an int (e.g. version=2), got {version!r}")


def ignore_names(ignore: Any) -> tuple[str, ...]:
    names = (ignore,) if isinstance(ignore, str) else ignore
    try:
        names = tuple(names)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise ConfigurationError(
            f"ignore must be a list of argument names (e.g. ignore=['generations']), "
            f"got {ignore!r}")
    return names


def check_ignore(func: Callable[..., Any], ignore: tuple[str, ...], state_arg: str) -> None:
    """ignore= names parameters of the function other than the state (at decoration)."""
    params = [p for p in inspect.signature(func).parameters if p != state_arg]
    unknown = [n for n in ignore if n not in params]
    if unknown:
        what = ("the state (never part of the run's identity)" if unknown == [state_arg]
                else f"{'not a parameter' if len(unknown) == 1 else 'not parameters'}")
        raise ConfigurationError(
            f"ignore names {', '.join(map(repr, unknown))}, which "
            f"{'is' if len(unknown) == 1 else 'are'} {what}; the parameters ignore= can name "
            f"are {', '.join(params) or 'none'}"
        )
