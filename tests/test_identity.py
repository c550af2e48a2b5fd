"""Run identity: callables by code, RNGs by state, fixed ids checked, version=, ignore=."""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import json
import logging
import math
import os
import random
import struct
import subprocess
import sys
import textwrap
import threading
import types
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable
from resumable import ConfigurationError, RunMismatchError, checkpointed
from resumable._errors import EXIT_CONFIG
from resumable.stores import open_store


@checkpointed(store="memory://identity-probe")
def probe(*values: Any, state: Any = None) -> Generator[Any, None, Any]:
    """Only its run id is used: the identity of ``values``."""
    yield state


def rid(*values: Any) -> str:
    return probe.run_id(*values)


# -- callables ----------------------------------------------------------------------------


def make_adder(k: Any) -> Callable[[Any], Any]:
    def add(x: Any) -> Any:
        return x + k

    return add


class Scaler:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    def scale(self, x: float) -> float:
        return x * self.factor


class Point:
    __slots__ = ("x", "y")

    def __init__(self, x: Any, y: Any) -> None:
        self.x, self.y = x, y


def power(x: float, p: float = 2.0, *, offset: float = 0.0) -> float:
    return x**p + offset


def test_closures_with_different_captured_values_are_different_runs() -> None:
    """Two closures of one function that capture different values are two runs."""
    assert rid(make_adder(1)) != rid(make_adder(2))
    assert rid(make_adder(1)) == rid(make_adder(1))


def test_bound_methods_of_two_instances_are_different_runs() -> None:
    """A bound method is identified by its function and its __self__."""
    assert rid(Scaler(2.0).scale) != rid(Scaler(3.0).scale)
    assert rid(Scaler(2.0).scale) == rid(Scaler(2.0).scale)


def test_partials_with_different_arguments_are_different_runs() -> None:
    """functools.partial: func, args and keywords all count."""
    assert rid(functools.partial(power, p=3)) != rid(functools.partial(power, p=4))
    assert rid(functools.partial(power, 1.0)) != rid(functools.partial(power, 2.0))
    assert rid(functools.partial(power, p=3)) == rid(functools.partial(power, p=3))


def test_lambdas_are_identified_by_their_code() -> None:
    """Lambdas with other code (or other constants) are other runs; equal ones are one."""
    assert rid(lambda x: x + 1) != rid(lambda x: x + 2)
    assert rid(lambda x: x * 2) != rid(lambda x: x - 2)
    assert rid(lambda x: x + 1) == rid(lambda x: x + 1)
    # Nested code objects count too.
    assert rid(lambda: (lambda y: y + 1)) != rid(lambda: (lambda y: y + 5))


def test_defaults_and_kwdefaults_count() -> None:
    """A function's defaults and keyword-only defaults are part of its identity."""
    def copy() -> Any:  # the same code, a separate function object
        g = types.FunctionType(power.__code__, power.__globals__, "power", power.__defaults__)
        g.__kwdefaults__ = power.__kwdefaults__
        return g

    assert rid(power) == rid(copy())
    g = copy()
    g.__defaults__ = (3.0,)
    assert rid(power) != rid(g)
    h = copy()
    h.__kwdefaults__ = {"offset": 1.0}
    assert rid(power) != rid(h)


def test_objects_with_slots_are_identified_by_their_slots() -> None:
    """An object with __slots__ (no __dict__) is identified by its slot values."""
    assert rid(Point(1, 2)) == rid(Point(1, 2))
    assert rid(Point(1, 2)) != rid(Point(1, 3))


def test_classes_and_builtins_are_identified_by_name() -> None:
    """Classes, builtins, modules and numpy ufuncs are identified by module and name."""
    assert rid(Scaler) == rid(Scaler)
    assert rid(Scaler) != rid(Point)
    assert rid(len) != rid(abs)
    assert rid(np.add) != rid(np.multiply)
    assert rid(np.sum) != rid(np.mean)
    assert rid(math) != rid(random)
    # Functions of the global RNGs are names, not the global state (seeded per process).
    before = rid(random.random, np.random.normal)
    random.random()
    np.random.normal()
    assert rid(random.random, np.random.normal) == before
    assert rid(random.random) != rid(random.gauss)


def test_cycles_terminate_and_are_stable() -> None:
    """A self-referencing list, dict or object encodes to a stable id."""
    a: list[Any] = [1]
    a.append(a)
    b: list[Any] = [1]
    b.append(b)
    assert rid(a) == rid(b)
    node = Scaler(1.0)
    node.parent = node  # type: ignore[attr-defined]
    assert rid(node) == rid(node)

    def recurse(n: int) -> int:
        return 0 if n == 0 else recurse(n - 1)

    assert rid(recurse) == rid(recurse)


def test_numpy_generators_are_identified_by_their_state() -> None:
    """Generator, RandomState, BitGenerator and random.Random: their state is the value."""
    assert rid(np.random.default_rng(1)) == rid(np.random.default_rng(1))
    assert rid(np.random.default_rng(1)) != rid(np.random.default_rng(2))
    assert rid(np.random.RandomState(1)) != rid(np.random.RandomState(2))
    assert rid(np.random.PCG64(1)) != rid(np.random.PCG64(2))
    assert rid(np.random.PCG64(1)) != rid(np.random.default_rng(1))
    assert rid(random.Random(1)) != rid(random.Random(2))
    assert rid(random.Random(1)) == rid(random.Random(1))


def test_numpy_object_arrays_are_identified_by_their_elements() -> None:
    """Object arrays encode their elements, not their pointers."""
    a = np.array([{"k": 1}, "x", 2.5], dtype=object)
    b = np.array([{"k": 1}, "x", 2.5], dtype=object)
    assert rid(a) == rid(b)
    assert rid(a) != rid(np.array([{"k": 2}, "x", 2.5], dtype=object))
    assert rid(a) != rid(a.reshape(3, 1))


def test_values_with_no_stable_value_name_their_path() -> None:
    """What has no stable value raises ConfigurationError naming where it sits."""
    lock = threading.Lock()

    def fitness(x: float) -> float:
        with lock:
            return x

    @checkpointed(store="memory://paths")
    def evolve(fitness: Any, *, state: Any = None) -> Any:
        yield state

    with pytest.raises(ConfigurationError, match=r"fitness\.__closure__\[0\]") as err:
        evolve.run_id(fitness)
    assert "lock" in str(err.value) and "ignore=" in str(err.value)

    class Model:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        @checkpointed(store="memory://paths")
        def train(self, *, state: Any = None) -> Any:
            yield state

    with pytest.raises(ConfigurationError, match=r"self\.lock"):
        Model().train.run_id()
    with pytest.raises(ConfigurationError, match=r"values\[1\]\['k'\]"):
        rid(1, {"k": (x for x in [])})


def test_second_call_with_another_closure_does_not_return_the_first_result(
    memory_url: str,
) -> None:
    """End to end: the stored result of one closure is not returned for another."""

    @checkpointed(store=memory_url)
    def apply(f: Callable[[int], int], n: int, *, state: Any = None) -> Any:
        state = state or 0
        while state < n:
            state += 1
            yield state
        return f(state)

    assert apply(make_adder(10), 3) == 13
    assert apply(make_adder(20), 3) == 23


# -- Hypothesis: equal for equal, different for different, the same in every process -------

scalars = (
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.binary(max_size=8)
    | st.floats(allow_nan=False) | st.complex_numbers(allow_nan=False)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=4)
        | st.frozensets(st.text(max_size=4) | st.integers(), max_size=4)
    ),
    max_leaves=12,
)


def canonical(v: Any) -> Any:
    """What the identity is meant to see: the type and the value (floats by their bits)."""
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, complex):
        return ("complex", struct.pack("<dd", v.real, v.imag))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(canonical(x) for x in v))
    if isinstance(v, dict):
        return ("dict", frozenset((canonical(k), canonical(x)) for k, x in v.items()))
    if isinstance(v, frozenset):
        return ("set", frozenset(canonical(x) for x in v))
    return (type(v).__name__, v)


@given(values, values)
def test_equal_values_share_a_run_and_different_values_do_not(a: Any, b: Any) -> None:
    """Run ids are equal exactly when the values are (type and bits), closures included."""
    same = canonical(a) == canonical(b)
    assert (rid(a) == rid(b)) == same
    assert (rid(make_adder(a)) == rid(make_adder(b))) == same
    assert (rid(functools.partial(power, a)) == rid(functools.partial(power, b))) == same


def test_a_path_is_not_the_tuple_that_spells_it() -> None:
    """A path and the tuple ("path", str(path)) were encoded alike: one run for both."""
    assert rid(Path("/data/x")) != rid(("path", "/data/x"))
    assert rid(Path("/data/x")) == rid(Path("/data") / "x")
    assert rid(Path("/data/x")) != rid("/data/x")



def test_a_windows_path_is_not_the_posix_path_with_its_str() -> None:
    """PureWindowsPath('a/b') and PurePosixPath('a\\b') print alike ('a\\b') but differ;
    Windows paths that compare equal (case aside) are one run."""
    from pathlib import PurePosixPath, PureWindowsPath

    assert PureWindowsPath("a/b") != PurePosixPath("a\\b")
    assert rid(PureWindowsPath("a/b")) != rid(PurePosixPath("a\\b"))
    assert rid(PureWindowsPath("C:/x")) != rid(PurePosixPath("C:\\x"))
    assert PureWindowsPath("C:/Data/x") == PureWindowsPath("c:/data/X")
    assert rid(PureWindowsPath("C:/Data/x")) == rid(PureWindowsPath("c:/data/X"))
    assert rid(PureWindowsPath("C:/x")) != rid(PureWindowsPath("C:/y"))


# The identity hash versions before 4b5de1a wrote for Path("/data/set"), computed by them
# (they encoded a path as the tuple ("path", str(path))).
_OLD_PATH_HASH = "d0dd0ec6f12b5961"


def _age_identity_record(url: str, run_id: str, data_hash: str) -> None:
    """Make the run's identity record one that versions before 4b5de1a wrote."""

    def age(record: dict[str, Any]) -> None:
        record.pop("encoding", None)
        record["arguments"]["x"] = data_hash

    _rewrite_identity_record(url, run_id, age)


