"""Capture and restore RNG state: the global RNGs and the RNG objects a call holds.

Global: the ``random`` module and numpy's legacy global RandomState.

RNG objects (``random.Random``, numpy ``Generator``, ``RandomState``, ``BitGenerator``)
are found among the call's arguments by one rule, applied once per call:

- an argument that is an RNG object (``rng``);
- the items of a list or tuple argument and the values of a dict argument
  (``rngs[0]``, ``streams['mutation']``; a key whose repr names its address, which the
  resuming process's key does not have, goes by its position: ``streams[#2]``);
- the attributes of any other argument, from its ``__dict__`` and ``__slots__``
  (``self.rng`` of a decorated method); of a callable argument, what it draws from: a
  bound method's object (``rng.random``: ``draw.__self__``), a partial's arguments and
  its function's object (``partial(rng.normal, 0, 1)``: ``noise.func.__self__``), a
  function's closure cells and the RNGs among the globals its code names
  (``lambda: rng.random()``: ``draw.__closure__[0]``, or ``draw.__globals__['rng']``).

One level deep: ``self.ga.rng`` is not found (put it in the state, or pass it). Each is
saved under its path with every checkpoint and restored in place, in the same object,
on resume, at an in-process restart and from the fresh-start record.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import ctypes
import dis
import enum
import functools
import hashlib
import importlib
import itertools
import logging
import random
import re
import struct
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from typing import Any

from . import _numpy
from ._errors import ConfigurationError

log = logging.getLogger("resumable")

RngState = dict[str, Any]
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")  # (an object's default repr names its address)
Targets = list[tuple[str, Any]]  # (path, RNG object)


class Found(list):  # type: ignore[type-arg]
    """``find``'s targets, and for each chosen path the other paths its RNG was found
    under (``aliases``): a checkpoint saved by an older version may hold its state under
    one of those (review 119: before, the first path in dict order)."""

    aliases: dict[str, list[str]]


def state_for(path: str, saved: Mapping[str, Any], targets: Sequence[tuple[str, Any]]
              ) -> str | None:
    """Where ``saved`` holds the state of the RNG ``targets`` has under ``path``: there,
    else under another path it was found under (an older version's choice), else None."""
    if path in saved:
        return path
    aliases: dict[str, list[str]] = getattr(targets, "aliases", {})
    for other in aliases.get(path, ()):
        if other in saved:
            log.info("the RNG %s is restored from the state saved under %s, another path "
                     "to it (as an older version chose)", path, other)
            return other
    return None

_MT_WORDS = 624
_MT_BYTES = _MT_WORDS * 4  # MT19937's key; numpy's int pos follows it in the C struct
_gauss_offset: int | None = None  # where RandomState keeps (has_gauss, gauss); -1: unknown
_random_offset: int | None = None  # where random.Random keeps (index, key); -1: unknown
# ctypes views of the global generators' memory, made once per generator object; the
# object is kept with them, so its address cannot be another object's while they are used.
_random_reader: tuple[Any, Any] | None = None
_numpy_reader: tuple[Any, ...] | None = None


def _kind(obj: Any) -> str | None:
    if isinstance(obj, random.Random):
        return None if isinstance(obj, random.SystemRandom) else "random.Random"
    np = _numpy.loaded()
    if np is None:
        return None
    if isinstance(obj, np.random.Generator):
        return "numpy.Generator"
    if isinstance(obj, np.random.RandomState):
        return "numpy.RandomState"
    if isinstance(obj, np.random.BitGenerator):
        return "numpy.BitGenerator"
    return None


def _attributes(obj: Any) -> list[tuple[str, Any]]:
    if isinstance(obj, (types.ModuleType, type, types.FunctionType)):
        return []
    found: list[tuple[str, Any]] = []
    with contextlib.suppress(TypeError):  # no __dict__
        found.extend(vars(obj).items())
    found.extend(slot_items(obj))
    return found


def _globals_read(code: types.CodeType) -> set[str]:
    """The global names ``code`` (and the code nested in it) loads: not ``co_names``,
    which holds attribute names too (review 145: ``ind.rng.random()`` took the script's
    global ``rng`` for one the function draws from)."""
    names: set[str] = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            names.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _globals_read(const)
    return names


def _is_rng_type(cls: type) -> bool:
    """``_kind`` by the type alone: nothing of the object is read (a lazily imported
    module loads at its first attribute, review 145: ImportError at the call)."""
    if issubclass(cls, random.Random):
        return not issubclass(cls, random.SystemRandom)
    np = _numpy.loaded()
    r = np.random if np is not None else None
    return r is not None and issubclass(cls, (r.Generator, r.RandomState, r.BitGenerator))


def _is_seed_sequence(obj: Any) -> bool:
    np = _numpy.loaded()
    return np is not None and isinstance(obj, np.random.SeedSequence)


def _is_seed_sequence_type(cls: type) -> bool:
    np = _numpy.loaded()
    return np is not None and issubclass(cls, np.random.SeedSequence)


def _drawn_from(obj: Any) -> list[tuple[str, Any]]:
    return [(path, v) for path, v in _parts_of(obj) if _is_rng_type(type(v))
            or _is_seed_sequence_type(type(v))]  # (by type: nothing of the rest is read)


def _parts_of(obj: Any) -> list[tuple[str, Any]]:
    """What a callable without attributes of its own draws from, by path: a bound method's
    object, a partial's arguments and its function's object, a function's closure cells
    (review 142: ``rng.random`` passed as an argument was part of the run id, by its
    state, but never saved: a resumed run drew other numbers, without a word)."""
    if isinstance(obj, functools.partial):
        found = [(f"args[{i}]", a) for i, a in enumerate(obj.args)]
        found += [(f"keywords[{k!r}]", v) for k, v in sorted(obj.keywords.items())]
        owner = getattr(obj.func, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            found.append(("func.__self__", owner))
        return found
    if isinstance(obj, types.FunctionType):
        found = []
        for i, cell in enumerate(obj.__closure__ or ()):
            with contextlib.suppress(ValueError):  # (an empty cell)
                found.append((f"__closure__[{i}]", cell.cell_contents))
        space = obj.__globals__
        found += [(f"__globals__[{g!r}]", space[g]) for g in sorted(_globals_read(obj.__code__))
                  if g in space and _is_rng_type(type(space[g]))]  # (a script's rng)
        return found
    owner = getattr(obj, "__self__", None)
    if (isinstance(obj, (types.MethodType, types.BuiltinMethodType))
            and owner is not None and not isinstance(owner, types.ModuleType)):
        return [("__self__", owner)]
    return []


def slot_items(obj: Any, names: Sequence[str] | None = None) -> list[tuple[str, Any]]:
    """The slots ``obj`` has set, by name (as pickle finds them); ``names``: its class's
    ``slot_names``, if known."""
    found: list[tuple[str, Any]] = []
    for name in slot_names(type(obj)) if names is None else names:
        try:
            found.append((name, getattr(obj, name)))
        except AttributeError:  # an unset slot
            continue
    return found


def slot_names(cls: type) -> list[str]:
    """The names of a class's slots, private ones mangled (review 113: ``__rng``)."""
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__"):
                if name.startswith("__") and not name.endswith("__"):
                    name = f"_{klass.__name__.lstrip('_')}{name}"
                names.append(name)
    return names


def find(arguments: Mapping[str, Any]) -> Targets:
    """The RNG objects of a call, by the rule in the module docstring, each once: under
    the least of the paths it is found under (review 119: one generator under several
    dict keys was saved under the first in dict order, and a dict built in another
    order, from a set, resumed without its state). Paths are ordered by argument, then
    by position in a list or tuple, by spelled key in a dict, by name among attributes:
    never by a dict's or ``__dict__``'s order."""
    chosen: dict[int, tuple[tuple[Any, ...], str, Any]] = {}  # id -> (rank, path, RNG)
    others: dict[int, list[tuple[tuple[Any, ...], str]]] = {}  # id -> the paths not chosen

    sequences: list[str] = []  # paths of bare SeedSequences (warned about)

    def add(rank: tuple[Any, ...], path: str, obj: Any) -> None:
        if _is_seed_sequence(obj):
            sequences.append(path)
        if _kind(obj) is not None:
            known = chosen.get(id(obj))
            if known is None or rank < known[0]:
                chosen[id(obj)] = (rank, path, obj)
                if known is not None:
                    others.setdefault(id(obj), []).append(known[:2])
            else:
                others.setdefault(id(obj), []).append((rank, path))

    for n, (name, value) in enumerate(arguments.items()):
        if _kind(value) is not None or _is_seed_sequence(value):
            add((n,), name, value)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                add((n, i), f"{name}[{i}]", item)
        elif isinstance(value, dict):
            held = [(i, key, item) for i, (key, item) in enumerate(value.items())
                    if _kind(item) is not None]
            if held:
                older: dict[int, str] = {}
                texts = key_texts([(i, key) for i, key, _ in held], older)
                for text, (_, _, item) in zip(texts, held, strict=True):
                    # (a key spelled by its position follows the dict's order: never
                    # chosen over a stable one, review 123, which swapped two generators)
                    add((n, text.startswith("#"), text), f"{name}[{text}]", item)
                for m, text in older.items():  # (the version before's spelling: an alias)
                    others.setdefault(id(held[m][2]), []).append(
                        ((n, True, text), f"{name}[{text}]"))
        else:
            for attr, item in _attributes(value) or _drawn_from(value):
                # (a __dict__ may hold a key that is not a str: review 123, TypeError)
                rank = attr if isinstance(attr, str) else f"\uffff{attr!r}"
                add((n, rank), f"{name}.{attr}", item)
    if sequences:
        log.warning(
            "%s %s a numpy SeedSequence: the children it spawns are not counted in the "
            "checkpoints (a Generator's are), so a resumed run spawns the same ones again "
            "and is not bit-identical. Spawn from a Generator made on it "
            "(np.random.default_rng(seq).spawn(n)), or keep the sequence in the state",
            ", ".join(sorted(sequences)), "is" if len(sequences) == 1 else "are")
    # (in the order of their ranks: a dict's order leaves the list as it is, too)
    out = Found((path, obj) for _, path, obj in sorted(chosen.values(), key=lambda c: c[0]))
    out.aliases = {chosen[k][1]: [p for _, p in sorted(v)] for k, v in others.items()
                   if k in chosen}
    return out


def key_texts(entries: Sequence[tuple[int, Any]],
              older: dict[int, str] | None = None) -> list[str]:
    """How paths spell the keys of the dict entries under which RNGs were found, given as
    (position in the dict, key): only those, so that a dict of many keys holding no RNG
    costs nothing (review 117: a graph's nodes as keys, each referring to the graph).

    A key whose repr is the same in every process and no other's here (str, numbers,
    None, bytes, enum members, tuples of these) is spelled by it, ``streams['mutation']``.
    Any other (review 114: two operators printed ``Op(mutate)``; review 117: a frozenset
    of str prints in hash order; an object prints its address) by its value: ``~`` and
    a digest of its run-id encoding (version 5, for good: a later encoding must not move
    the paths). That does not depend on the dict's order, as the run id does not (review
    116: by position, a dict built in another order had its generators' states swapped).
    A key without a stable value, of the same value as another, or too large to encode
    (over ``KEY_BUDGET`` containers), goes by its position, ``#2``.

    ``older``, if given, gets the spelling the version before gave keys it spelled
    otherwise (a numpy scalar, or a tuple holding one, went by value), by index into
    ``entries``: a checkpoint of that version holds their RNGs' states under it."""
    spelled = [_spelling(key) for _, key in entries]
    counts = collections.Counter(spelled)
    by_value = [n for n, text in enumerate(spelled)
                if text is None or counts[text] > 1 or ADDRESS.search(text)]
    texts = [text or "" for text in spelled]
    moved = [n for n, (_, key) in enumerate(entries) if n not in by_value and _numpy_in(key)] \
        if older is not None else []
    if not by_value and not moved:
        return texts
    from ._runid import encode_within  # (it imports this module)

    digests: dict[int, str | None] = {}
    for n in [*by_value, *moved]:
        position, key = entries[n]
        try:
            encoded = encode_within(key, f"key #{position}", KEY_ENCODING, KEY_BUDGET)
        except Exception:  # (no stable value: a lock, a socket; or over the budget)
            digests[n] = None
        else:
            digests[n] = "~" + hashlib.sha256(encoded).hexdigest()[:16]
    alike = collections.Counter(digests.values())
    for n, digest in digests.items():
        text = digest if digest is not None and alike[digest] == 1 else f"#{entries[n][0]}"
        if n in moved:
            assert older is not None
            older[n] = text
        else:
            texts[n] = text
    return texts


def _numpy_in(key: Any) -> bool:
    """A numpy scalar, or a tuple holding one: what the version before spelled by value."""
    if type(key) is tuple:
        return any(_numpy_in(item) for item in key)
    return type(key).__module__ == "numpy"


def _spelling(key: Any) -> str | None:
    """A key as a path spells it when that is the same in every process: an enum member
    by its class and name (review 118: its repr holds its value's, a frozenset's in hash
    order), its module as run ids name it (review 119: a script's class is
    ``__mp_main__``'s in a spawn worker), a str, number, None, bytes or tuple of these by
    its repr; else None."""
    if isinstance(key, enum.Enum):
        from ._runid import _mod  # (it imports this module)

        cls = type(key)
        return None if key.name is None else (
            f"<{_mod(cls.__module__)}.{cls.__qualname__}.{key.name}>")
    return _repr(key)


_PLAIN = (str, int, float, bool, bytes, complex, type(None))
_NAN_BITS = struct.pack(">d", float("nan"))


def _repr(key: Any) -> str | None:
    """``key``'s repr where that is the same in every process (not a set's hash order):
    a str, number (an int below 10**4300; a NaN of other bits than float("nan") by
    them), None or bytes, a tuple of these; a numpy scalar that run ids take as the
    Python value it derives from (np.float64, np.str_, np.bytes_, np.complex128) as that
    value (review 119: a run keyed by ``np.linspace``'s floats and resumed with their
    ``.tolist()``, one run id, found no state); else None."""
    cls = type(key)
    if cls is int:
        # (its digits below 10**4300, whatever the process's int_max_str_digits; by value
        # from there, as run ids write it in hex: reviews 118, 119)
        from ._runid import int_decimal  # (it imports this module)

        return int_decimal(key)
    if cls is float and key != key:
        # (a NaN of other bits than float("nan") is another run: spelled by them, review
        # 119; repr says nan for every one)
        bits = struct.pack(">d", key)
        return "nan" if bits == _NAN_BITS else f"nan:{bits.hex()}"
    if cls is complex and any(part != part and struct.pack(">d", part) != _NAN_BITS
                              for part in (key.real, key.imag)):
        return None  # (by value: its bits)
    if cls in _PLAIN:
        return repr(key)
    if cls is tuple:
        parts = []
        for item in key:
            part = _repr(item)
            if part is None:
                return None
            parts.append(part)
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    from ._runid import _ATOMS, _atom_base  # (it imports this module)

    if isinstance(key, _ATOMS) and cls.__module__ == "numpy":  # (as _runid's _plain_atom)
        return _repr(_atom_base(cls)(key))
    return None


KEY_BUDGET = 10_000  # containers one key's encoding may meet, else it goes by position
KEY_ENCODING = 5  # the run-id encoding that spells dict keys by value (see key_texts)


# -- RNG arguments that the state holds too ----------------------------------------------
#
# ``state = {"rng": rng}``: one generator under two names. Pickled as any object, the
# state's would come back a copy, while the argument is restored in place: two
# generators drawing the same numbers after a resume (review 106). While a run pickles
# or loads its state (``aliasing``), such an RNG is pickled as a reference to its path
# among the call's RNG objects with its own reduction beside it; loaded, it is that
# object of the loading call, set to the saved state (or, with no such object there, a
# copy, as before).


class _Aliases(threading.local):
    def __init__(self) -> None:
        self.by_id: dict[int, tuple[str, Any]] | None = None  # id -> (path, object)
        self.by_path: dict[str, Any] = {}
        # Copies of SeedSequences made to set a count back (see _spawn_up_to), by the id
        # of the sequence copied (kept, so the id stays its): from the state's load to the
        # restore of the RNG objects that follows it, on this thread (review 112)
        self.sequences: dict[int, tuple[Any, Any]] = {}


_aliases = _Aliases()


@contextlib.contextmanager
def aliasing(targets: Sequence[tuple[str, Any]]) -> Any:
    """While pickling or loading a run's state or result on this thread: the call's RNG
    objects."""
    before = (_aliases.by_id, _aliases.by_path)
    _aliases.sequences = {}  # (a new load: the copies of the last one are done with)
    shared = list(targets)
    for path, obj in targets:  # (a Generator's or RandomState's bit generator, which
        # the state may hold on its own or under a second Generator: reviews 108, 109)
        kind = _kind(obj)
        if kind == "numpy.Generator":
            shared.append((f"{path}.bit_generator", obj.bit_generator))
        elif kind == "numpy.RandomState":
            shared.append((f"{path}._bit_generator", obj._bit_generator))
    _aliases.by_id = {id(obj): (path, obj) for path, obj in shared}
    # (a state an older version saved names the RNG by the path it chose: another one)
    aliases: dict[str, list[str]] = getattr(targets, "aliases", {})
    older = []
    if aliases:  # (one lookup per path: review 123, a product of the two was quadratic)
        for path, obj in shared:
            for suffix in ("", ".bit_generator", "._bit_generator"):
                if path.endswith(suffix):
                    base = path[:len(path) - len(suffix)]
                    older += [(f"{alias}{suffix}", obj) for alias in aliases.get(base, ())]
    _aliases.by_path = {**dict(older), **dict(shared)}
    try:
        yield
    finally:
        _aliases.by_id, _aliases.by_path = before


def aliasing_active() -> bool:
    return bool(_aliases.by_id)


def reduce_rng(obj: Any) -> Any:
    """A dispatch_table entry for the RNG classes: the call's own RNG objects by path."""
    by_id = _aliases.by_id
    reduced = obj.__reduce_ex__(5)
    if by_id:
        found = by_id.get(id(obj))
        if found is not None and found[1] is obj:
            return _aliased, (found[0], reduced)
    return reduced


def rng_classes() -> list[type]:
    """The exact classes ``reduce_rng`` is registered for (subclasses are pickled as
    they say)."""
    classes: list[type] = [random.Random]
    np = _numpy.loaded()
    if np is not None:
        r = np.random
        classes += [r.Generator, r.RandomState, r.PCG64, r.PCG64DXSM, r.MT19937, r.Philox,
                    r.SFC64]
    return classes


def _aliased(path: str, reduced: Any) -> Any:
    """Unpickling: the loading call's RNG object at ``path``, at the saved state."""
    func, args, *rest = reduced
    fresh = func(*args)
    state = rest[0] if rest else None
    if state is not None:
        setstate = getattr(fresh, "__setstate__", None)
        if setstate is not None:
            setstate(state)
        else:
            vars(fresh).update(state)
    live = _aliases.by_path.get(path)
    if live is None or type(live) is not type(fresh):
        return fresh
    try:
        _set(live, _get(fresh))
    except (TypeError, ValueError, KeyError) as err:
        # (a Generator on another kind of bit generator now, under ignore=: the state
        # keeps its own, as restore() says for the argument; review 109)
        log.warning("the state's RNG at %s cannot be the call's %s again (%s): it goes on "
                    "as a copy of its own, so the run may not be bit-identical", path, path,
                    err)
        return fresh
    _spawn_up_to(live, _spawned(fresh), path)
    return live


def _bit_generator_of(obj: Any) -> Any:
    """A numpy Generator's or RandomState's bit generator; a bit generator itself."""
    return getattr(obj, "bit_generator", None) or getattr(obj, "_bit_generator", None) or obj


def _seed_sequence(obj: Any) -> Any:
    """The SeedSequence a numpy RNG object spawns its children from (None: another)."""
    if isinstance(obj, random.Random):
        return None
    seq = getattr(_bit_generator_of(obj), "_seed_seq", None)
    return seq if hasattr(seq, "n_children_spawned") and hasattr(seq, "spawn") else None


def _spawned(obj: Any) -> int | None:
    """How many children ``obj.spawn()`` handed out: its SeedSequence's count, which its
    state does not hold (review 108: a resumed run spawned the same children again)."""
    seq = _seed_sequence(obj)
    return None if seq is None else int(seq.n_children_spawned)


def _spawn_up_to(obj: Any, count: int | None, path: str) -> None:
    """Set ``obj``'s SeedSequence to ``count`` children spawned. The count is read-only.
    Up (a resume in a new process): spawning the difference on the sequence itself (and
    dropping the children), so a program that holds the same sequence
    (``default_rng(ss)``) and a subclass keep theirs (review 110). Down (the same object
    at an in-process restart, which goes back to the checkpoint): nothing lowers it, so
    the bit generator gets a copy of its sequence at that count (numpy's own pickling:
    __setstate__ takes the state with a sequence), made from the sequence's reduction
    (a subclass keeps its class and attributes), one copy per sequence among the RNGs
    of the state's load and the restore that follows it (two generators on one sequence
    still share it; reviews 111, 112). A program holding the old sequence itself keeps
    its count: warned."""
    seq = _seed_sequence(obj)
    if count is None or seq is None or count == int(seq.n_children_spawned):
        return
    missing = count - int(seq.n_children_spawned)
    if missing > 0:
        seq.spawn(missing)
        return
    bitgen = _bit_generator_of(obj)
    replaced = _aliases.sequences
    try:
        made = replaced.get(id(seq))
        if made is not None and made[0] is seq and int(made[1].n_children_spawned) == count:
            again = made[1]
        else:
            again = _sequence_at(seq, count)
            replaced[id(seq)] = (seq, again)
            log.warning(
                "the RNG %s spawned children since the checkpoint it is set back to (an "
                "in-process restart, or a completed run called again): its SeedSequence "
                "is now a copy at the checkpoint's count (%d); anything else that holds "
                "the old sequence and spawns from it keeps its own count", path, count)
        bitgen.__setstate__((bitgen.state, again))
        if int(_seed_sequence(obj).n_children_spawned) == count:
            return
    except Exception:  # (another numpy, a subclass that cannot be rebuilt so)
        pass
    log.warning("the RNG %s has spawned %d children, more than the %d it had when the "
                "state was saved; its next children are not those of the run, which may "
                "not be bit-identical", path, count - missing, count)


def _sequence_at(seq: Any, count: int) -> Any:
    """A copy of the SeedSequence ``seq`` at ``count`` children spawned: of its class,
    made by numpy's SeedSequence.__init__ (not a subclass's, which may take other
    arguments), with a subclass's attributes."""
    np: Any = _numpy.loaded()
    base = np.random.SeedSequence
    kind: Any = type(seq)
    copy = kind.__new__(kind)
    base.__init__(copy, entropy=seq.entropy, spawn_key=seq.spawn_key,
                  pool_size=seq.pool_size, n_children_spawned=count)
    for name, value in _attributes(seq):  # (its __dict__ and __slots__: review 112)
        object.__setattr__(copy, name, value)  # (not a subclass's own __setattr__, which
        # may refuse: a frozen one, review 113)
    return copy


def _get(obj: Any) -> Any:
    if isinstance(obj, random.Random):
        return obj.getstate()
    if _kind(obj) == "numpy.Generator":
        return obj.bit_generator.state
    if _kind(obj) == "numpy.RandomState":
        return obj.get_state(legacy=False)
    return obj.state


def _set(obj: Any, state: Any) -> None:
    if isinstance(obj, random.Random):
        obj.setstate(state)
    elif _kind(obj) == "numpy.Generator":
        obj.bit_generator.state = state
    elif _kind(obj) == "numpy.RandomState":
        # (set_state writes the cached normal before it refuses another bit generator's
        # state: refused first, so that a refusal leaves the RNG as it was, review 110)
        saved = state.get("bit_generator") if isinstance(state, dict) else None
        ours = obj._bit_generator.state.get("bit_generator")
        if saved is not None and saved != ours:
            raise ValueError(f"state must be for a {ours} PRNG, not {saved}")
        obj.set_state(state)
    else:
        obj.state = state


def _put_back_random(before: Any) -> None:
    """``random``'s state as it was before a restore that is refused (best effort)."""
    try:
        random.setstate(before)
    except Exception as err:  # (its own getstate(): only a program's odd Random refuses)
        log.warning("could not put random's state back after a refused restore: %s", err)


def capture(targets: Sequence[tuple[str, Any]] = ()) -> RngState:
    state: RngState = {"random": _random_state()}
    np = _numpy.loaded()
    if np is not None:
        state["numpy"] = _numpy_state(np)
    if targets:
        state["objects"] = {path: (_kind(obj), _get(obj)) for path, obj in targets}
        # (a key of its own: older versions read "objects" as pairs, and ignore this)
        spawned = {path: n for path, obj in targets if (n := _spawned(obj)) is not None}
        if spawned:
            state["spawned"] = spawned
    return state


def restore(state: RngState, targets: Sequence[tuple[str, Any]] = ()) -> None:
    # ``random``'s state is checked first (on a Random of its own): one that cannot be set
    # is refused before numpy's generator is changed (review 49). numpy's is set before
    # ``random``'s: restoring it may make bit generators, whose __init__ (a program's
    # subclass) may draw from ``random`` (review 48: the resumed stream was one draw on).
    random_saved: Any = None
    random_before: Any = None  # random's own state, put back if anything is refused
    if "random" in state:
        random_saved, tried = _random_saved(state["random"])
        if not tried:  # (no trial: set first, so that a refusal leaves numpy's as it was)
            random_before = random.getstate()
            try:
                random.setstate(random_saved)
            except Exception as err:
                # (Random.setstate writes gauss_next before the C part refuses: review 54)
                _put_back_random(random_before)
                raise _random_refused(err) from err
    if "numpy" in state:
        import numpy as np

        saved = state["numpy"]
        try:
            if isinstance(saved, tuple) and saved and saved[0] == "MT19937-raw":
                try:
                    _, raw, pos, has_gauss, gauss = saved
                    saved = ("MT19937", np.frombuffer(raw, dtype="<u4"), pos, has_gauss, gauss)
                except Exception as err:  # (damaged: not the 5 items, not bytes, cut short)
                    raise _refused("MT19937", err) from err
            _restore_numpy(np, saved)
        except BaseException:
            if random_before is not None:  # the RNGs are left as they were (review 54)
                _put_back_random(random_before)
            raise
    if random_saved is not None:
        random.setstate(random_saved)
    objects = state.get("objects") or {}
    for chosen, obj in targets:
        path = state_for(chosen, objects, targets) or chosen
        if path not in objects:
            # Not there when the state was saved: older code saved none (left as it is,
            # quietly), or the call held its RNGs elsewhere then (an address-keyed path, before).
            if objects:
                log.warning("the checkpoint has no state for the RNG %s (it has %s); it "
                            "continues from its current state, so the run may not be "
                            "bit-identical", path, ", ".join(sorted(objects)))
            continue
        kind, value = objects[path]
        try:
            if kind != _kind(obj):
                raise TypeError(f"saved from a {kind}, now a {_kind(obj)}")
            _set(obj, value)
            _spawn_up_to(obj, (state.get("spawned") or {}).get(path), path)
        except (TypeError, ValueError, KeyError) as err:
            log.warning("could not restore the RNG %s in place (%s); it continues from its "
                        "current state, so the run may not be bit-identical", path, err)


# Bit generators the global RandomState was switched away from (see _restore_numpy), kept
# alive for threads that may still draw through them. A switch happens only when a restore
# finds another kind in place (a resume, a restart, a completed run called again): a
# process makes a handful; the bound is for a loop that alternates kinds.
_replaced: collections.deque[Any] = collections.deque(maxlen=4096)


def _restore_numpy(np: Any, saved: Any) -> None:
    """Set numpy's global RandomState to ``saved``, on the kind of bit generator it is from.

    A body may switch it (``np.random.set_bit_generator(PCG64(seed))`` at its fresh
    start); a new process starts on MT19937, and a restart may go back to before the
    switch: set_state of the other kind's state fails (review 39). The object re-made is
    the one ``np.random.set_state`` restores (not ``mtrand._rand``, which a program may
    have replaced with its own, review 40), under its generator's lock (another thread
    drawing meanwhile used the freed generator: a segfault, review 42). A state that
    cannot be set is a ConfigurationError, and the generator is left as it was.
    """
    kind = saved[0] if isinstance(saved, (tuple, list)) and saved else (
        saved.get("bit_generator") if isinstance(saved, dict) else None)
    if isinstance(saved, dict) and "state" not in saved:
        # (randomgen's: numpy's RandomState.set_state takes only states with a "state")
        raise ConfigurationError(
            f"numpy's global RNG was saved on the bit generator {kind!r}, whose state numpy's "
            "RandomState.set_state cannot take back (it has no 'state' entry), so the run "
            "cannot resume with it: draw from a Generator of that bit generator kept in the "
            "state (or passed as an argument) instead of numpy's global RNG")
    # Two runs resuming in two threads, one saved on each kind: another thread's switch
    # may come between this one's decision and its set_state, which then refuses a sound
    # state (review 44). That is seen, and decided again. No lock is held across the
    # decision: one there stood in a cycle with numpy's own lock (a thread holding it
    # while restoring, review 45; a switch in the middle, review 46), and a fork in the
    # middle left it held in the child.
    for _ in range(_RETRIES):
        if _restore_numpy_once(np, saved, kind):
            return
    raise ConfigurationError(
        f"numpy's global RNG could not be restored to the state saved with the checkpoint "
        f"(bit generator {kind!r}): other threads switched its bit generator {_RETRIES} "
        "times while this restore ran; do not switch numpy's global RNG (or resume runs) "
        "in other threads during a resume, or keep a Generator in the state")


def _restore_numpy_once(np: Any, saved: Any, kind: Any) -> bool:
    """Whether it is done; False when another restore (another thread's, or a signal
    handler's inside this one) switched the generator between the decision and
    set_state, which then refused."""
    seen = _changes[0]  # (before anything is read: a change after it is seen below)
    rs: Any = getattr(np.random.get_state, "__self__", None)
    previous: Any = getattr(rs, "_bit_generator", None)
    fields = (set(saved["state"]) if isinstance(saved, dict)
              and isinstance(saved.get("state"), dict) else None)
    switched = (isinstance(kind, str) and type(rs) is np.random.RandomState
                and previous is not None and (
                    kind not in _names(type(previous))
                    # (the same name, another kind: two subclasses named alike)
                    or (fields is not None and not _has_fields(previous, fields))))
    if switched:
        candidates = _bit_generator_classes(np, str(kind))
        if fields is not None:
            # Subclasses of two kinds may share a name (numpy's states record only the
            # class name): the one whose state has the saved state's fields comes first.
            candidates.sort(key=lambda cls: not _has_fields(cls, fields))
        if not candidates:
            raise ConfigurationError(
                f"numpy's global RNG was saved on the bit generator {kind!r}, which this "
                "process cannot make: import the module that defines it before the run "
                "resumes (numpy finds bit generators by name), or keep the generator in "
                "the state, not global")
        try:
            made = candidates[0]()
        except Exception as err:
            raise ConfigurationError(
                f"numpy's global RNG was saved on the bit generator {kind!r}, and "
                f"{candidates[0]!r}() cannot be made to restore it: {type(err).__name__}: "
                f"{err}. Give that class's __init__ defaults for all its arguments, or "
                "keep a Generator of it in the state instead of numpy's global RNG, or "
                "resume with capture_rng=False (not bit for bit)") from err
    # The state tried first on a RandomState of its own, of the kind it will be set on: a
    # state numpy refuses is refused there, before anything is changed. numpy's set_state
    # writes the cached normal before the generator refuses the rest (review 44), so a
    # refusal on the global one damaged it, and a put-back could undo another thread's
    # restore done meanwhile (review 47).
    trial: Any = made if switched else (
        _trial(np, previous) if type(rs) is np.random.RandomState
        and previous is not None else None)
    # (a trial on the numpy class a subclass derives from checks less than the subclass:
    # its name, anything of its own; what it passes may still be refused, review 52)
    exact = trial is not None and (switched or type(trial) is type(previous))
    if trial is not None:
        try:
            np.random.RandomState(trial).set_state(
                {**saved, "bit_generator": type(trial).__name__}
                if not exact and isinstance(saved, dict) and kind == type(previous).__name__
                else saved)  # (the numpy class checks its own name: the subclass's is right)
        except Exception as err:
            raise _refused(kind, err) from err
    # Without an exact trial, what to put back if the state is refused: the generator's
    # own state and the normal it has cached. Read from memory, not with get_state, which
    # takes the lock.
    before = ({**previous.state, **_cached_normal(np, rs)} if not exact
              and type(rs) is np.random.RandomState and previous is not None else None)
    if switched:
        _switch(rs, made, kind)
    last = _change()  # (before set_state: a refusal it causes elsewhere is seen there)
    try:
        np.random.set_state(saved)
    except Exception as err:  # (ValueError, KeyError, OverflowError, IndexError...)
        # Refused because of another restore (another thread's, or a signal handler's
        # inside this one) that changed the generator since this one looked: decided
        # again, with nothing put back (that would undo the other's, review 47). Only a
        # refusal with no change but this one's own is the saved state's fault.
        if exact:
            return False  # (the state was taken on its own: the generator changed)
        # Numbers only grow: this restore's own (its switch's, then this one) directly
        # after ``seen`` and none since mean no other change. (A program's own
        # set_bit_generator is not numbered: the generator in place.)
        if (last != seen + 1 + switched or _changes[0] != last
                or getattr(rs, "_bit_generator", None) is not (made if switched else previous)):
            return False
        with contextlib.suppress(Exception):  # (changed meanwhile after all: left so)
            if switched:
                _switch(rs, previous, kind)
            if before is not None:
                _change()
                rs.set_state(before)  # as it was, with its cached normal (reviews 43, 44)
        raise _refused(kind, err) from err
    return True


def _random_saved(saved: Any) -> tuple[Any, bool]:
    """``random``'s saved state as random.setstate takes it, and whether it was tried on
    a Random of its own (a copy of the instance in place: a program's own subclass may
    have a state of its own, review 52); a ConfigurationError if it cannot be set. One
    that cannot be copied (its __init__ needs arguments) gets no trial: the caller sets
    the state on it before numpy's (review 53), and again after."""
    inst: Any = getattr(random.setstate, "__self__", None)
    try:
        if isinstance(saved, tuple) and saved and saved[0] == "MT19937-raw":
            _, raw, gauss_next = saved
            saved = (3, _random_internal(raw), gauss_next)
        if inst is None or type(inst) is random.Random:
            trial: Any = random.Random()
        else:
            try:
                trial = copy.deepcopy(inst)
            except Exception:
                return saved, False
            if trial is inst:
                return saved, False
        trial.setstate(saved)
    except Exception as err:
        raise _random_refused(err) from err
    return saved, True


def _random_refused(err: Exception) -> ConfigurationError:
    return ConfigurationError(
        "the random module's state saved with the checkpoint cannot be restored: "
        f"{type(err).__name__}: {err}{_DAMAGED_RNG}")


_DAMAGED_RNG = ("; the RNGs were left as they were. If the checkpoint's RNG record is "
                "damaged, `capture_rng=False` resumes without it (not bit for bit), or "
                "start the run over")


def _trial(np: Any, previous: Any) -> Any:
    """A bit generator of the kind in place to try a saved state on; None if there is no
    sound one (the put-back path).

    A copy keeps the options the generator was made with (randomgen's Philox(number=2)
    refuses a state of another number, review 48). A program's subclass that cannot be
    copied (its __init__ needs arguments) is tried on the numpy class it derives from,
    made with defaults, when it checks states as that class does (it does not define
    ``state``): without a trial, a refused set_state on the global generator wrote part
    of the state, and another thread's restore in between was damaged (review 49). A
    __deepcopy__ that returns the generator itself, or shares its memory, gives no trial:
    one there would write into the global generator.
    """
    try:
        trial = copy.deepcopy(previous)
        if (trial is not previous and type(trial) is type(previous)
                and trial.ctypes.state_address != previous.ctypes.state_address):
            return trial
    except Exception:
        pass
    for cls in type(previous).__mro__:
        if cls.__module__.startswith("numpy.random"):
            try:
                return cls() if cls is not np.random.BitGenerator else None
            except Exception:
                return None
        if "state" in vars(cls):
            return None  # (a subclass's own state: numpy's class would check another)
    return None


def _refused(kind: Any, err: Exception) -> ConfigurationError:
    return ConfigurationError(
        f"numpy's global RNG cannot be restored to the state saved with the checkpoint "
        f"(bit generator {kind!r}): {type(err).__name__}: {err}{_DAMAGED_RNG}")


def _cached_normal(np: Any, rs: Any) -> dict[str, Any]:
    """RandomState's cached normal (``has_gauss``, ``gauss``), read from its memory where
    the probe found it (as ``_numpy_state`` does); none if the layout is not known."""
    offset = _gauss_offset if _gauss_offset is not None else _probe(np)
    if offset < 0:
        return {"has_gauss": 0, "gauss": 0.0}
    has_gauss, gauss = struct.unpack("i4xd", ctypes.string_at(id(rs) + offset, 16))
    return {"has_gauss": has_gauss, "gauss": gauss}


def _switch(rs: Any, generator: Any, kind: Any) -> None:
    """Re-make the global RandomState on ``generator``, under its current generator's lock,
    which a thread drawing from np.random holds for its draw. The replaced generator is
    kept alive: a thread that took the lock of an older one may still read its memory
    (freed, that was a segfault, review 42). numpy < 2 has a plain Lock there: a thread
    that holds it (numpy's "extending" pattern) and restores would wait for itself, so
    the wait is bounded (review 43)."""
    while True:
        current = rs._bit_generator
        lock = current.lock  # (the one taken is the one let go of: a property may make
        # a new one at each read, review 46)
        if isinstance(lock, _RLOCK):
            # numpy >= 2: this thread may hold it; a draw in another thread is waited
            # for, as set_state waits for it (a bound made that a fatal error, review 44)
            lock.acquire()
        elif not lock.acquire(timeout=_SWITCH_WAIT):
            raise ConfigurationError(
                f"numpy's global RNG could not be switched to the bit generator {kind!r} "
                f"the checkpoint was saved on: its lock was held for {_SWITCH_WAIT:.0f} s "
                "(numpy < 2 has a plain lock there, which the thread holding it cannot "
                "take again: restore outside `with np.random.get_bit_generator().lock`)")
        try:
            if rs._bit_generator is not current:
                continue  # (switched while this one waited: the lock of the one in place)
            # (read again: a signal handler's restore may have switched it meanwhile)
            _replaced.append(rs._bit_generator)
            _change()  # (before the switch: a refusal it causes is seen)
            rs.__init__(generator)
            return
        finally:
            lock.release()


_SWITCH_WAIT = 30.0  # seconds a switch waits for numpy < 2's plain lock (a draw holds it)
_RLOCK = type(threading.RLock())
_RETRIES = 1000  # decisions a restore makes again when other threads keep switching
# Changes restores make to numpy's global RNG (switches and set_state), numbered, and the
# last number taken: a restore whose set_state is refused tells by them whether another
# one changed the generator since it looked (review 47). (next() on a count is atomic.)
_numbers = itertools.count(1)
_changes = [0]


def _change() -> int:
    number = next(_numbers)
    _changes[0] = number
    return number


def _has_fields(generator: Any, fields: set[str]) -> bool:
    """Whether a bit generator (or one a class makes) has a state with these fields."""
    try:
        made: Any = generator() if isinstance(generator, type) else generator
        return set(made.state["state"]) == fields
    except Exception:
        return False


def _names(cls: type) -> tuple[str, str]:
    """What a bit generator's state calls its kind: numpy's own write the class name,
    others (randomgen) the dotted path."""
    return cls.__name__, f"{cls.__module__}.{cls.__qualname__}"


def _bit_generator_classes(np: Any, kind: str) -> list[type]:
    """The BitGenerator subclasses a saved state's name may mean: numpy's own, a dotted
    path, any subclass already imported with that name (each once, in that order)."""
    base = np.random.BitGenerator
    found: list[type] = []

    def add(cls: Any) -> None:
        if isinstance(cls, type) and issubclass(cls, base) and cls not in found:
            found.append(cls)

    if kind.isidentifier():
        add(getattr(np.random, kind, None))
    module, _, name = kind.rpartition(".")
    if module:
        with contextlib.suppress(Exception):  # (not importable here: searched below)
            add(getattr(importlib.import_module(module), name, None))
    todo: list[type] = [base]
    seen: set[type] = set()
    while todo:
        subclasses: list[type] = todo.pop().__subclasses__()
        for sub in subclasses:
            if sub not in seen:
                seen.add(sub)
                if kind in _names(sub):
                    add(sub)
                todo.append(sub)
    return found


def _random_state() -> Any:
    """The ``random`` module's state, read straight from memory when that was verified.

    ``random.getstate()`` builds a tuple of 625 ints (about 10 us, most of what a yield of
    a small state costs); the raw read, through ctypes views made once, about 0.6 us. As for
    numpy, the layout is probed once against getstate() and the slow path is kept if
    anything differs.
    """
    inst: Any = getattr(random.getstate, "__self__", None)  # what random.random() draws from
    reader = _random_reader
    if reader is not None and reader[0] is inst:  # (at every due yield: checked once)
        return ("MT19937-raw", reader[1].raw, inst.gauss_next)
    if type(inst) is not random.Random:
        return random.getstate()
    offset = _random_offset if _random_offset is not None else _probe_random()
    if offset < 0:
        return random.getstate()
    reader = _set_random_reader(inst, offset)
    return ("MT19937-raw", reader[1].raw, inst.gauss_next)  # type: ignore[attr-defined]


def _set_random_reader(inst: random.Random, offset: int) -> tuple[Any, Any]:
    global _random_reader
    _random_reader = (inst, (ctypes.c_char * (4 + _MT_BYTES)).from_address(id(inst) + offset))
    return _random_reader


def _random_internal(raw: bytes) -> tuple[int, ...]:
    """random.getstate()'s middle item (624 key words, then the index) from a raw read."""
    return (*struct.unpack(f"<{_MT_WORDS}I", raw[4:]), struct.unpack("<i", raw[:4])[0])


def _probe_random() -> int:
    """Find (and check) where random.Random keeps its int index and 624-word key; -1 if unsure.

    CPython's RandomObject is ``PyObject_HEAD; int index; uint32_t state[624]``.
    """
    global _random_offset
    _random_offset = -1
    if sys.implementation.name != "cpython" or sys.byteorder != "little":
        return -1  # raw records are little-endian wherever they are restored
    try:
        offset = object.__basicsize__
        for seed in (12345, 2**70 + 3):
            r = random.Random(seed)
            for draws in (0, 1, 700):
                for _ in range(draws):
                    r.random()
                raw = ctypes.string_at(id(r) + offset, 4 + _MT_BYTES)
                version, internal, _ = r.getstate()
                if version != 3 or internal != _random_internal(raw):
                    return -1
    except Exception:  # any surprise: keep random's own getstate()
        return -1
    _random_offset = offset
    return offset


def _numpy_state(np: Any) -> Any:
    """numpy's global RandomState, read straight from memory when that was verified to work.

    ``np.random.get_state()`` copies the 624-word key one element at a time (about 30 us,
    more than the rest of a small snapshot); the raw read takes a microsecond (ctypes views
    of the key, its position and the cached gauss, made once per generator). The layout
    is probed once against get_state() and the slow path is kept if anything differs.
    """
    # The object numpy's module-level functions draw from and np.random.set_state
    # restores (np.random.mtrand._rand may have been replaced since they were bound).
    rs: Any = getattr(np.random.get_state, "__self__", None)
    reader = _numpy_reader
    if reader is not None and reader[0] is rs and reader[1] is rs._bit_generator:
        # (the generator probed before, still drawing from the same bit generator)
        return ("MT19937-raw", reader[2].raw, reader[3].value, reader[4].value,
                reader[5].value)
    if type(rs) is not np.random.RandomState:
        return np.random.get_state(legacy=False)
    bitgen = rs._bit_generator
    if type(bitgen) is not np.random.MT19937:
        # e.g. np.random.set_bit_generator(PCG64()): the legacy tuple does not exist
        # (numpy warns at every call); the dict form restores with set_state too.
        return rs.get_state(legacy=False)
    offset = _gauss_offset if _gauss_offset is not None else _probe(np)
    if offset < 0:
        return rs.get_state()
    _, _, key, pos, has_gauss, gauss = _set_numpy_reader(rs, bitgen, offset)
    return ("MT19937-raw", key.raw, pos.value, has_gauss.value, gauss.value)


def _set_numpy_reader(rs: Any, bitgen: Any, offset: int) -> tuple[Any, ...]:
    # Views of the key, its position and the cached gauss, where the probe found them.
    global _numpy_reader
    state = bitgen.ctypes.state_address  # the C struct inside the MT19937 object
    _numpy_reader = (rs, bitgen, (ctypes.c_char * _MT_BYTES).from_address(state),
                     ctypes.c_int.from_address(state + _MT_BYTES),
                     ctypes.c_int.from_address(id(rs) + offset),
                     ctypes.c_double.from_address(id(rs) + offset + 8))
    return _numpy_reader


def _probe(np: Any) -> int:
    """Find (and check twice) where a RandomState keeps has_gauss and gauss; -1 if unsure."""
    global _gauss_offset
    _gauss_offset = -1
    if sys.implementation.name != "cpython" or sys.byteorder != "little":
        return -1  # raw records are little-endian wherever they are restored
    try:
        rs = np.random.RandomState(12345)
        size = type(rs).__basicsize__
        found: set[int] | None = None
        for gauss in (1.2345678901234567e-77, -9.87654321e+123):
            state = list(rs.get_state())
            state[3], state[4] = 1, gauss
            rs.set_state(tuple(state))
            memory = ctypes.string_at(id(rs), size)
            pattern = struct.pack("d", gauss)
            hits = {i - 8 for i in range(8, size - 7) if memory[i:i + 8] == pattern
                    and struct.unpack("i", memory[i - 8:i - 4])[0] == 1}
            found = hits if found is None else found & hits
        if not found or len(found) != 1:
            return -1
        offset = found.pop()
        global_rs = np.random.RandomState(7)
        global_rs.standard_normal(3)  # leaves a cached gauss: has_gauss == 1
        expected = global_rs.get_state()
        has_gauss, gauss = struct.unpack("i4xd", ctypes.string_at(id(global_rs) + offset, 16))
        raw = ctypes.string_at(global_rs._bit_generator.ctypes.state_address, _MT_BYTES + 4)
        if (has_gauss, gauss) != (expected[3], expected[4]) or raw[:_MT_BYTES] != (
                expected[1].astype("<u4").tobytes()) or struct.unpack(
                "i", raw[_MT_BYTES:])[0] != expected[2]:
            return -1
    except Exception:  # any surprise: keep numpy's own get_state()
        return -1
    _gauss_offset = offset
    return offset
