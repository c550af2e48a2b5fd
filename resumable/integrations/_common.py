"""What every integration shares: option handling, the run id, the checkpointed loop."""

from __future__ import annotations

import collections
import copy
import difflib
import functools
import inspect
import itertools
import keyword
import logging
import random
import re
import types
from collections.abc import Callable, Generator, Mapping
from typing import Any

from .. import _numpy, _rng, _settings
from .._decorator import checkpointed
from .._errors import ConfigurationError, RunMismatchError
from .._identity import ignore_names
from .._progress import Bar
from .._run import IDENTITY
from ..stores._base import head_of
from ._identity import Unidentifiable, digest, numpy_seed

log = logging.getLogger("resumable")

# numpy's global seed, a part of every integration's run when np.random.seed(n) left the
# global RNG as it is at the call (see numpy_seed); absent otherwise, so that the run ids
# of unseeded runs are those they had before it was a part.
NUMPY_SEED = "numpy_seed"


def option_names() -> frozenset[str]:
    """The ``@checkpointed`` options an integration accepts as keyword arguments."""
    return frozenset(inspect.signature(checkpointed).parameters) - {"state_arg"}


def split_options(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``@checkpointed`` options, everything else) from an integration's ``**kwargs``."""
    names = option_names()
    ours = {k: v for k, v in kwargs.items() if k in names}
    rest = {k: v for k, v in kwargs.items() if k not in names}
    return ours, rest


def check_options(func: str, options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - option_names())
    if unknown:
        raise TypeError(
            f"{func}() got unexpected keyword argument(s) {', '.join(unknown)}; besides the "
            f"library's own arguments it takes the @checkpointed options "
            f"{', '.join(sorted(option_names()))}")


def refuse_near_misses(func: str, passed_on: Mapping[str, Any]) -> None:
    """TypeError for a keyword passed on to the library that looks like a misspelt option.

    For libraries that swallow unknown keywords (pymoo's ``setup`` sets any of them as an
    attribute), so ``stor=`` would otherwise checkpoint silently to the default store.
    """
    names = sorted(option_names())
    for key in sorted(passed_on):
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
        if close:
            raise TypeError(
                f"{func}() got the keyword argument {key}=, which is not one of the "
                f"@checkpointed options: did you mean {close[0]}=? (the library would take "
                f"{key}= silently). The options are {', '.join(names)}")


def progress_option(options: dict[str, Any], total: int | None,
                    postfix: Callable[[Any], Mapping[str, Any]]) -> None:
    """``progress=True`` (or unset and later enabled) shows the total and the best fitness."""
    value = options.get("progress", False)
    if value is True:
        options["progress"] = Bar(total=total, postfix=postfix)