def _rewrite_identity_record(url: str, run_id: str, edit: Callable[[dict[str, Any]], None]
                             ) -> None:
    from resumable import _format

    store = open_store(url)
    key = f"{run_id}/identity"
    raw = store.get(key)
    assert raw is not None
    got = _format.decode(raw, kind="identity", name=key)
    record = json.loads(bytes(got.frames[0]))
    edit(record)
    store.put(key, _format.encode(
        [json.dumps(record, sort_keys=True).encode()], kind="identity", serializer="raw",
        epoch=got.header.epoch, created=got.header.created, name=key))


def _crashing_once(url: str, run_id: str) -> Callable[..., Any]:
    """``train(x, n)`` under a fixed run id: crashes after step 2 the first time."""
    crashed: list[int] = []

    @checkpointed(store=url, run_id=run_id)
    def train(x: Any, n: int, *, state: Any = None) -> Any:
        state = state or 0
        while state < n:
            state += 1
            yield state
            if state == 2 and not crashed:
                crashed.append(state)
                raise RuntimeError("the pod died")
        return state

    return train


def test_a_fixed_run_started_before_paths_had_tags_resumes(tmp_path: Path) -> None:
    """run_id= and a Path argument: a run recorded by the older encoding (no "encoding" in
    its identity record) still matches the same call, and only that call."""
    url = str(tmp_path / "store")
    train = _crashing_once(url, "job-path")
    with pytest.raises(RuntimeError):
        train(Path("/data/set"), 4)
    _age_identity_record(url, "job-path", _OLD_PATH_HASH)
    with pytest.raises(RunMismatchError, match="'x'"):
        train(Path("/data/other"), 4)
    assert train(Path("/data/set"), 4) == 4  # was: RunMismatchError, 'data' differs
    # a record of this version holds the new hash: the tuple that spells the path (whose
    # hash is the old one) is another call
    store = open_store(url)
    for key in store.list("job-path/"):
        store.delete(key)
    assert train(Path("/data/set"), 4) == 4
    with pytest.raises(RunMismatchError, match="'x'"):
        train(("path", "/data/set"), 4)


_SERVER = """
import struct, sys
import cloudpickle
from resumable import checkpointed

@checkpointed(store="memory://x")
def probe(*values, state=None):
    yield state

for line in sys.stdin.buffer:
    n = int(line)
    value = cloudpickle.loads(sys.stdin.buffer.read(n))
    sys.stdout.write(probe.run_id(*value) + "\\n")
    sys.stdout.flush()
"""


class IdServer:
    """A Python process with its own PYTHONHASHSEED that answers run ids for pickled values."""

    def __init__(self, seed: str, cwd: Path) -> None:
        env = dict(os.environ, PYTHONHASHSEED=seed)
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=cwd)

    def ask(self, blob: bytes) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"%d\n" % len(blob) + blob)
        self.proc.stdin.flush()
        return self.proc.stdout.readline().decode().strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


@pytest.fixture(scope="module")
def id_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[IdServer]]:
    cwd = tmp_path_factory.mktemp("idservers")
    servers = [IdServer(seed, cwd) for seed in ("0", "1", "4242")]
    yield servers
    for s in servers:
        s.close()


def sample_callables(v: Any) -> list[Any]:
    return [make_adder(v), functools.partial(power, v), lambda x: (x, v),
            Scaler(v).scale if isinstance(v, float) else v]


@settings(max_examples=int(os.environ.get("RESUMABLE_IDENTITY_EXAMPLES", "25")))
@given(values, st.sets(st.text(max_size=6), max_size=6))
def test_run_ids_are_the_same_in_every_process_and_hash_seed(
    id_servers: list[IdServer], v: Any, words: set[str]
) -> None:
    """Values (sets of strings, closures, partials, lambdas, methods) give one id everywhere."""
    args = (v, words, sample_callables(v), np.array([v, words], dtype=object),
            np.random.default_rng(7))
    blob = cloudpickle.dumps(args)
    answers = {s.ask(blob).rsplit("-", 1)[1] for s in id_servers}  # their probe is __main__'s
    assert answers == {rid(*args).rsplit("-", 1)[1]}


# -- version= and the code fingerprint --------------------------------------------------


def test_version_is_part_of_the_identity() -> None:
    """version= changes the derived run id; version=None keeps today's ids."""

    def body(n: int, *, state: Any = None) -> Any:
        yield state

    plain = checkpointed()(body)
    v1 = checkpointed(version=1)(body)
    v2 = checkpointed(version="2")(body)
    assert len({plain.run_id(3), v1.run_id(3), v2.run_id(3)}) == 3
    assert checkpointed(version=1)(body).run_id(3) == v1.run_id(3)
    assert checkpointed(version=None)(body).run_id(3) == plain.run_id(3)
    for bad in (1.5, b"x", [1], True):
        with pytest.raises(ConfigurationError, match="version"):
            checkpointed(version=bad)(body)


_CODE_V1 = """
@checkpointed(store=STORE, run_id="code-change")
def evolve(n, *, state=None):
    state = state or 0
    while state < n:
        state += 1
        if state == 3 and CRASH:
            raise RuntimeError("crash")
        yield state
    return state
"""
_CODE_V2 = _CODE_V1.replace("state += 1", "state = state + 1")


def _define(source: str, store: str, crash: bool) -> Any:
    namespace: dict[str, Any] = {"__name__": "walk_module", "checkpointed": checkpointed,
                                 "STORE": store, "CRASH": crash}
    exec(source, namespace)
    return namespace["evolve"]


@pytest.mark.parametrize("changed", [False, True])
def test_resuming_a_checkpoint_of_other_code_warns_once(
    memory_url: str, caplog: pytest.LogCaptureFixture, changed: bool
) -> None:
    """A resume from a checkpoint written by other code of the function logs one WARNING."""
    with pytest.raises(RuntimeError):
        _define(_CODE_V1, memory_url, crash=True)(6)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert _define(_CODE_V2 if changed else _CODE_V1, memory_url, crash=False)(6) == 6
    warnings = [r.getMessage() for r in caplog.records if "version=" in r.getMessage()]
    assert len(warnings) == (1 if changed else 0), warnings
    if changed:
        assert "walk_module.evolve" in warnings[0]


# -- fixed run ids check the call ---------------------------------------------------------


def counter(**options: Any) -> Any:
    @checkpointed(**options)
    def count(n: int, step: int = 1, *, state: Any = None) -> Any:
        state = state or 0
        while state < n * step:
            state += step
            yield state
        return state

    return count


def test_fixed_run_id_with_other_arguments_raises_run_mismatch(memory_url: str) -> None:
    """With run_id=, a call with other arguments fails at once, naming them."""
    count = counter(store=memory_url, run_id="job-1")
    assert count(4) == 4
    with pytest.raises(RunMismatchError) as err:
        count(5, 2)
    message = str(err.value)
    assert "'n'" in message and "'step'" in message and "job-1" in message
    assert "resumable rm" in message and "run_id" in message
    assert isinstance(err.value, ConfigurationError) and err.value.exit_code == EXIT_CONFIG
    assert count(4) == 4  # the same call still finds its result


def _versions(calls: list[Any]) -> tuple[Any, Any]:
    """A counting body, and the same body with a parameter added since (``extra``, None
    by default; the count goes up by it when it is a number): each call appends what it
    got to ``calls``. Both have one name, as one function edited between two runs."""

    def before(n: int, *, state: Any = None) -> Any:
        calls.append(n)
        state = state or 0
        while state < n:
            state += 1
            yield state
        return state

    def after(n: int, extra: Any = None, *, state: Any = None) -> Any:
        calls.append((n, extra))
        state = state or 0
        while state < n:
            state += extra if isinstance(extra, int) else 1
            yield state
        return state

    after.__qualname__ = before.__qualname__
    return before, after


def test_run_mismatch_on_a_new_parameter_tells_of_ignore(memory_url: str) -> None:
    """A parameter the run was started without (added to the function since): the error
    says ignore= resumes the run, and it does; not said when the run has the argument."""
    before, after = _versions([])
    assert checkpointed(store=memory_url, run_id="job-new")(before)(3) == 3
    with pytest.raises(RunMismatchError) as err:
        checkpointed(store=memory_url, run_id="job-new")(after)(3, 1)
    assert "'extra' (absent in the run, 1 in this call)" in str(err.value)
    assert "ignore=('extra',)" in str(err.value)
    assert checkpointed(store=memory_url, run_id="job-new", ignore=("extra",))(after)(3, 1) == 3
    with pytest.raises(RunMismatchError) as err:
        checkpointed(store=memory_url, run_id="job-new")(before)(4)
    assert "ignore=" not in str(err.value)


def test_an_ignored_parameter_added_since_at_none_keeps_the_stored_result(
        memory_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A completed run, then its function with a new ignored parameter: left at None it
    is what the run was made without, so the stored result answers; another value is a
    change, and the run is extended from its last checkpoint."""
    calls: list[Any] = []
    before, after = _versions(calls)
    assert checkpointed(store=memory_url, run_id="job-added")(before)(3) == 3
    f = checkpointed(store=memory_url, run_id="job-added", ignore=("extra",))(after)
    with caplog.at_level("INFO", logger="resumable"):
        assert f(3) == 3 and f(3, None) == 3
    assert calls == [3] and "extending" not in caplog.text, caplog.text
    with caplog.at_level("INFO", logger="resumable"):
        assert f(3, 5) == 3
    assert calls == [3, (3, 5)] and "extra: ? -> 5" in caplog.text, caplog.text


class _LooksLikeNone(float):
    def __repr__(self) -> str:
        return "None"


@pytest.mark.parametrize("case", ["a value shown as None", "no identity record"])
def test_an_added_parameter_is_a_change_unless_it_is_none_and_the_run_is_known(
        tmp_path: Path, case: str) -> None:
    """The rule above judges the value (not how it is shown), and only with the run's
    identity read and verified: otherwise the run is extended, as before it. (A run with
    no identity record, as one deleted on the advice of the error for a damaged one; a
    damaged one is refused, test_a_damaged_identity_record_is_refused_not_ignored.)"""
    calls: list[Any] = []
    before, after = _versions(calls)
    store = tmp_path / "store"
    assert checkpointed(store=str(store), run_id="job")(before)(3) == 3
    extra: Any = None
    if case == "a value shown as None":
        extra = _LooksLikeNone(10.0)
    else:
        (store / "job" / "identity").unlink()
    checkpointed(store=str(store), run_id="job", ignore=("extra",))(after)(3, extra)
    assert calls == [3, (3, extra)]


def test_env_run_id_with_other_arguments_raises_before_resuming(
    memory_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$RESUMABLE_RUN_ID: a mismatching call is refused even mid-run, before any body runs."""
    monkeypatch.setenv("RESUMABLE_RUN_ID", "job-2")
    entered = []

    @checkpointed(store=memory_url)
    def count(n: int, *, state: Any = None) -> Any:
        entered.append(n)
        state = state or 0
        while state < n:
            state += 1
            yield state
            if state == 2 and len(entered) == 1:
                raise RuntimeError("crash")
        return state

    with pytest.raises(RuntimeError):
        count(5)
    with pytest.raises(RunMismatchError, match="'n'"):
        count(6)
    assert entered == [5]
    assert count(5) == 5


def test_version_mismatch_under_a_fixed_run_id(memory_url: str) -> None:
    """A fixed id resumed by a decorator with another version= is a mismatch too."""
    counter(store=memory_url, run_id="job-3", version=1)(3)
    with pytest.raises(RunMismatchError, match="version"):
        counter(store=memory_url, run_id="job-3", version=2)(3)


def test_run_mismatch_exits_78(tmp_path: Path) -> None:
    """Uncaught in a script, RunMismatchError ends the process with exit code 78."""
    script = (
        "import sys\nfrom resumable import checkpointed\n"
        "@checkpointed(store=sys.argv[1], run_id='job')\n"
        "def f(n, *, state=None):\n    yield n\n"
        "f(int(sys.argv[2]))\n"
    )
    store = str(tmp_path / "store")
    subprocess.run([sys.executable, "-c", script, store, "1"], check=True)
    proc = subprocess.run([sys.executable, "-c", script, store, "2"], capture_output=True,
                          text=True)
    assert proc.returncode == 78, proc.stderr
    assert "RunMismatchError" in proc.stderr
    assert resumable.RunMismatchError is RunMismatchError


# -- ignore=: extend a finished run ------------------------------------------------------


def ga(entered: list[int], crashes: set[int] | None = None, **options: Any) -> Any:
    """A GA-shaped run on the global RNGs; it raises once in each generation of ``crashes``."""
    crashes = set() if crashes is None else crashes

    @checkpointed(**options)
    def evolve(pop: int, generations: int, *, state: Any = None) -> Any:
        entered.append(0 if state is None else state["generation"])
        if state is None:
            state = {"generation": 0, "x": np.zeros(pop), "trace": []}
        while state["generation"] < generations:
            state["x"] += np.random.normal(size=pop) + random.random()
            if state["generation"] + 1 in crashes:
                crashes.discard(state["generation"] + 1)
                raise RuntimeError("crash")
            state["trace"].append(float(state["x"].sum()))
            state["generation"] += 1
            yield state
        return state["trace"][-1]

    return evolve


def test_ignore_unknown_names_fail_at_decoration() -> None:
    """ignore= names must be parameters of the function (and not the state)."""
    with pytest.raises(ConfigurationError, match="generationz"):
        ga([], ignore=["generationz"])
    with pytest.raises(ConfigurationError, match="state"):
        ga([], ignore=["state"])


def test_extending_a_finished_run_resumes_it(memory_url: str, tmp_path: Path) -> None:
    """ignore=["generations"]: 50 then 100 resumes from 50 and equals a 100-generation run."""
    random.seed(5)
    np.random.seed(5)
    reference = ga([], store=str(tmp_path / "ref"))(20, 100)
    entered: list[int] = []
    evolve = ga(entered, store=memory_url, ignore=["generations"], keep=1)
    random.seed(5)
    np.random.seed(5)
    first = evolve(20, 50)
    assert evolve.run_id(20, 50) == evolve.run_id(20, 100)
    assert evolve(20, 50) == first and entered == [0]  # same ignored values: stored result
    random.seed(99)  # the RNG state comes from the checkpoint, not from here
    assert evolve(20, 100) == reference
    assert entered == [0, 50]
    assert evolve(20, 100) == reference and entered == [0, 50]


def test_show_prints_which_attempt_ran_with_which_ignored_values(tmp_path: Path) -> None:
    """`resumable show` (and --json) lists each attempt with its ignored arguments."""
    store = tmp_path / "store"
    evolve = ga([], store=str(store), ignore=["generations"])
    evolve(4, 5)
    evolve(4, 8)
    run_id = evolve.run_id(4, 5)
    exe = Path(sys.executable).with_name("resumable")
    out = subprocess.run([str(exe), "show", str(store), run_id], capture_output=True,
                         text=True, check=True).stdout
    assert "generations=5" in out and "generations=8" in out
    data = json.loads(subprocess.run([str(exe), "show", str(store), run_id, "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    history = data["history"]
    assert [h["ignored"] for h in history] == [{"generations": "5"}, {"generations": "8"}]
    assert [h["epoch"] for h in history] == [1, 2]


# -- RNG objects among the arguments ------------------------------------------------------


_WALKER_CRASH_AT: list[int] = []  # (not in the class: a class made at run time is
# identified by its value, and the restarted process's class has the same code)


def walker_class(store: str, run_id: str | None, crash_at: int = 0) -> type:
    _WALKER_CRASH_AT[:] = [crash_at]

    class Walker:
        def __init__(self, seed: int) -> None:
            self.rng = np.random.default_rng(seed)

        @checkpointed(store=store, run_id=run_id)
        def walk(self, steps: int, *, state: Any = None) -> Any:
            state = state or {"i": 0, "x": 0.0}
            while state["i"] < steps:
                state["x"] += self.rng.normal()
                state["i"] += 1
                if state["i"] == _WALKER_CRASH_AT[0]:
                    raise RuntimeError("crash")
                yield state
            return state["x"]

    return Walker


@pytest.mark.parametrize("run_id", [None, "walker"])
def test_method_with_self_rng_resumes_bit_identical(memory_url: str, run_id: str | None,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """self.rng is captured with each checkpoint and restored in place on resume."""
    reference = walker_class(f"{memory_url}-ref", run_id)(3).walk(10)
    with pytest.raises(RuntimeError):
        walker_class(memory_url, run_id, crash_at=6)(3).walk(10)
    walker = walker_class(memory_url, run_id)  # as in a new process: a new class, instance
    with caplog.at_level(logging.INFO, logger="resumable"):
        assert walker(3).walk(10) == reference
    assert "resuming run" in caplog.text  # the same run: not started over
    if run_id is None:
        assert walker(3).walk.run_id(10) == walker(3).walk.run_id(10)


def test_rng_objects_in_lists_dicts_and_random_random_are_restored(memory_url: str) -> None:
    """random.Random, BitGenerator and RandomState in list/dict arguments are restored."""

    def body(rngs: list[Any], named: dict[str, Any], crash: list[int], *,
             state: Any = None) -> Any:
        state = state or []
        while len(state) < 6:
            state.append((rngs[0].random(), float(rngs[1].random_raw()),
                          named["legacy"].randint(10**6)))
            if len(state) == 3 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state

    def args() -> tuple[Any, Any]:
        return ([random.Random(1), np.random.PCG64(2)],
                {"legacy": np.random.RandomState(3)})

    reference = checkpointed(store=f"{memory_url}-ref", ignore=["crash"])(body)(*args(), [])
    f = checkpointed(store=memory_url, ignore=["crash"])(body)
    with pytest.raises(RuntimeError):
        f(*args(), [1])
    assert f(*args(), []) == reference


def test_rng_objects_restored_at_in_process_restart_and_from_the_start_record(
    memory_url: str,
) -> None:
    """An ignored RNG argument is rewound at restarts and before the first yield."""

    def body(n: int, rng: Any, crash: set[int], *, state: Any = None) -> Any:
        state = state or []
        while len(state) < n:
            draw = float(rng.random())
            if len(state) in crash:
                crash.discard(len(state))
                raise RuntimeError("crash")
            state.append(draw)
            yield state
        return state

    def make(suffix: str, restarts: int = 0) -> Any:
        return checkpointed(store=f"{memory_url}-{suffix}", ignore=["rng", "crash"],
                            restarts=restarts)(body)

    reference = make("ref")(5, np.random.default_rng(8), set())
    # Across calls: the same (advanced) generator object is rewound by the start record.
    rng = np.random.default_rng(8)
    with pytest.raises(RuntimeError):
        make("start")(5, rng, {0})
    assert make("start")(5, rng, set()) == reference
    # In-process restarts, before the first yield and after later ones.
    assert make("restart0", restarts=1)(5, np.random.default_rng(8), {0}) == reference
    assert make("restart23", restarts=1)(5, np.random.default_rng(8), {2, 3}) == reference


def test_the_identity_record_is_verified(memory_url: str) -> None:
    """The call's fingerprint is a verified record under the run, not a checkpoint name."""
    from resumable import _format

    count = counter(store=memory_url, run_id="job-4")
    count(2)
    store = open_store(memory_url)
    names = [k.split("/", 1)[1] for k in store.list("job-4/")]
    assert "identity" in names
    data = store.get("job-4/identity")
    assert data is not None
    record = json.loads(bytes(_format.decode(data, kind="identity",
                                             name="job-4/identity").frames[0]))
    assert set(record["arguments"]) == {"n", "step"}
    assert not any(n.startswith("ckpt-") and "identity" in n for n in names)


@settings(max_examples=20)
@given(first=st.integers(1, 12), then=st.integers(0, 12), crash=st.integers(0, 24))
def test_any_extension_equals_the_uninterrupted_run(first: int, then: int, crash: int) -> None:
    """Any run of N generations extended to N + M, with a crash anywhere in the
    extension, returns the uninterrupted (N + M)-generation result, bit for bit."""
    import uuid

    total = first + then
    random.seed(1)
    np.random.seed(1)
    reference = ga([], store=f"memory://ext-ref-{uuid.uuid4().hex}")(6, total)
    entered: list[int] = []
    store = f"memory://ext-{uuid.uuid4().hex}"
    random.seed(1)
    np.random.seed(1)
    ga(entered, store=store, ignore=["generations"])(6, first)
    crashes = {crash} if first < crash <= total else set()
    evolve = ga(entered, crashes, store=store, ignore=["generations"])
    random.seed(77)  # whatever the globals hold now, the checkpoint's RNG state wins
    if crashes:
        with pytest.raises(RuntimeError):
            evolve(6, total)
    assert evolve(6, total) == reference


@settings(max_examples=20)
@given(steps=st.integers(1, 12), crash=st.integers(1, 12), fixed=st.booleans())
def test_self_rng_resumes_bit_identical_after_a_crash_anywhere(
    steps: int, crash: int, fixed: bool
) -> None:
    """A method drawing from self.rng, crashed at any generation, resumes bit-identical."""
    import uuid

    store = f"memory://walk-{uuid.uuid4().hex}"
    run_id = "w" if fixed else None
    reference = walker_class(f"{store}-ref", run_id)(11).walk(steps)
    if crash <= steps:
        with pytest.raises(RuntimeError):
            walker_class(store, run_id, crash_at=crash)(11).walk(steps)
    assert walker_class(store, run_id)(11).walk(steps) == reference


def test_fixed_run_id_accepts_arguments_with_no_stable_value(memory_url: str) -> None:
    """Under a fixed id such arguments still work (compared by type), as before."""

    @checkpointed(store=memory_url, run_id="with-lock")
    def f(lock: Any, n: int, *, state: Any = None) -> Any:
        state = state or 0
        while state < n:
            state += 1
            yield state
        return state

    assert f(threading.Lock(), 3) == 3
    assert f(threading.Lock(), 3) == 3  # another lock object: the same run
    with pytest.raises(RunMismatchError, match="'lock'"):
        f(threading.RLock(), 3)


# -- values that must not collide (review) -------------------------------------------------


def _make_cached(k: Any) -> Callable[[Any], Any]:
    @functools.cache
    def fit(x: Any) -> Any:
        return x * k

    return fit  # type: ignore[no-any-return]


def test_array_subclasses_structured_dtypes_and_defaultdicts_are_told_apart() -> None:
    masked = np.ma.array([1.0, 2.0], mask=[0, 1])
    assert rid(masked) != rid(np.ma.array([1.0, 2.0], mask=[1, 0]))  # the mask counts
    assert rid(masked) != rid(np.array([1.0, 2.0]))  # and the class
    assert rid(masked) == rid(np.ma.array([1.0, 2.0], mask=[0, 1]))
    ab = np.zeros(2, dtype=[("a", "<f8"), ("b", "<f8")])
    assert rid(ab) != rid(np.zeros(2, dtype=[("x", "<i8"), ("y", "<i8")]))
    assert rid(np.zeros(2, dtype=[("a", "<f8")])) != rid(np.zeros(2, dtype="V8"))
    assert rid(ab) == rid(np.zeros(2, dtype=[("a", "<f8"), ("b", "<f8")]))
    assert rid(collections.defaultdict(int)) != rid(collections.defaultdict(list))
    assert rid(collections.defaultdict(int)) != rid({})
    assert rid(collections.OrderedDict(a=1)) != rid({"a": 1})
    assert rid(collections.Counter(a=1)) != rid({"a": 1})


def test_a_global_name_that_is_not_the_object_is_not_its_identity() -> None:
    """lru_cache'd closures pickle by a ``<locals>`` name that does not resolve to them:
    two with different captured values must not share a run (or the id must be refused)."""
    try:
        one, two = rid(_make_cached(1)), rid(_make_cached(2))
    except ConfigurationError as err:
        assert "fitness" in str(err) or "args" in str(err) or "[0]" in str(err), err
    else:
        assert one != two
    assert rid(functools.reduce) == rid(functools.reduce)  # real globals keep working


# -- review 27: values that encoded alike, and encodings of older versions ------------------


def test_numpy_scalars_are_told_apart_by_their_dtype() -> None:
    """np.float32(0.5) and 0.5 were one run (encoded by .item()); so were np.int32(1),
    np.int64(1) and 1. float32 arithmetic gives other bits, int32 overflows."""
    values = [0.5, np.float32(0.5), np.float16(0.5), 1, np.int32(1),
              np.int64(1), np.uint8(1), True, np.bool_(True),
              np.datetime64(5, "ns"), np.timedelta64(5, "ns")]
    ids = [rid(v) for v in values]
    shared = [v for v, i in zip(values, ids, strict=True) if ids.count(i) > 1]
    assert not shared, shared
    assert rid(np.float32(0.5)) == rid(np.float32(0.5))
    assert rid(np.float32(0.5)) != rid(np.float32(0.25))
    # np.float64 is a float (a subclass), with the same arithmetic: one run, as before
    assert rid(np.float64(0.5)) == rid(0.5)


def test_a_long_double_scalar_has_an_identity() -> None:
    """np.longdouble scalars failed with 'nested more than 100 levels deep' (.item() of a
    long double is the long double itself)."""
    assert rid(np.longdouble("0.1")) == rid(np.longdouble("0.1"))
    assert rid(np.longdouble("0.1")) != rid(np.longdouble("0.2"))
    assert rid(np.clongdouble(1 + 2j)) != rid(np.clongdouble(1 + 3j))


def test_a_0d_array_is_not_a_1_element_array() -> None:
    assert rid(np.array(0.5)) != rid(np.array([0.5]))


def test_a_fortran_ordered_array_is_not_its_c_ordered_copy() -> None:
    """Equal values, but row sums of one and the other add in another order."""
    a = np.arange(12.0).reshape(3, 4)
    assert rid(a) != rid(np.asfortranarray(a))
    assert rid(np.asfortranarray(a)) == rid(np.asfortranarray(a.copy()))


def test_an_ordered_dict_keeps_its_order() -> None:
    a = collections.OrderedDict([("a", 1), ("b", 2)])
    b = collections.OrderedDict([("b", 2), ("a", 1)])
    assert a != b and rid(a) != rid(b)
    assert rid({"a": 1, "b": 2}) == rid({"b": 2, "a": 1})  # a dict's order is not its value


class _Genome(list):  # type: ignore[type-arg]
    pass


class _Params(dict):  # type: ignore[type-arg]
    pass


def test_container_subclasses_and_dataclasses_keep_their_attributes() -> None:
    import dataclasses

    g1, g2 = _Genome([1.0]), _Genome([1.0])
    g1.sigma, g2.sigma = 0.1, 5.0  # type: ignore[attr-defined]
    assert rid(g1) != rid(g2)
    p1, p2 = _Params(a=1), _Params(a=1)
    p1.scale, p2.scale = 1, 2  # type: ignore[attr-defined]
    assert rid(p1) != rid(p2)

    @dataclasses.dataclass
    class Cfg:
        pop: int

    c1, c2 = Cfg(10), Cfg(10)
    c1.mutation, c2.mutation = 0.1, 0.9  # type: ignore[attr-defined]
    assert rid(c1) != rid(c2)
    assert rid(Cfg(10)) == rid(Cfg(10))


def _local_config(lr: float) -> type:
    class Config:
        LR = lr

        def rate(self) -> float:
            return lr

        @staticmethod
        def tag() -> str:
            return "t"

        @property
        def double(self) -> float:
            return 2 * lr

    return Config


def test_classes_made_at_run_time_are_identified_by_value() -> None:
    """Classes made in a function or by type() were identified by name only: two calls
    with other class attributes, or other closures in their methods, were one run."""
    assert rid(_local_config(0.1)) != rid(_local_config(0.9))
    assert rid(_local_config(0.1)) == rid(_local_config(0.1))
    assert rid(_local_config(0.1)()) != rid(_local_config(0.9)())
    assert rid(_local_config(0.1)()) == rid(_local_config(0.1)())
    assert rid(type("Opt", (), {"lr": 0.1})) != rid(type("Opt", (), {"lr": 0.9}))
    assert rid(Scaler) == rid(Scaler)  # a module's class: by name, as before


def test_a_fixed_run_id_compares_what_it_can_of_an_argument_with_a_lock(
        tmp_path: Path) -> None:
    """Under a fixed run id an argument without a stable value was compared by its type
    alone: Experiment(500) silently got Experiment(10)'s stored result."""

    class Experiment:
        def __init__(self, pop_size: int) -> None:
            self.pop_size = pop_size
            self.lock = threading.Lock()

    @checkpointed(store=str(tmp_path), run_id="ga-2024")
    def evolve(exp: Experiment, *, state: Any = None) -> Any:
        yield exp.pop_size
        return exp.pop_size

    assert evolve(Experiment(10)) == 10
    assert evolve(Experiment(10)) == 10
    with pytest.raises(RunMismatchError, match="'exp'"):
        evolve(Experiment(500))


_MAIN_TWO_CLASSES = """
import sys
from resumable import checkpointed, RunMismatchError

class GA:
    @staticmethod
    @checkpointed(store=sys.argv[1], run_id="job-42")
    def run(n, *, state=None):
        yield 1
        return "GA"

class PSO:
    @staticmethod
    @checkpointed(store=sys.argv[1], run_id="job-42")
    def run(n, *, state=None):
        yield 1
        return "PSO"

print(GA.run(10))
try:
    print(PSO.run(10))
except RunMismatchError as err:
    print("mismatch", "function" in err.differences)
"""


def test_a_script_function_matches_only_its_own_qualified_name(tmp_path: Path) -> None:
    """Under a fixed run id, __main__.GA.run and __main__.PSO.run were 'the same function'
    (their last names were compared, for `python x.py` against `python -m pkg.x`)."""
    script = tmp_path / "two.py"
    script.write_text(_MAIN_TWO_CLASSES)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["GA", "mismatch True"]


def test_same_function_compares_qualified_names_across_main() -> None:
    from resumable._identity import _same_function

    assert _same_function("__main__.GA.run", "pkg.train.GA.run")
    assert _same_function("pkg.train.evolve", "__main__.evolve")
    assert not _same_function("__main__.GA.run", "__main__.PSO.run")
    assert not _same_function("__main__.GA.run", "pkg.train.PSO.run")


def test_a_fixed_run_recorded_by_encoding_2_resumes_with_its_numpy_scalar(
        tmp_path: Path) -> None:
    """A run a version before encoding 3 started under run_id= with np.float32(0.5) (its
    hash was that of 0.5) resumes after the upgrade; 0.25 is still another call."""
    import hashlib

    from resumable._runid import encode_value_as

    url = str(tmp_path / "store")
    train = _crashing_once(url, "job-scalar")
    with pytest.raises(RuntimeError):
        train(np.float32(0.5), 4)

    def as_encoding_2(record: dict[str, Any]) -> None:
        record["encoding"] = 2
        record["arguments"]["x"] = hashlib.sha256(
            encode_value_as(np.float32(0.5), "x", 2)).hexdigest()[:16]

    _rewrite_identity_record(url, "job-scalar", as_encoding_2)
    with pytest.raises(RunMismatchError, match="'x'"):
        train(np.float32(0.25), 4)
    assert train(np.float32(0.5), 4) == 4


def test_a_derived_run_an_older_encoding_named_is_pointed_out_not_resumed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """After the upgrade a call with a numpy scalar derives another run id. It starts
    fresh (the old id was also 0.5's: it may be that call's run), with a WARNING that
    names the old run and how to resume it."""
    import hashlib

    from resumable._runid import derive_run_id, encode_arguments, encode_value_as

    url = str(tmp_path / "store")
    crash = [True]

    def body(rate: Any, *, state: Any = None) -> Any:
        yield 1
        if crash:
            raise RuntimeError("the pod died")
        return "done"

    train = checkpointed(store=url)(body)
    arguments = {"rate": np.float32(0.5)}
    old = derive_run_id(body, arguments, None, encode_arguments(arguments, 2))
    assert old != train.run_id(np.float32(0.5))
    with pytest.raises(RuntimeError):  # the run an older version started, under that id
        checkpointed(store=url, run_id=old)(body)(np.float32(0.5))

    def as_encoding_2(record: dict[str, Any]) -> None:
        record["encoding"] = 2
        record["arguments"]["rate"] = hashlib.sha256(
            encode_value_as(np.float32(0.5), "rate", 2)).hexdigest()[:16]

    _rewrite_identity_record(url, old, as_encoding_2)
    crash.clear()
    with caplog.at_level(logging.INFO, logger="resumable"):
        assert train(np.float32(0.5)) == "done"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and old in warnings[0] and f"run_id={old!r}" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="resumable"):
        assert train(np.float32(0.5)) == "done"  # complete: nothing to point out
        assert train(np.float32(0.25)) == "done"  # no older run of its own
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    assert checkpointed(store=url, run_id=old)(body)(np.float32(0.5)) == "done"  # resumes


class _HoldsRng:
    def __init__(self, rng: Any) -> None:
        self.rng = rng


def test_an_argument_holding_a_global_rng_is_not_identified_by_its_state() -> None:
    """scipy's frozen distributions hold numpy's global RandomState, seeded from the OS in
    every process: its state in the run id gave every restart a new run."""
    for rng in (np.random.mtrand._rand, random._inst):  # type: ignore[attr-defined]
        before = rid(_HoldsRng(rng))
        rng.random()
        assert rid(_HoldsRng(rng)) == before
    assert rid(_HoldsRng(np.random.RandomState(1))) != rid(_HoldsRng(np.random.RandomState(2)))


_LENIENT_THREAD = """
import threading
from concurrent.futures import ThreadPoolExecutor
from resumable._identity import _lenient_hash

class Trainer:
    def __init__(self):
        self.epochs = 5
        self.worker = threading.Thread(target=print)
        self.worker.start()  # (its id is set)
        self.worker.join()
        self.pool = ThreadPoolExecutor(1)
        self.pool.submit(print).result()  # (its worker thread too)

print(_lenient_hash("trainer", Trainer()))
"""


def test_a_fixed_run_id_compares_an_object_holding_a_thread_alike_in_every_process(
        ) -> None:
    """Review 30: comparing all but the lock by value took in a thread's id, which
    differs in every process: the run under a fixed id never resumed (RunMismatchError).
    A part holding something without a stable value counts by its type."""
    hashes = {subprocess.run([sys.executable, "-c", _LENIENT_THREAD], capture_output=True,
                             text=True, timeout=120, check=True).stdout for _ in range(2)}
    assert len(hashes) == 1, hashes


def _class_with_cached_property(k: int) -> type:
    class Model:
        K = k

        @functools.cached_property
        def weights(self) -> int:
            return k

    return Model


def test_a_class_made_at_run_time_with_a_cached_property_has_an_identity() -> None:
    """Review 30: its cached_property holds an RLock (3.11): the call failed with
    ConfigurationError, where encoding 2 (classes by name) took it."""
    assert rid(_class_with_cached_property(1)) == rid(_class_with_cached_property(1))
    assert rid(_class_with_cached_property(1)) != rid(_class_with_cached_property(2))


def _ids_of_decorated_with_body(body: str) -> tuple[str, str]:
    """Run ids of a call taking a @checkpointed function, and one taking a @checkpointed
    method, whose code returns ``body``; both reachable by name, as in a script."""
    module = types.ModuleType("decorated_args")
    sys.modules[module.__name__] = module
    try:
        exec(textwrap.dedent(f"""
            from resumable import checkpointed

            @checkpointed(store="memory://decorated-args")
            def evaluate(x, *, state=None):
                yield 0
                return {body}

            class Model:
                @checkpointed(store="memory://decorated-args")
                def fit(self, x, *, state=None):
                    yield 0
                    return {body}
            """), module.__dict__)
        return rid(module.evaluate), rid(module.Model().fit)
    finally:
        del sys.modules[module.__name__]


def test_a_checkpointed_function_as_an_argument_is_identified_by_its_code() -> None:
    """A @checkpointed function passed to another run (a fitness, a sub-run) was
    identified by its name alone once it pickled by name (e5a9dc6): a change to its code
    returned the old code's stored result (review 32). By its code again, as a plain
    function; the same for a @checkpointed method."""
    double = _ids_of_decorated_with_body("x * 2")
    triple = _ids_of_decorated_with_body("x * 3")
    assert double[0] != triple[0]
    assert double[1] != triple[1]
    assert double == _ids_of_decorated_with_body("x * 2")


_ROOT = Path(__file__).resolve().parents[1]
_SPAWNED_POOL = """
import os, sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from resumable import checkpointed

@checkpointed(store=os.environ["STORE"])
def job(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s
    return s * 10

if __name__ == "__main__":
    with ProcessPoolExecutor(1, mp_context=get_context(sys.argv[1])) as pool:
        print("results", list(pool.map(job, [2, 3])), flush=True)
    print("run id", job.run_id(2), flush=True)
    print("store", sorted(os.listdir(os.environ["STORE"])), flush=True)
    print("resumed", job.latest(2).state, flush=True)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_script_run_in_a_spawned_pool_has_the_scripts_run_id(
        tmp_path: Path, method: str) -> None:
    """spawn and forkserver workers import the script as ``__mp_main__``: its runs got
    other run ids there than the script's own calls (and than fork workers), so a run
    started in a pool and called directly, or under another start method, started over,
    and ``f.latest`` or ``f.reset`` from the script missed it (review 32)."""
    script = tmp_path / "script.py"
    script.write_text(_SPAWNED_POOL)
    done = subprocess.run(
        [sys.executable, str(script), method], capture_output=True, text=True, cwd=_ROOT,
        env=dict(os.environ, PYTHONPATH=str(_ROOT), STORE=str(tmp_path / "s")), timeout=120)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["results"] == "[20, 30]"
    assert lines["run"].startswith("id __main__.job-")
    run_id = lines["run"][len("id "):]
    assert run_id in lines["store"], lines
    assert lines["resumed"] == "2"


def _resumed_as_uninterrupted(memory_url: str, body: Any, make: Any, *,
                              ignore: tuple[str, ...] = ("crash",), how: str = "resume") -> Any:
    """``body(*make(), crash)`` run through, then in another store with ``crash=[1]`` (its
    body raises once, midway) and again (``how="resume"``: a later call, with arguments
    made anew as a restarted process makes them) or ``restarts=1`` (``"restart"``: in
    the same call); the second store's result must be the first's. Returns it."""
    reference = checkpointed(store=f"{memory_url}-ref", ignore=list(ignore))(body)(*make(), [])
    if how == "restart":
        restarted = checkpointed(store=memory_url, ignore=list(ignore), restarts=1)(body)
        assert restarted(*make(), [1]) == reference
        return reference
    f = checkpointed(store=memory_url, ignore=list(ignore))(body)
    with pytest.raises(RuntimeError):
        f(*make(), [1])
    assert f(*make(), []) == reference
    return reference


class _Stream:
    """A dict key whose repr names its address: another in each call, and process."""

    def __init__(self, name: str) -> None:
        self.name = name


def test_rng_under_a_dict_key_that_prints_its_address_is_restored(memory_url: str) -> None:
    """The saved RNG's path does not spell the key's address (which the resuming process's
    key does not have): such keys go by position. Before, the path missed on resume and the
    generator went on from its fresh state, silently."""

    def body(streams: dict[Any, Any], crash: list[int], *, state: Any = None) -> Any:
        state = state or []
        while len(state) < 6:
            state.append([float(rng.random()) for rng in streams.values()])
            if len(state) == 3 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state

    def args() -> dict[Any, Any]:
        return {_Stream("mutation"): np.random.default_rng(5), "plain": random.Random(6),
                _Stream("crossover"): np.random.default_rng(7)}

    reference = checkpointed(store=f"{memory_url}-ref", ignore=["crash"])(body)(args(), [])
    f = checkpointed(store=memory_url, ignore=["crash"])(body)
    assert f.run_id(args(), []) == f.run_id(args(), [])  # (one run: the keys' values)
    with pytest.raises(RuntimeError):
        f(args(), [1])
    assert f(args(), []) == reference


def test_an_rng_the_checkpoint_does_not_have_is_named_in_a_warning(
    memory_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A resumed call holding an RNG at a path the checkpoint has no state for (the
    checkpoint has others) warns that the run may differ, naming the path."""

    def body(streams: dict[str, Any], crash: list[int], *, state: Any = None) -> Any:
        state = state or []
        while len(state) < 4:
            state.append(float(next(iter(streams.values())).random()))
            if len(state) == 2 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state

    f = checkpointed(store=memory_url, ignore=["crash", "streams"])(body)
    with pytest.raises(RuntimeError):
        f({"a": np.random.default_rng(1)}, [1])
    with caplog.at_level(logging.WARNING, logger="resumable"):
        f({"b": np.random.default_rng(1)}, [])
    assert "streams['b']" in caplog.text and "bit-identical" in caplog.text


@pytest.mark.parametrize("signed", [False, True])
def test_a_damaged_identity_record_is_refused_not_ignored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signed: bool) -> None:
    """Under a fixed run id the identity record is what tells another call's arguments
    apart. A damaged one was logged and ignored, so a call with other arguments resumed
    the run and returned its result (review 106); signed, an altered record was ignored
    too. It is refused now, naming the record, for this call and for the run's own (whose
    arguments cannot be checked either), until the record is deleted or the run is."""
    from resumable import CheckpointCorruptError, CheckpointTamperedError

    if signed:
        monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "k" * 32)
    else:
        monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    count = counter(store=str(tmp_path), run_id="job-1")
    assert count(4) == 4
    with pytest.raises(RunMismatchError):
        count(5)
    record = tmp_path / "job-1" / "identity"
    if signed:  # another call's record, signed with another key (a forgery)
        monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "f" * 32)
        assert counter(store=str(tmp_path / "other"), run_id="job-1")(5) == 5
        monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "k" * 32)
        record.write_bytes((tmp_path / "other" / "job-1" / "identity").read_bytes())
    else:  # a bit flip
        data = bytearray(record.read_bytes())
        data[-5] ^= 1
        record.write_bytes(bytes(data))
    for n in (5, 4):
        with pytest.raises(CheckpointCorruptError) as err:
            count(n)
        message = str(err.value)
        assert "job-1/identity" in message and "resumable rm" in message, message
        assert isinstance(err.value, CheckpointTamperedError) == signed, message
    record.unlink()  # what the message offers when the call is the run's own
    assert count(4) == 4