def run_checkpointed(
    name: str,
    identity: Callable[[], Mapping[str, Any]],
    body: Callable[[Any], Generator[Any, None, Any]],
    options: Mapping[str, Any],
    *,
    ignorable: Callable[[str], str | None] | None = None,
) -> Any:
    """Run ``body(state)`` under ``@checkpointed(**options)`` as the function ``name``.

    Each part of ``identity()`` (what identifies the run: seeds, sizes, operators by
    name, code and parameters) is one argument of an inner checkpointed function, under
    the part's name: its value when it is a number, a short string or None, else its
    digest. So the run id derives from them as from any call's arguments,
    ``RunMismatchError`` names the parts that differ (``cxpb``, not an internal digest),
    and ``ignore=`` takes part names (``ngen``, ``budget``). The live objects reach the
    body through its closure. A part without a stable value needs ``run_id=`` (or
    $RESUMABLE_RUN_ID). ``ignorable(part)`` says why a part cannot be ignored (None: it
    can); without it every part can.

    One part is added here, for every integration: ``numpy_seed``, numpy's global seed
    when ``np.random.seed(n)`` left the global RNG as it is at the call (an objective may
    draw from it: two seeds are two runs). It is absent otherwise, so unseeded runs keep
    the ids they had before it was a part; ``ignore=("numpy_seed",)`` leaves it out.
    """
    explicit = options.get("run_id") or _settings.RUN_ID.read()
    parts = dict(identity())
    seed = numpy_seed()
    if seed is not None:
        parts[NUMPY_SEED] = seed
    left_out = set(_ignored(options))

    def argument(part: str, value: Any) -> Any:
        if part not in left_out:
            return _argument(part, value)
        # An ignored part is no part of the run id: what stands for it (the attempt's
        # record of its ignored values) need not have a stable value, and a problem
        # holding a process pool must not fail the call (review 99)
        try:
            return _argument(part, value)
        except Unidentifiable:
            return _argument(part, stable_parts({part: value})[part])

    try:
        arguments = {parameter_name(p): argument(p, value) for p, value in parts.items()}
    except Unidentifiable as err:
        if not explicit:
            raise ConfigurationError(
                f"{name}: cannot derive a run id because {err.path} has no value that is the "
                f"same in every process ({err.reason}); pass run_id='<a name for this run>' "
                "(or set $RESUMABLE_RUN_ID) so a restarted process finds its checkpoints"
            ) from None
        # The run is named; what can be identified still is, so that a call with another
        # seed or operator parameter under that name is a RunMismatchError, not the stored
        # state of another configuration.
        arguments = {parameter_name(p): _argument(p, value)
                     for p, value in stable_parts(parts).items()}
    ignored = NUMPY_SEED in _ignored(options)
    if ignored:
        # Found in one process and not in another (numpy drawn from before the call, or
        # unseeded), and never used by a resumed run (its checkpoint has numpy's state):
        # always a part, and always None, so that ignore= never fails and a completed run
        # returns its result whatever the seed (a run made without the part too: an
        # ignored None counts as absent, see _identity.result_applies).
        arguments[NUMPY_SEED] = None
    _check_ignorable(name, options, arguments, ignorable)
    on_fresh = None
    if NUMPY_SEED in arguments and not explicit and not ignored:
        told: list[bool] = []

        def on_fresh() -> None:
            if not told:
                told.append(True)
                _tell_of_a_run_without_the_seed(name, body, options, run, arguments)

    progress = options.get("progress")
    total = progress.total if isinstance(progress, Bar) else progress
    if isinstance(total, str) and total not in arguments:
        # (the decorator's message would name an inner function the user never wrote)
        raise ConfigurationError(
            f"{name}: progress={total!r} names none of the run's parts "
            f"({', '.join(sorted(arguments))}); progress=True shows the bar with the total "
            "this integration knows (its number of generations or budget), where it has one")
    run = checkpointed(**options)(_function(name, body, arguments, on_fresh))
    try:
        return run(**arguments)
    except RunMismatchError as err:
        if err.differences == (NUMPY_SEED,) and NUMPY_SEED not in arguments:
            # (the other way round, the run has none: the message says ignore= already)
            err.args = (f"{err}; if this process restarts that run and numpy's seed was not "
                        "recognised here (numpy drawn from before the call), "
                        f"ignore={(NUMPY_SEED,)!r} resumes it",)
        raise


def _function(name: str, body: Callable[[Any], Generator[Any, None, Any]],
              arguments: Mapping[str, Any], on_fresh: Callable[[], None] | None = None,
              ) -> Callable[..., Generator[Any, None, Any]]:
    """The inner generator function ``name``, one keyword parameter per part;
    ``on_fresh()`` runs when the body starts without a checkpoint."""
    module, _, qualname = name.rpartition(".")

    def gen(*, state: Any = None, **_parts: Any) -> Generator[Any, None, Any]:
        if state is None and on_fresh is not None:
            on_fresh()
        return (yield from body(state))

    gen.__module__, gen.__qualname__, gen.__name__ = module, qualname, qualname
    gen.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in arguments]
        + [inspect.Parameter("state", inspect.Parameter.KEYWORD_ONLY, default=None)])
    return gen


def _ignored(options: Mapping[str, Any]) -> tuple[str, ...]:
    """The part names ``ignore=`` gives (a name or names), as the decorator reads them."""
    return ignore_names(options.get("ignore") or ())