# -- review 106: values that differ, but had one run id (encoding 4) --------------------


def _factory_dataclass(scale: int) -> Any:
    @dataclasses.dataclass
    class Cfg:
        x: int

        def value(self) -> int:
            return self.x * scale

    return Cfg(5)


def _factory_list(scale: int) -> Any:
    class Genome(list):  # type: ignore[type-arg]
        def value(self) -> list[int]:
            return [v * scale for v in self]

    return Genome([1, 2])


def _factory_enum(value: int) -> Any:
    class Mode(enum.Enum):
        FAST = value

    return Mode.FAST


class _Perm(enum.IntFlag):
    R = 1
    W = 2


class _Tagged(str):
    weight = 0


def _tagged(weight: int) -> _Tagged:
    t = _Tagged("cfg")
    t.weight = weight
    return t


class _Half(float):
    pass


_Point = collections.namedtuple("_Point", "x y")


def _permuted() -> tuple[Any, Any]:
    x = np.random.default_rng(1).random((20, 3, 30)).transpose(1, 0, 2)
    return x, np.ascontiguousarray(x)


@pytest.mark.parametrize("case", [
    "dataclass made at run time", "list subclass made at run time",
    "enum made at run time", "IntFlag values without a name", "str subclass attributes",
    "float subclass", "set subclass",
    "permuted axes", "reversed view",
])
def test_values_that_differ_have_other_run_ids(case: str) -> None:
    """Each pair differs in what a body computes from it (review 106 ran the second call
    and got the first's stored result); encoding 3 gave each pair one run id."""
    @checkpointed(store="memory://review106")
    def f(arg: Any, *, state: Any = None) -> Any:
        yield 0
        return 0

    class Tags(set):  # type: ignore[type-arg]
        pass

    a, b = {
        "dataclass made at run time": lambda: (_factory_dataclass(1), _factory_dataclass(2)),
        "list subclass made at run time": lambda: (_factory_list(1), _factory_list(2)),
        "enum made at run time": lambda: (_factory_enum(1), _factory_enum(2)),
        "IntFlag values without a name": lambda: (_Perm(8), _Perm(16)),
        "str subclass attributes": lambda: (_tagged(1), _tagged(2)),
        "float subclass": lambda: (_Half(0.5), 0.5),
        "set subclass": lambda: (Tags({1}), {1}),
        "permuted axes": _permuted,
        "reversed view": lambda: (np.arange(5.0)[::-1], np.arange(5.0)[::-1].copy()),
    }[case]()
    assert f.run_id(a) != f.run_id(b)
    assert f.run_id(a) == f.run_id(a)


def test_encoding_4_keeps_the_ids_of_the_values_it_did_not_change() -> None:
    """Plain values, enums and namedtuples importable by name, C and F arrays, strided
    1-d views keep the run ids encoding 3 gave them: only the kinds above moved. (Two
    modules' namedtuples of one qualname, holding equal values, still share a run: their
    class is written by qualname, and adding the module would move every namedtuple's
    and every DEAP individual's run.)"""
    from resumable._runid import encode_value_as

    for value in (1, 0.5, "s", [1, (2, 3)], {"a": {1, 2}}, frozenset({3}), _Perm.R,
                  _Perm.R | _Perm.W, logging.INFO, _Point(1, 2), np.float64(0.5),
                  np.arange(6.0).reshape(2, 3), np.asfortranarray(np.ones((2, 3))),
                  np.arange(10.0)[::2], collections.OrderedDict(a=1), Path("/x")):
        assert encode_value_as(value, "v", 3) == encode_value_as(value, "v", 4), value


@pytest.mark.parametrize("kind", ["Generator", "BitGenerator", "RandomState", "Random"])
@pytest.mark.parametrize("how", ["resume", "restart"])
def test_an_rng_argument_also_in_the_state_stays_one_generator(
        memory_url: str, kind: str, how: str) -> None:
    """``state = {"rng": rng}``: one generator under two names. After a resume the state's
    copy and the argument (restored in place) were two generators that drew the same
    numbers (review 106). The state's one is the argument again, at the saved position."""
    def make() -> Any:
        return {"Generator": lambda: np.random.default_rng(1),
                "BitGenerator": lambda: np.random.PCG64(1),
                "RandomState": lambda: np.random.RandomState(1),
                "Random": lambda: random.Random(1)}[kind]()

    def draw(rng: Any) -> float:
        return float(rng.random_raw()) if kind == "BitGenerator" else float(rng.random())

    def body(rng: Any, crash: list[int], *, state: Any = None) -> Any:
        if state is None:
            state = {"i": 0, "rng": rng, "draws": []}
        while state["i"] < 4:
            state["draws"].append((draw(rng), draw(state["rng"]), state["rng"] is rng))
            state["i"] += 1
            if state["i"] == 3 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state["draws"]

    reference = _resumed_as_uninterrupted(memory_url, body, lambda: (make(),), how=how)
    assert all(same for _, _, same in reference)


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=60, max_size=200),
    st.lists(st.integers(min_value=-(2**200), max_value=2**200), min_size=60, max_size=200),
    st.lists(st.one_of(st.floats(), st.integers(), st.booleans()), min_size=60,
             max_size=120)))