def _tell_of_a_run_without_the_seed(name: str, body: Callable[[Any], Generator[Any, None, Any]],
                                    options: Mapping[str, Any], run: Any,
                                    arguments: Mapping[str, Any]) -> None:
    """At a fresh start of ``run`` (the call's checkpointed function): a warning if the
    same call without numpy's seed has a run (one started before numpy's seed was a part,
    or by a process that drew from numpy before the call, so its seed was not
    recognised). It may be this run, or another."""
    rest = {k: v for k, v in arguments.items() if k != NUMPY_SEED}
    try:
        other = checkpointed(**options)(_function(name, body, rest))._run((), rest)[0]
        if head_of(other.store, other.key(IDENTITY), 1) is None:  # (not read, not verified)
            return
        ours = run._run((), dict(arguments))[0]
    except Exception as err:  # only a warning depends on it: never the body's failure
        log.debug("%s: could not look for a run without numpy's seed: %s", name, err)
        return
    log.warning(
        "%s: starting run %s (numpy's global RNG seeded with %d is part of its id), and "
        "run %s of the same call without numpy's seed exists. If this process is a restart "
        "of that run (started before resumable took numpy's seed into run ids, or by a "
        "process that drew from numpy before the call), pass ignore=(%r,) to resume it "
        "instead, for that restart only: kept, it lets other seeds share that run again",
        name, ours.where(), arguments[NUMPY_SEED], other.where(), NUMPY_SEED)


def parameter_name(part: str) -> str:
    """A part's name as a parameter: ``lambda`` (DEAP's mu+lambda) is ``lambda_``, as in
    DEAP's own signature; ``class`` is ``class_``."""
    return part + "_" if keyword.iskeyword(part) or part == "state" else part