def test_lists_of_numbers_encode_in_bulk_to_the_same_bytes(items: list[Any]) -> None:
    """A list of floats only or ints only is encoded at once (review 103: 4 us a float);
    its bytes are those of the item-by-item encoding, so no run id moves."""
    from resumable import _runid

    bulk = _runid.encode_value(items, "x")
    before = _runid._BULK
    _runid._BULK = 10**9  # (item by item)
    try:
        assert _runid.encode_value(items, "x") == bulk
    finally:
        _runid._BULK = before
    one_by_one = bytearray()
    for item in items:
        _runid._atom(item, one_by_one)
    for numpy in (np, None):  # (and where numpy was never imported)
        out = bytearray()
        if _runid._bulk(items, out, numpy):
            assert out == one_by_one
        else:
            assert out == b""


def _cfg_class() -> Any:
    @dataclasses.dataclass
    class Cfg:
        a: int = 1

    return Cfg


def test_a_fixed_run_started_under_encoding_3_resumes_under_4(tmp_path: Path) -> None:
    """A run whose identity record was written under encoding 3 (the code before
    0b9cacd) is checked with encoding 3's hashes: an argument that encoding 4 moved (a
    dataclass made at run time) is no difference (review 108: RunMismatchError)."""
    resumes_under_an_older_record(tmp_path, _cfg_class()(), older=3)


def resumes_under_an_older_record(tmp_path: Path, value: Any, older: int) -> None:
    """A run named with run_id= stopped, its identity record rewritten as encoding
    ``older`` wrote it (its hash of ``value``, which encoding ``older + 1`` moved, and its
    version number), then resumed with ``value``: no RunMismatchError."""
    from resumable._identity import _hash
    from resumable._run import Run
    from resumable._runid import ENCODING, encode_value_as

    stop = [2]

    @checkpointed(store=str(tmp_path), run_id="fixed-run", ignore=["stop"])
    def job(value: Any, stop: list[int], *, state: Any = None) -> Any:
        state = state or {"i": 0}
        while state["i"] < 4:
            state["i"] += 1
            yield state
            if state["i"] == stop[0]:
                raise RuntimeError("stop")
        return state["i"]

    with pytest.raises(RuntimeError):
        job(value, stop)
    run = Run(open_store(str(tmp_path)), "fixed-run")
    record = run.read_record("identity", "identity")
    assert record is not None and record["encoding"] == ENCODING
    record["arguments"]["value"] = _hash(encode_value_as(value, "value", older))
    assert record["arguments"]["value"] != _hash(encode_value_as(value, "value", older + 1))
    record["encoding"] = older
    run.write_record("identity", "identity", record)
    stop[0] = 0
    assert job(value, stop) == 4


@pytest.mark.parametrize("where", ["argument", "state too"])
def test_an_rng_arguments_spawned_children_are_not_handed_out_again(
        memory_url: str, where: str) -> None:
    """Generator.spawn() counts its children in the SeedSequence, which the generator's
    state does not hold: a resumed run spawned the same children again (review 108; with
    the RNG in the state too, since 496ba36's aliasing). The count is saved and the
    resumed generator's sequence brought up to it."""
    def body(rng: Any, crash: list[int], *, state: Any = None) -> Any:
        if state is None:
            state = {"i": 0, "draws": []}
            if where == "state too":
                state["rng"] = rng
        while state["i"] < 4:
            spawner = state["rng"] if where == "state too" else rng
            child = spawner.spawn(1)[0]
            state["draws"].append((float(child.random()), float(rng.random())))
            state["i"] += 1
            if state["i"] == 2 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state["draws"]

    reference = _resumed_as_uninterrupted(memory_url, body,
                                          lambda: (np.random.default_rng(3),))
    assert len({d for d, _ in reference}) == 4


@pytest.mark.parametrize("legacy", [False, True], ids=["Generator", "RandomState"])
@pytest.mark.parametrize("case", ["its bit generator", "another Generator on it"])
def test_state_sharing_an_rng_arguments_bit_generator_stays_shared(
        memory_url: str, case: str, legacy: bool) -> None:
    """The state holds the Generator argument's bit generator, or a second Generator on
    it: after a resume it drew from a copy, the same numbers as the argument (review 108).
    It is the argument's bit generator again."""
    def body(rng: Any, crash: list[int], *, state: Any = None) -> Any:
        bitgen = rng._bit_generator if legacy else rng.bit_generator
        if state is None:
            other = (bitgen if case == "its bit generator" else np.random.Generator(bitgen))
            state = {"i": 0, "other": other, "draws": []}
        while state["i"] < 4:
            other = state["other"]
            mine = other if case == "its bit generator" else other.bit_generator
            state["draws"].append((int(bitgen.random_raw()), int(mine.random_raw())))
            state["i"] += 1
            if state["i"] == 2 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state["draws"]

    def make() -> Any:
        return np.random.RandomState(1) if legacy else np.random.default_rng(1)

    _resumed_as_uninterrupted(memory_url, body, lambda: (make(),))