def _argument(part: str, value: Any) -> Any:
    """What stands for a part among the inner function's arguments: a number, a short
    string, a bool or None as itself (messages show it: ``cxpb (0.5 in the run, 0.6 in
    this call)``), anything else as its digest."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str) and len(value) <= 40:
        return value
    return "digest:" + digest({part: value})[:16]


def _check_ignorable(name: str, options: Mapping[str, Any], arguments: Mapping[str, Any],
                     ignorable: Callable[[str], str | None] | None) -> None:
    """``ignore=`` names parts, and only parts the integration can leave out: one whose
    new value a resumed run would not use (a library that restores it from the
    checkpoint) would otherwise be ignored silently."""
    for part in _ignored(options):
        if part not in arguments:
            raise ConfigurationError(
                f"{name}: ignore names {part!r}, which is not a part of this run's identity; "
                f"the parts are {', '.join(arguments)}")
        # numpy's seed can always be left out: the run ids were so before it was a part
        why = ignorable(part) if ignorable is not None and part != NUMPY_SEED else None
        if why:
            raise ConfigurationError(f"{name}: ignore={part!r} is not supported: {why}")


def stable_parts(parts: Mapping[str, Any]) -> dict[str, Any]:
    """``parts`` with what has no stable value replaced by its name, one level deep.

    A part that cannot be identified is looked at attribute by attribute (a toolbox's
    operators, an instance's attributes, a mapping's items): those that can be keep their
    value, the others become a marker with their path. Never deeper: the parts of an object
    without a stable value (a pool's processes, their pids) must not reach the digest.
    """
    out: dict[str, Any] = {}
    for name, value in parts.items():
        if _identifiable(name, value):
            out[name] = value
            continue
        items = value if isinstance(value, Mapping) else getattr(value, "__dict__", None)
        if not isinstance(items, Mapping):
            out[name] = f"<no stable value: {name}>"
            continue
        out[name] = (type(value), {
            key: item if _identifiable(f"{name}.{key}", item)
            else f"<no stable value: {name}.{key}>" for key, item in items.items()})
    return out


def _identifiable(name: str, value: Any) -> bool:
    try:
        digest({name: value})
    except Unidentifiable:
        return False
    return True


class Pristine:
    """What a fresh start is given, kept as it was, for in-process restarts (``restarts=``).

    A body that fails before its first checkpoint is restarted fresh, but the libraries
    work on the caller's objects in place (DEAP sets fitness values on the individuals,
    an optimizer counts its asks). With restarts, the first fresh start keeps a deep copy
    and each later one starts from a copy of it, as a new process would.
    """

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.enabled = bool(options.get("restarts", 0))
        self.saved: Any = None
        self.kept = False

    def fresh(self, value: Any) -> Any:
        if not self.enabled:
            return value
        if not self.kept:
            self.saved, self.kept = copy.deepcopy(value), True
            return value
        return copy.deepcopy(self.saved)


def adopt(target: Any, restored: Any) -> Any:
    """Make ``target`` (the caller's object) hold ``restored``'s attributes; return it.

    So the objects a caller passed in (a PyGAD instance, a callback, an optimizer) end up
    as an uninterrupted run leaves them, even when the run resumed from a checkpoint.
    """
    if target is restored:
        return target
    # cloudpickle rebuilds classes defined in __main__ by value: the restored object's
    # class is then a copy of the caller's (with copies of the globals its methods use);
    # the caller's class, with this process's globals, is the one to keep.
    same = type(target) is type(restored) or (
        type(target).__qualname__ == type(restored).__qualname__
        and type(target).__module__ == type(restored).__module__)
    if same and hasattr(target, "__dict__") and hasattr(restored, "__dict__"):
        vars(target).clear()
        vars(target).update(vars(restored))
        return target
    return restored


HELD_RNGS = "held_rngs"  # (the state's key for them)
ADDRESS = _rng.ADDRESS  # (an object's default repr names its address)
_HELD_DEPTH = 4  # toolbox -> mutate (a partial) -> its func (a method) -> its object -> rng
_HELD_NODES = 5000  # objects looked at, at most, per call
_HELD_ITEMS = 1000  # items of one container looked at, at most


class HeldRngs:
    """The RNG objects held by the live objects a run takes from its caller instead of
    from its checkpoint (a DEAP toolbox's registered operators, a pymoo problem, an
    objective): found once per call, their states saved with every checkpoint and
    restored in place on resume (review 99: a toolbox's
    ``mutate(rng=np.random.default_rng(7))`` and a problem's ``self.rng`` went on from
    their fresh states after a restart, and the result differed from the uninterrupted
    run's).

    ``attach(state)`` puts this object in the state dict: it pickles as the states of the
    RNGs at the moment the state is pickled, i.e. at the yield, whatever the snapshot
    path (a copy, a fork, a save in place). ``resume(state)`` puts a checkpoint's states
    back into the live RNGs, by the path each was found at.
    """

    def __init__(self, holders: Mapping[str, Any]) -> None:
        self.targets = _held_rngs(holders)

    def __reduce__(self) -> tuple[Any, ...]:
        return (SavedRngs, ({path: _rng._get(obj) for path, obj in self.targets},))

    def attach(self, state: Any) -> None:
        if self.targets and isinstance(state, dict):
            state[HELD_RNGS] = self

    def resume(self, state: Any) -> None:
        saved = state.get(HELD_RNGS) if isinstance(state, dict) else None
        if isinstance(saved, SavedRngs):
            for chosen, obj in self.targets:
                path = _rng.state_for(chosen, saved.states, self.targets) or chosen
                if path not in saved.states:
                    # (as the decorator warns: the call holds it elsewhere than when the
                    # checkpoint was saved, e.g. under a dict key spelled otherwise then)
                    if saved.states:
                        log.warning("the checkpoint has no state for the RNG %s (it has %s); "
                                    "it goes on from its state in this process, so the run "
                                    "may not be bit-identical", path,
                                    ", ".join(sorted(saved.states)))
                    continue
                try:
                    _rng._set(obj, saved.states[path])
                except Exception as err:  # (another kind of generator there now)
                    log.warning("could not restore the RNG %s in place (%s); it goes on "
                                "from its state in this process", path, err)
        self.attach(state)


class SavedRngs:
    """What a checkpoint holds of ``HeldRngs``: each RNG's state by its path."""

    def __init__(self, states: dict[str, Any]) -> None:
        self.states = states


def _held_rngs(holders: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(path, RNG) for the RNG objects reachable from ``holders`` within a few steps:
    attributes, items of lists, tuples and dicts, a ``functools.partial``'s function and
    arguments (a DEAP toolbox's operators), a bound method's object, and a function's
    closure and the module globals its code names (an operator that is a method, or
    draws from a generator it closes over or a script's global one). Not the
    global generators (the decorator captures those), not through modules or classes.
    Bounded: at most ``_HELD_NODES`` objects looked at, the first ``_HELD_ITEMS`` items of
    a container (review 102: a problem holding 400,000 floats took 17 s a call).

    An RNG is found at its least depth, under the least of the paths of that depth that
    lead to it, spelled (review 119: one generator under several dict keys, or in an
    object under several, was saved under the first in dict order, and a dict built in
    another order resumed without its state): every way into an object at the depth it
    was first met is kept, and the paths are made from them once the search is over."""
    atoms: tuple[type, ...] = (types.ModuleType, type, str, bytes, bytearray, int, float,
                               complex, bool, type(None), range, memoryview)
    np = _numpy.loaded()
    globals_ = {id(random._inst)}
    if np is not None:
        atoms += (np.ndarray, np.generic, np.dtype)
        globals_.add(id(np.random.mtrand._rand))
    found: list[tuple[str, Any]] = []
    # id of an object looked at -> (its depth, the ways into it at that depth: the id
    # of the object it was met in, None for a holder, and the step from there)
    ways: dict[int, tuple[int, dict[tuple[int | None, str], None]]] = {}
    dicts: dict[int, dict[Any, Any]] = {}  # the dicts their paths went through, by id
    todo: collections.deque[tuple[int | None, str, str, Any, int]] = collections.deque(
        (None, name, name, obj, 0) for name, obj in holders.items())
    looked = 0
    while todo and looked < _HELD_NODES:
        parent, step, path, obj, depth = todo.popleft()
        looked += 1
        known = ways.get(id(obj))
        if known is not None:  # (met again: another way in, at the same depth)
            if known[0] == depth:
                known[1][(parent, step)] = None
            continue
        # (queued up to the cap only: a table of lists queued a million paths, review 103)
        room = max(0, min(_HELD_ITEMS, _HELD_NODES - looked - len(todo)))
        try:
            if isinstance(obj, atoms):
                continue
            ways[id(obj)] = (depth, {(parent, step): None})
            children = _held_step(obj, path, depth, room, globals_, found, dicts)
        except Exception as err:  # (a proxy that raises on any look, review 103: the
            # search must never fail the call; such an object holds nothing found)
            log.debug("looking for RNGs: %s not followed: %s: %s", path,
                      type(err).__name__, err)
            continue
        todo.extend((id(obj), p[len(path):], p, v, depth + 1) for p, v in children[:room])
    if not found:
        return found
    return _least_paths(found, ways, dicts)


# Paths into one object made, at most: the least, unspelled (beyond it, a dict key's
# mark in a path sorts by the dict's address, and the choice may follow the process)
_HELD_WAYS = 1024  # (64 cut one generator's 100 operator keys by dict order: review 123)


def _least_paths(found: list[tuple[str, Any]],
                 ways: dict[int, tuple[int, dict[tuple[int | None, str], None]]],
                 dicts: dict[int, dict[Any, Any]]) -> list[tuple[str, Any]]:
    """Each RNG of ``found`` under the least of its paths of the depth it was found at,
    once spelled."""
    made: dict[int | None, list[str]] = {None: [""]}

    def paths(ident: int) -> list[str]:
        known = made.get(ident)
        if known is None:
            known = made[ident] = []  # (no way into an object leads through itself)
            out = sorted({before + step for parent, step in ways[ident][1]
                          for before in paths_of(parent)})
            known.extend(out[:_HELD_WAYS])
        return known

    def paths_of(parent: int | None) -> list[str]:
        return made[None] if parent is None else paths(parent)

    every = [(path, obj) for _, obj in found for path in paths(id(obj))]
    older: list[tuple[str, Any]] = []  # (paths as the version before spelled them)
    spelled = _spell_keys(every, dicts, older) if dicts else every
    least: dict[int, tuple[str, Any]] = {}
    for path, obj in spelled:
        # (a key spelled by its position follows the dict's order: never chosen over a
        # stable one, review 123, which swapped two generators)
        if id(obj) not in least or _path_rank(path) < _path_rank(least[id(obj)][0]):
            least[id(obj)] = (path, obj)
    out = _rng.Found(least[id(obj)] for _, obj in found)
    # (the other paths: a checkpoint of an older version holds the state under one)
    out.aliases = {}
    for path, obj in [*spelled, *older]:
        chosen = least[id(obj)][0]
        if path != chosen and path not in out.aliases.setdefault(chosen, []):
            out.aliases[chosen].append(path)
    return out


def _path_rank(path: str) -> tuple[bool, str]:
    return ("[#" in path, path)


# A dict key in a path while the search runs: its dict's id and its position, spelled
# (by _rng.key_texts) only in the paths of the RNGs found, once the search is over
_KEY = re.compile("\x00([0-9]+):([0-9]+)\x00")


def _spell_keys(found: list[tuple[str, Any]], dicts: dict[int, dict[Any, Any]],
                older: list[tuple[str, Any]] | None = None) -> list[tuple[str, Any]]:
    """The paths of ``found`` with their dict keys spelled as the decorator spells them:
    only the keys on those paths (review 117: spelling every key of a graph's dict, each
    node referring to the graph, took minutes)."""
    used: dict[int, set[int]] = collections.defaultdict(set)
    for path, _ in found:
        for mark in _KEY.finditer(path):
            if int(mark[1]) in dicts:  # (not an attribute named like a mark: review 118)
                used[int(mark[1])].add(int(mark[2]))
    spelled: dict[tuple[int, int], str] = {}
    before: dict[tuple[int, int], str] = {}  # keys the version before spelled otherwise
    for ident, positions in used.items():
        keys = list(itertools.islice(dicts[ident], max(positions) + 1))
        entries = [(i, keys[i]) for i in sorted(positions)]
        moved: dict[int, str] = {}
        for (i, _), text in zip(entries, _rng.key_texts(entries, moved), strict=True):
            spelled[(ident, i)] = text
        for n, text in moved.items():
            before[(ident, entries[n][0])] = text
    out = [(_KEY.sub(lambda m: spelled.get((int(m[1]), int(m[2])), m[0]), path), obj)
           for path, obj in found]
    if before and older is not None:  # (each path as that version spelled it: an alias)
        def old_text(m: re.Match[str]) -> str:
            at = (int(m[1]), int(m[2]))
            return before.get(at) or spelled.get(at, m[0])

        older.extend((_KEY.sub(old_text, path), obj) for path, obj in found
                     if any((int(m[1]), int(m[2])) in before for m in _KEY.finditer(path)))
    return out


def _held_step(obj: Any, path: str, depth: int, room: int, globals_: set[int],
               found: list[tuple[str, Any]],
               dicts: dict[int, dict[Any, Any]]) -> list[tuple[str, Any]]:
    """One object of the search, met for the first time: recorded if it is an RNG, else
    its children (at most ``room``)."""
    if _rng._kind(obj) is not None:
        if id(obj) not in globals_:
            found.append((path, obj))
        return []
    if depth == _HELD_DEPTH or room == 0:
        return []
    children: list[tuple[str, Any]] = []
    if isinstance(obj, functools.partial):
        children = [(f"{path}.func", obj.func)]
        children += [(f"{path}.args[{i}]", a) for i, a in enumerate(obj.args)]
        children += [(f"{path}.keywords[{k!r}]", v) for k, v in obj.keywords.items()]
    elif isinstance(obj, types.MethodType | types.BuiltinMethodType):
        owner = getattr(obj, "__self__", None)
        children = [] if owner is None else [(f"{path}.__self__", owner)]
    elif isinstance(obj, types.FunctionType):
        # What it draws from by name: its closure's cells, and the module globals its
        # code names (a script's `rng = np.random.default_rng(7)` used by an operator)
        cells = obj.__closure__ or ()
        children = [(f"{path}.<{name}>", cell.cell_contents)
                    for name, cell in zip(obj.__code__.co_freevars, cells, strict=False)
                    if _filled(cell)]
        namespace = obj.__globals__
        children += [(f"{path}.<global {name}>", namespace[name])
                     for name in obj.__code__.co_names if name in namespace]
    elif isinstance(obj, list | tuple):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj[:room])]
    elif isinstance(obj, dict):
        # (keys spelled as the decorator spells them, once the search is over: see
        # _spell_keys; reviews 103, 114, 116, 117)
        dicts[id(obj)] = obj
        children = [(f"{path}[\x00{id(obj)}:{i}\x00]", v)
                    for i, v in enumerate(itertools.islice(obj.values(), room))]
    else:  # (as the decorator finds an argument's: its __dict__ and __slots__)
        children = [(f"{path}.{k}", v) for k, v in _rng._attributes(obj)[:room]]
    return children


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - (an empty cell raises)
    except ValueError:
        return False
    return True