def test_an_ignored_rng_argument_on_another_bit_generator_now_still_resumes(
        memory_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """ignore=["rng"], the state holding it: a call passing a Generator on another kind of
    bit generator could not read the checkpoint any more (review 109: the aliasing raised
    while unpickling); the state keeps its own, with the warning restore() gives."""
    def body(rng: Any, crash: list[int], *, state: Any = None) -> Any:
        state = state or {"i": 0, "rng": rng}
        while state["i"] < 3:
            state["rng"].random()
            state["i"] += 1
            if state["i"] == 2 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state["i"]

    f = checkpointed(store=memory_url, ignore=["crash", "rng"])(body)
    with pytest.raises(RuntimeError):
        f(np.random.Generator(np.random.PCG64(1)), [1])
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert f(np.random.Generator(np.random.MT19937(1)), []) == 3
    assert "bit-identical" in caplog.text


def test_equal_values_of_run_time_classes_that_call_super_have_one_id() -> None:
    """A run-time class whose methods call super() refers to itself; encoding 4's class
    cache reused its first encoding, back-reference depth and all, so equal dicts in
    another insertion order (or sets in another hash order) had other ids (review 109)."""
    from resumable._runid import encode_value

    def make() -> Any:
        class Individual(list):  # type: ignore[type-arg]
            def __init__(self, genes: list[int]) -> None:
                super().__init__(genes)

        return Individual

    Ind = make()
    a = {"best": Ind([1, 2]), "pop": [Ind([1, 2]), Ind([3, 4])]}
    b = {"pop": [Ind([1, 2]), Ind([3, 4])], "best": Ind([1, 2])}
    assert encode_value(a, "x") == encode_value(b, "x")


def test_a_stored_result_holding_the_rng_argument_holds_the_argument(memory_url: str) -> None:
    """A body that returns its state: the call that ran it returns the argument in it; a
    later call returned a copy from the stored result, beside the argument restored in
    place, drawing the same numbers (review 108)."""
    @checkpointed(store=memory_url)
    def body(rng: Any, *, state: Any = None) -> Any:
        state = state or {"i": 0, "rng": rng}
        while state["i"] < 3:
            rng.random()
            state["i"] += 1
            yield state
        return state

    first = random.Random(1)
    assert body(first)["rng"] is first
    again = random.Random(1)
    stored = body(again)
    assert stored["rng"] is again and again.getstate() == first.getstate()


_NO_NUMPY = """
import random, sys
from resumable import checkpointed

@checkpointed(store=sys.argv[1], ignore=["crash"], serializer=sys.argv[2])
def body(rng, crash, *, state=None):
    if state is None:
        state = {"i": 0, "rng": rng, "draws": []}
    while state["i"] < 4:
        state["draws"].append((rng.random(), state["rng"].random()))
        state["i"] += 1
        if state["i"] == 2 and crash:
            crash.clear()
            raise RuntimeError("crash")
        yield state
    return state["draws"]

ref = checkpointed(store=sys.argv[1] + "-ref", serializer=sys.argv[2])(body.__wrapped__)(
    random.Random(1), [])
try:
    body(random.Random(1), [1])
except RuntimeError:
    pass
got = body(random.Random(1), [])
assert "numpy" not in sys.modules, "numpy was imported"
print("same" if got == ref else f"differ: {got} {ref}")
"""


@pytest.mark.parametrize("serializer", ["pickle", "cloudpickle"])
def test_an_rng_argument_in_the_state_without_numpy(tmp_path: Path, serializer: str) -> None:
    """In a process that never imported numpy the state is pickled by pickle's own
    dumps, without the dispatch entries of 496ba36: random.Random came back a copy
    (review 108); with cloudpickle, whose pickler reads its table when it is made, still
    a copy after the first fix (review 109)."""
    out = subprocess.run([sys.executable, "-c", _NO_NUMPY, str(tmp_path / "s"), serializer],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert out.stdout.strip() == "same", out.stdout + out.stderr


def test_a_run_time_flag_members_id_does_not_change_with_the_combinations_made(
        memory_url: str) -> None:
    """enum caches each Flag combination computed in the class's _value2member_map_: the
    class, encoded by value since encoding 4, took another id once a combination had been
    made (review 108: a sweep's restarted process skipped the completed call that made it,
    and the next run started over)."""
    def make() -> Any:
        class Perm(enum.Flag):
            R = 1
            W = 2

        return Perm

    Perm = make()

    @checkpointed(store=memory_url)
    def job(p: Any, *, state: Any = None) -> Any:
        yield 0
        return 0

    before = job.run_id(Perm.W)
    assert (Perm.R | Perm.W).value == 3  # (a combination: cached in the class)
    assert job.run_id(Perm.W) == before
    assert job.run_id(make().W) == before


def test_generators_that_spawned_other_counts_are_other_runs(memory_url: str) -> None:
    """default_rng(1) and default_rng(1) after .spawn(5) hand out other children: one run
    id gave the second call the first's stored result (review 109). The count is part of
    a generator's identity when it is not 0 (so unspawned generators keep their ids)."""
    from resumable._runid import encode_value_as

    @checkpointed(store=memory_url)
    def body(rng: Any, *, state: Any = None) -> Any:
        yield 0
        return 0

    spawned = np.random.default_rng(1)
    spawned.spawn(5)
    assert body.run_id(spawned) != body.run_id(np.random.default_rng(1))
    fresh = np.random.default_rng(1)
    assert encode_value_as(fresh, "r", 3) == encode_value_as(fresh, "r", 4)


class _TagStr(str):
    pass


def test_a_completed_run_of_encoding_3_returns_its_result_for_the_same_ignored_value(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The attempt record's ignored hashes were made by the encoding of the version that
    wrote it; a value encoding 4 moved (a str subclass) read as a change, and the stored
    result was not returned (review 109). Records say their encoding now, and are
    compared under it. One without it (from before the field) is extended, as before: its
    encoding is not known, and trying each older one would take values they took as equal
    (np.float32(0.5) and 0.5) for no change; the log says why."""
    from resumable._identity import _hash
    from resumable._run import Run
    from resumable._runid import encode_value_as

    calls: list[int] = []

    @checkpointed(store=str(tmp_path), ignore=("tag",))
    def body(n: int, tag: Any, *, state: Any = None) -> Any:
        state = state or {"i": 0}
        while state["i"] < n:
            state["i"] += 1
            calls.append(state["i"])
            yield state
        return ("done", state["i"], str(tag))

    assert body(3, _TagStr("blue")) == ("done", 3, "blue")
    run = Run(open_store(str(tmp_path)), body.run_id(3, _TagStr("blue")))
    name = next(k.rsplit("/", 1)[1] for k in run.store.list(f"{run.run_id}/call-"))
    record = run.read_record(name, "call")
    assert record is not None
    # As an attempt of encoding 3 that named it wrote it (encoding 5 will read 4's so)
    record["ignored"]["tag"] = _hash(encode_value_as(_TagStr("blue"), "tag", 3))
    record["encoding"] = 3
    run.write_record(name, "call", record)
    calls.clear()
    with caplog.at_level(logging.INFO, logger="resumable"):
        assert body(3, _TagStr("blue")) == ("done", 3, "blue")
    assert "extending" not in caplog.text, caplog.text
    # Without the field: extended (from the last checkpoint: no generation runs again)
    record.pop("encoding")
    run.write_record(name, "call", record)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="resumable"):
        assert body(3, _TagStr("blue")) == ("done", 3, "blue")
    assert "hashed otherwise by the older version" in caplog.text, caplog.text
    assert calls == []


def _run_time_classes() -> dict[str, Any]:
    class Fitness:
        def __init__(self, v: float) -> None:
            self.v = v

    Fitness.ZERO = Fitness(0.0)  # type: ignore[attr-defined]  # (an instance of itself)

    class Individual(list):  # type: ignore[type-arg]
        def __init__(self, genes: list[float]) -> None:
            super().__init__(genes)

    @dataclasses.dataclass(frozen=True)
    class Config:
        rate: float

    class Mode(enum.Enum):
        FAST = 1
        SLOW = 2

    return {"Fitness": Fitness, "Individual": Individual, "Config": Config, "Mode": Mode}


def test_the_class_cache_gives_the_bytes_of_no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Encoding 4 keeps a class's encoding per depth to reuse it (reviews 108-110: 22x the
    time otherwise); a reused encoding must be the one made there without the cache, or
    the bytes depend on which occurrence came first (a set's order, the hash seed). Here
    with a class attribute holding an instance of the class (met first through another
    instance, then through that one), super(), a frozen dataclass and an enum."""
    from resumable import _runid

    c = _run_time_classes()
    F, Ind = c["Fitness"], c["Individual"]
    values = [
        {"a": F(1.0), "b": F.ZERO}, {"b": F.ZERO, "a": F(1.0)}, [F.ZERO, F(1.0), F.ZERO],
        {"pop": [Ind([1.0]), Ind([2.0])], "best": Ind([1.0]), "fit": [F(2.0), F.ZERO]},
        [c["Config"](0.1), c["Config"](0.2), {"m": c["Mode"].FAST}, c["Mode"].SLOW],
        [[F(3.0), [F.ZERO, [F(4.0)]]], F.ZERO],
    ]
    cached = [_runid.encode_value(v, "x") for v in values]
    assert cached[0] == cached[1]  # (equal dicts)
    monkeypatch.setattr(_runid._Encoder, "_cached", lambda self, cls, depth: None)
    assert [_runid.encode_value(v, "x") for v in values] == cached


class _SaltedSequence(np.random.SeedSequence):  # type: ignore[misc]
    """A SeedSequence subclass with its own entropy mixing."""

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> Any:
        return super().generate_state(n_words, dtype) ^ np.asarray(0x5A5A, dtype=dtype)


@pytest.mark.parametrize("case", ["sequence held by the program too", "sequence subclass"])
def test_setting_the_spawned_count_keeps_the_programs_sequence(
        memory_url: str, case: str) -> None:
    """The count set on resume must go on the sequence the generator has: replacing it
    detached a SeedSequence the program also holds (``default_rng(ss)``, both passed in),
    which then handed out children the run had used, and turned a subclass into a plain
    SeedSequence, whose children differ (review 110 of cf22a61)."""
    def make() -> tuple[Any, Any]:
        ss = (np.random.SeedSequence(3) if case.startswith("sequence held")
              else _SaltedSequence(3))
        return np.random.default_rng(ss), ss

    def body(rng: Any, ss: Any, crash: list[int], *, state: Any = None) -> Any:
        state = state or {"i": 0, "draws": []}
        while state["i"] < 4:
            child = rng.spawn(1)[0]
            state["draws"].append((float(child.random()), ss.spawn(1)[0].spawn_key))
            state["i"] += 1
            if state["i"] == 2 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state["draws"], ss.spawn(1)[0].spawn_key

    _resumed_as_uninterrupted(memory_url, body, make, ignore=("crash", "ss"))


def test_a_refused_randomstate_restore_leaves_its_cached_normal(memory_url: str) -> None:
    """ignore=["rng"], a RandomState on another bit generator now: the restore is refused
    and the RNG "continues from its current state", but numpy's set_state had written
    the saved cached normal first (review 110)."""
    def body(rng: Any, crash: list[int], *, state: Any = None) -> Any:
        state = state or {"i": 0, "draws": []}
        while state["i"] < 3:
            state["draws"].append(float(rng.standard_normal()))
            state["i"] += 1
            if state["i"] == 2 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state["draws"]

    f = checkpointed(store=memory_url, ignore=["rng", "crash"])(body)
    with pytest.raises(RuntimeError):
        f(np.random.RandomState(np.random.PCG64(1)), [1])
    rs = np.random.RandomState(np.random.MT19937(2))
    rs.standard_normal()
    twin = np.random.RandomState(np.random.MT19937(2))
    twin.standard_normal()
    draws = f(rs, [])  # (resumed from the checkpoint of the first draw: two draws more)
    assert draws[1:] == [float(twin.standard_normal()) for _ in range(2)]


class _SaltSequence(np.random.SeedSequence):  # type: ignore[misc]
    """A SeedSequence subclass with an attribute of its own, which its children get."""

    def __init__(self, entropy: Any = None, *, spawn_key: Any = (), pool_size: int = 4,
                 n_children_spawned: int = 0, salt: int = 0) -> None:
        super().__init__(entropy, spawn_key=spawn_key, pool_size=pool_size,
                         n_children_spawned=n_children_spawned)
        self.salt = salt

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> Any:
        return super().generate_state(n_words, dtype) ^ np.asarray(self.salt, dtype=dtype)

    def spawn(self, n: int) -> list[Any]:
        return [_SaltSequence(k.entropy, spawn_key=k.spawn_key, pool_size=k.pool_size,
                              salt=self.salt) for k in super().spawn(n)]


class _SlotSequence(np.random.SeedSequence):  # type: ignore[misc]
    """A SeedSequence subclass keeping its attribute in a slot."""

    __slots__ = ("salt",)

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> Any:
        return super().generate_state(n_words, dtype) ^ np.asarray(self.salt, dtype=dtype)

    def spawn(self, n: int) -> list[Any]:
        kids = []
        for k in super().spawn(n):
            kid = _SlotSequence(k.entropy, spawn_key=k.spawn_key, pool_size=k.pool_size)
            kid.salt = self.salt
            kids.append(kid)
        return kids


class _PrivateSlotSequence(np.random.SeedSequence):  # type: ignore[misc]
    """A SeedSequence subclass with a private slot (stored as _PrivateSlotSequence__salt)."""

    __slots__ = ("__salt",)

    def __init__(self, entropy: Any = None, *, salt: int = 0, **kwargs: Any) -> None:
        super().__init__(entropy, **kwargs)
        self.__salt = salt

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> Any:
        return super().generate_state(n_words, dtype) ^ np.asarray(self.__salt, dtype=dtype)

    def spawn(self, n: int) -> list[Any]:
        return [_PrivateSlotSequence(k.entropy, spawn_key=k.spawn_key, salt=self.__salt)
                for k in super().spawn(n)]


class _FrozenSequence(np.random.SeedSequence):  # type: ignore[misc]
    """A SeedSequence subclass whose __setattr__ refuses (attributes set in __init__)."""

    def __init__(self, entropy: Any = None, *, salt: int = 0, **kwargs: Any) -> None:
        super().__init__(entropy, **kwargs)
        object.__setattr__(self, "salt", salt)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> Any:
        return super().generate_state(n_words, dtype) ^ np.asarray(self.salt, dtype=dtype)

    def spawn(self, n: int) -> list[Any]:
        return [_FrozenSequence(k.entropy, spawn_key=k.spawn_key, salt=self.salt)
                for k in super().spawn(n)]


@pytest.mark.parametrize("case", ["two generators on one sequence", "sequence subclass",
                                  "sequence subclass with slots",
                                  "sequence subclass with a private slot",
                                  "frozen sequence subclass",
                                  "two generators on one sequence, the state holding one"])
def test_a_restart_sets_the_spawned_count_back_keeping_shared_and_subclass_sequences(
        memory_url: str, case: str) -> None:
    """restarts=: the generators spawned past the checkpoint, and the count goes back.
    Each got a new plain SeedSequence of its own: two generators on one sequence then
    handed out the same children, and a subclass lost its attributes (review 111); with
    the state holding one of the two, the load and the restore made a copy each, and a
    subclass's slots were left out (review 112); a private slot still was, and a frozen
    subclass refused the copy's attributes (review 113)."""
    def make() -> tuple[Any, Any]:
        if case == "sequence subclass":
            seq = _SaltSequence(3, salt=0x5A5A)
            return np.random.default_rng(seq), np.random.default_rng(7)
        if case == "sequence subclass with slots":
            slotted = _SlotSequence(3)
            slotted.salt = 0x5A5A
            return np.random.default_rng(slotted), np.random.default_rng(7)
        if case == "sequence subclass with a private slot":
            return (np.random.default_rng(_PrivateSlotSequence(3, salt=0x5A5A)),
                    np.random.default_rng(7))
        if case == "frozen sequence subclass":
            return (np.random.default_rng(_FrozenSequence(3, salt=0x5A5A)),
                    np.random.default_rng(7))
        seq = np.random.SeedSequence(3)
        return np.random.default_rng(seq), np.random.default_rng(seq)

    def body(a: Any, b: Any, crash: list[int], *, state: Any = None) -> Any:
        if state is None and case.endswith("holding one"):
            state = {"i": 0, "draws": [], "a": a}
        state = state or {"i": 0, "draws": []}
        while state["i"] < 3:
            state["draws"].append((float(a.spawn(1)[0].random()),
                                   float(b.spawn(1)[0].random())))
            state["i"] += 1
            if state["i"] == 2 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state["draws"]

    _resumed_as_uninterrupted(memory_url, body, make, how="restart")


class _PrivateWalker:
    """An argument holding its generator in a private slot (stored as _PrivateWalker__rng)."""

    __slots__ = ("__rng",)

    def __init__(self, seed: int) -> None:
        self.__rng = np.random.default_rng(seed)

    def step(self) -> float:
        return float(self.__rng.random())


def test_an_rng_in_an_arguments_private_slot_is_restored(memory_url: str) -> None:
    """The search for RNG objects read a private slot under its plain name, found nothing,
    and the resumed run drew from a fresh generator (review 113)."""
    def body(walker: Any, crash: list[int], *, state: Any = None) -> Any:
        state = state or []
        while len(state) < 4:
            state.append(walker.step())
            if len(state) == 2 and crash:
                crash.clear()
                raise RuntimeError("crash")
            yield state
        return state

    assert [p for p, _ in _rng_find({"w": _PrivateWalker(1)})] == ["w._PrivateWalker__rng"]
    _resumed_as_uninterrupted(memory_url, body, lambda: (_PrivateWalker(1),))


def _rng_find(arguments: dict[str, Any]) -> Any:
    from resumable import _rng

    return _rng.find(arguments)
