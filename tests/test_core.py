"""The decorator's contract: arguments, run identity, results, helpers, restarts."""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resumable import (
    CheckpointCorruptError,
    ConfigurationError,
    SerializationError,
    checkpointed,
)
from resumable._run import Run
from resumable.stores import open_store
from tests.forking import in_child
from tests.toy import Crash, Faults, make_evolve, reference


def names(store_url: str, run_id: str) -> list[str]:
    return Run(open_store(store_url), run_id).checkpoint_names()


# -- decoration time ---------------------------------------------------------------------


def test_plain_function_is_rejected_naming_it() -> None:
    """A non-generator function fails at decoration time with its name in the message."""
    with pytest.raises(TypeError, match="not_a_generator"):

        @checkpointed()
        def not_a_generator(*, state: Any = None) -> int:
            return 1


def test_the_decorator_without_parentheses_says_to_add_them() -> None:
    """@checkpointed with no parentheses was a bare 'takes 0 positional arguments'."""
    def gen(*, state: Any = None) -> Any:
        yield state

    with pytest.raises(TypeError, match=r"@checkpointed\(\).*gen"):
        checkpointed(gen)  # type: ignore[call-arg]


def test_an_option_given_by_position_says_options_are_keywords() -> None:
    """checkpointed("generation") said to add parentheses it had; checkpointed(None) was
    taken; the signature showed the positional-only parameter behind these messages."""
    hints = {"generation": "@checkpointed(every='generation')", 5: "@checkpointed(every=5)",
             "./runs": "@checkpointed(store='./runs')",
             None: "@checkpointed() with no arguments takes the defaults"}
    for value, hint in hints.items():
        with pytest.raises(TypeError, match=r"options are keywords") as info:
            checkpointed(value)  # type: ignore[call-overload, arg-type]
        assert hint in str(info.value), info.value
        if value is not None:  # what it suggests is accepted (review 57: every=None was not)
            key = "store" if value == "./runs" else "every"
            checkpointed(**{key: value})
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY
               for p in inspect.signature(checkpointed).parameters.values())


def test_missing_state_parameter_is_rejected() -> None:
    """A generator without the state keyword fails at decoration time."""
    with pytest.raises(TypeError, match=r"no_state.*'state'"):

        @checkpointed()
        def no_state(n: int) -> Any:
            yield n


def test_custom_state_arg_name() -> None:
    """state_arg names the parameter that receives the saved state."""

    @checkpointed(state_arg="ckpt", store="memory://custom-state-arg")
    def f(n: int, *, ckpt: Any = None) -> Any:
        ckpt = ckpt or 0
        while ckpt < n:
            ckpt += 1
            yield ckpt

    assert f(3) == 3


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"every": "sometimes"}, "every='sometimes'"),
        ({"every": 0}, "positive"),
        ({"every": -2.0}, "positive"),
        ({"keep": 0}, "keep must be"),
        ({"restarts": -1}, "restarts must be"),
        ({"restart_on": "ValueError"}, "restart_on"),
        ({"serializer": "yaml"}, "unknown serializer 'yaml'"),
        ({"run_id": "../escape"}, "path separator"),
        ({"store": "s3:/bucket"}, "malformed"),
        ({"store": "ftp://host/x"}, "unknown scheme ftp"),
        ({"signing_key": "short"}, "at least 16 bytes"),
    ],
)
def test_bad_options_fail_at_decoration(options: dict[str, Any], fragment: str) -> None:
    """Every bad option is a ConfigurationError (a ValueError) naming function and value."""
    with pytest.raises(ConfigurationError, match=fragment) as info:

        @checkpointed(**options)
        def configured(*, state: Any = None) -> Any:
            yield state

    assert "configured" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "every", ["generation", 1, 5, "30s", "5m", "1.5h", 12.5, timedelta(minutes=2)]
)
def test_every_accepts_all_documented_forms(every: Any) -> None:
    """generation, n, duration strings, float seconds and timedelta parse to the right policy."""
    from resumable import EveryN, EverySeconds
    from resumable._policy import parse_every

    expected = {
        "generation": EveryN(1), 1: EveryN(1), 5: EveryN(5), "30s": EverySeconds(30.0),
        "5m": EverySeconds(300.0), "1.5h": EverySeconds(5400.0), 12.5: EverySeconds(12.5),
    }.get(every, EverySeconds(120.0))
    assert parse_every(every) == expected

    @checkpointed(every=every)
    def f(*, state: Any = None) -> Any:
        yield state


# -- running, results, helpers ----------------------------------------------------------


def test_returns_the_generator_return_value(memory_url: str) -> None:
    """An uninterrupted call returns what the body returns, same as without the library."""
    random.seed(0)
    np.random.seed(0)
    evolve = make_evolve(Faults(), store=memory_url)
    assert evolve(12) == reference(12)


def test_none_return_gives_last_yielded_state(memory_url: str) -> None:
    """A body that returns None gives its last yielded state."""

    @checkpointed(store=memory_url)
    def count(n: int, *, state: Any = None) -> Any:
        state = state or {"i": 0}
        while state["i"] < n:
            state = {"i": state["i"] + 1}
            yield state

    assert count(4) == {"i": 4}


def test_completed_run_returns_stored_result_without_running(memory_url: str) -> None:
    """Calling a completed run again returns its result and never enters the body."""
    faults = Faults()
    evolve = make_evolve(faults, store=memory_url)
    first = evolve(6)
    entries = len(faults.entered)
    assert evolve(6) == first
    assert len(faults.entered) == entries
    assert list(evolve.iter(6)) == []


def test_iter_yields_new_states_and_resumes(memory_url: str) -> None:
    """f.iter yields each new state; after a crash it yields only the remaining ones."""
    faults = Faults(crash_at={4})
    evolve = make_evolve(faults, store=memory_url)
    seen = []
    with pytest.raises(Crash):
        for s in evolve.iter(6):
            seen.append(s["generation"])
    assert seen == [1, 2, 3]
    assert [s["generation"] for s in evolve.iter(6)] == [4, 5, 6]


def test_iter_stopped_early_keeps_what_it_saw(memory_url: str) -> None:
    """A consumer that stops iterating early leaves its last state saved."""
    evolve = make_evolve(Faults(), store=memory_url, every=100)
    it = evolve.iter(10)
    for s in it:
        if s["generation"] == 3:
            break
    it.close()
    latest = evolve.latest(10)
    assert latest is not None and latest.step == 3


def test_latest_and_reset(memory_url: str) -> None:
    """latest() describes the newest checkpoint; reset() deletes everything of the run."""
    evolve = make_evolve(Faults(crash_at={5}), store=memory_url)
    assert evolve.latest(8) is None
    with pytest.raises(Crash):
        evolve(8)
    cp = evolve.latest(8)
    assert cp is not None
    assert cp.step == 4 and cp.state["generation"] == 4
    assert cp.created.tzinfo is not None
    assert cp.key.startswith(evolve.run_id(8) + "/ckpt-")
    evolve.reset(8)
    assert evolve.latest(8) is None
    assert open_store(memory_url).list(evolve.run_id(8) + "/") == []


@pytest.mark.parametrize(("every", "saved_step"), [("generation", 3), (2, 2), (1000, None)])
def test_snapshot_is_taken_at_the_yield(memory_url: str, every: Any, saved_step: int | None
                                        ) -> None:
    """The body may change the yielded object right after the yield; the save holds the yield.

    Only due yields are snapshotted: after the crash the last due state stands.
    """

    @checkpointed(store=memory_url, every=every)
    def mutate(n: int, *, state: Any = None) -> Any:
        state = state if state is not None else {"i": 0, "arr": np.zeros(4)}
        while state["i"] < n:
            state["i"] += 1
            state["arr"][:] = state["i"]
            yield state
            state["arr"][:] = -1  # after the yield: must not leak into the checkpoint
            if state["i"] == 3:
                raise Crash("after yield 3")

    with pytest.raises(Crash):
        mutate(5)
    cp = mutate.latest(5)
    if saved_step is None:
        assert cp is None
        return
    assert cp is not None and cp.step == saved_step
    assert cp.state["i"] == saved_step and cp.state["arr"].tolist() == [saved_step] * 4
    cp.state["arr"][0] = 7.0  # arrays of a loaded checkpoint are writable


# -- run identity -------------------------------------------------------------------------


def test_equivalent_calls_share_a_run() -> None:
    """f(10), f(10, 12) and f(10, pop_size=12) with default 12 map to one run id."""

    @checkpointed()
    def f(gens: int, pop_size: int = 12, *, state: Any = None) -> Any:
        yield state

    ids = {f.run_id(10), f.run_id(10, 12), f.run_id(10, pop_size=12), f.run_id(gens=10)}
    assert len(ids) == 1
    assert f.run_id(10, 13) not in ids
    (rid,) = ids
    assert rid.startswith(f"{__name__}.test_equivalent_calls_share_a_run.")
    assert len(rid.rsplit("-", 1)[1]) == 12


_HASH_SCRIPT = """
import sys
from resumable import checkpointed
@checkpointed()
def f(a, b=None, *, state=None):
    yield state
print(f.run_id({"x", "y", "z"}, {"k": (1.5, b"raw", None), "j": frozenset({3, 4})}))
"""


def test_run_id_is_identical_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    """The run id does not depend on Python's hash() randomisation."""
    script = tmp_path / "runid_probe.py"
    script.write_text(_HASH_SCRIPT)
    outs = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                             text=True, check=True, cwd=tmp_path)
        outs.add(out.stdout.strip())
    assert len(outs) == 1, outs


def test_env_run_id_and_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """$RESUMABLE_RUN_ID and $RESUMABLE_STORE apply when the arguments are not given."""
    monkeypatch.setenv("RESUMABLE_RUN_ID", "job-7")
    monkeypatch.setenv("RESUMABLE_STORE", str(tmp_path / "store"))
    evolve = make_evolve(Faults())
    assert evolve.run_id(3) == "job-7"
    evolve(3)
    assert (tmp_path / "store" / "job-7" / "result").is_file()


def test_default_store_is_dot_resumable() -> None:
    """Without store or $RESUMABLE_STORE, runs go to ./.resumable."""
    evolve = make_evolve(Faults())
    evolve(2)
    assert (Path(".resumable") / evolve.run_id(2) / "result").is_file()


@pytest.mark.parametrize("bad", ["a/b", "..", "x/../y", "tab\there", "x" * 201, ".hidden"])
def test_bad_env_run_id_is_rejected(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    """Unsafe run ids from the environment are rejected with a clear error, not rewritten."""
    monkeypatch.setenv("RESUMABLE_RUN_ID", bad)
    evolve = make_evolve(Faults(), store="memory://bad-env")
    with pytest.raises(ConfigurationError, match="RESUMABLE_RUN_ID"):
        evolve(2)


@pytest.mark.parametrize("bad", ["nul\x00", "a/b", "..", "x" * 201])
def test_bad_run_id_argument_is_rejected(bad: str) -> None:
    """run_id= is validated at decoration time."""
    with pytest.raises(ConfigurationError, match="run_id"):

        @checkpointed(run_id=bad)
        def f(*, state: Any = None) -> Any:
            yield state


def test_unhashable_argument_asks_for_run_id(memory_url: str) -> None:
    """An argument with no stable value gives an error that says to pass run_id."""

    @checkpointed(store=memory_url)
    def f(obj: Any, *, state: Any = None) -> Any:
        yield 1

    with pytest.raises(ConfigurationError, match="run_id"):
        f(object())


# -- every, keep --------------------------------------------------------------------------


def test_every_n_follows_the_global_step_across_a_resume(memory_url: str) -> None:
    """every=3 saves only steps 3, 6, 9 (plus the final state), across a resume.

    Only due yields are snapshotted, so when the body raises the last due state stands.
    At the return the final state, 10, is saved as the body left it, marked final (the
    body may have run on after its last yield, review 115: no resume starts from it).
    Uploads coalesce (a waiting snapshot is replaced by a newer one), so the test checks
    that nothing off the schedule is written, not that every scheduled step survives.
    """
    evolve = make_evolve(Faults(crash_at={5}), store=memory_url, every=3, keep=None)
    with pytest.raises(Crash):
        evolve(10)
    steps = [int(n.rsplit("-", 1)[1]) for n in names(memory_url, evolve.run_id(10))]
    assert steps == [3]  # the last due state; step 4 was never snapshotted
    evolve(10)
    steps = [int(n.rsplit("-", 1)[1]) for n in names(memory_url, evolve.run_id(10))]
    assert steps[-1] == 10
    assert set(steps) <= {3, 6, 9, 10}
    latest = evolve.latest(10)
    assert latest is not None and latest.step == 10 and latest.final


def test_duration_every_saves_only_at_the_end_when_long(memory_url: str) -> None:
    """every='1h' on a short run saves just the final state, and its result."""
    evolve = make_evolve(Faults(), store=memory_url, every="1h", keep=None)
    first = evolve(5)
    steps = [int(n.rsplit("-", 1)[1]) for n in names(memory_url, evolve.run_id(5))]
    assert steps == [5]
    assert evolve(5) == first  # the stored result


@pytest.mark.parametrize(
    ("keep", "expected"), [(1, [7]), (2, [6, 7]), (3, [5, 6, 7]), (None, [1, 2, 3, 4, 5, 6, 7])]
)
def test_retention(
    memory_url: str, keep: int | None, expected: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """keep=N leaves exactly the newest N checkpoints; None keeps all."""
    monkeypatch.setenv("RESUMABLE_SYNC", "1")  # every generation saved: nothing coalesced
    evolve = make_evolve(Faults(), store=memory_url, keep=keep)
    evolve(7)
    kept = [int(n.rsplit("-", 1)[1]) for n in names(memory_url, evolve.run_id(7))]
    assert kept == expected


# -- restarts -----------------------------------------------------------------------------


def test_restarts_retry_a_failing_generation_in_process(memory_url: str) -> None:
    """restarts=2 survives two failures of one generation and gives the reference result."""
    random.seed(0)
    np.random.seed(0)
    faults = Faults(crash_at={4})
    evolve = make_evolve(faults, store=memory_url, restarts=2)

    # crash generation 4 twice: re-arm the crash on the first retry
    original = faults.crash_at
    rearm = [True]

    class Rearming(set[int]):
        def discard(self, g: int) -> None:
            if rearm and rearm.pop():
                return  # keep the crash armed once more
            super().discard(g)

    faults.crash_at = Rearming(original)
    assert evolve(8) == reference(8)
    assert faults.entered == [0, 3, 3]


def test_restarts_exhausted_propagates(memory_url: str) -> None:
    """With restarts=1 a generation that fails twice raises; state up to it is saved."""

    @checkpointed(store=memory_url, restarts=1)
    def always_fails(*, state: Any = None) -> Any:
        attempts.append(state)
        if state is None:
            yield 1
        raise Crash("generation 2 always fails")

    attempts: list[Any] = []
    with pytest.raises(Crash):
        always_fails()
    assert attempts == [None, 1]
    cp = always_fails.latest()
    assert cp is not None and cp.state == 1


def test_restart_count_resets_after_a_completed_generation(memory_url: str) -> None:
    """restarts counts per generation: one failure in each of many generations is fine."""
    random.seed(0)
    np.random.seed(0)
    faults = Faults(crash_at={2, 4, 6, 8})
    evolve = make_evolve(faults, store=memory_url, restarts=1)
    assert evolve(9) == reference(9)
    assert faults.entered == [0, 1, 3, 5, 7]


def test_restart_on_filters_exception_types(memory_url: str) -> None:
    """Exceptions outside restart_on propagate at once."""
    faults = Faults(crash_at={2})
    evolve = make_evolve(faults, store=memory_url, restarts=5, restart_on=KeyError)
    with pytest.raises(Crash):
        evolve(4)
    assert faults.entered == [0]


# -- serializers --------------------------------------------------------------------------


def test_unpicklable_state_names_the_type_and_suggests_cloudpickle(memory_url: str) -> None:
    """A lambda in the state: SerializationError names the path and suggests cloudpickle."""

    @checkpointed(store=memory_url)
    def f(*, state: Any = None) -> Any:
        yield {"ok": 1, "fitness": lambda x: x * 2}

    with pytest.raises(SerializationError) as info:
        f()
    message = str(info.value)
    assert "['fitness']" in message and "function" in message
    assert "serializer='cloudpickle'" in message


def test_cloudpickle_is_not_suggested_for_what_it_brings_back_as_another_type(
        memory_url: str) -> None:
    """A memoryview: cloudpickle pickles it, as bytes, which are neither writable nor a
    view of the bytearray any more; the hint suggested it all the same (review 106)."""

    @checkpointed(store=memory_url)
    def f(*, state: Any = None) -> Any:
        buf = bytearray(8)
        yield {"buf": buf, "view": memoryview(buf)}

    with pytest.raises(SerializationError) as info:
        f()
    message = str(info.value)
    assert "['view']" in message and "memoryview" in message, message
    assert "serializer='cloudpickle'" not in message, message


def test_cloudpickle_handles_lambdas(memory_url: str) -> None:
    """serializer='cloudpickle' round-trips a lambda in the state."""

    @checkpointed(store=memory_url, serializer="cloudpickle")
    def f(*, state: Any = None) -> Any:
        if state is None:
            state = {"i": 0, "fn": lambda x: x * 2}
        while state["i"] < 2:
            state["i"] += 1
            yield state
            if state["i"] == 1 and not state.get("crashed"):
                raise Crash("once")

    with pytest.raises(Crash):
        f()
    cp = f.latest()
    assert cp is not None and cp.state["fn"](21) == 42
    assert f()["i"] == 2


def test_lock_in_state_does_not_suggest_cloudpickle(memory_url: str) -> None:
    """Things no serializer can handle get advice to keep them out of the state."""
    import threading

    @checkpointed(store=memory_url)
    def f(*, state: Any = None) -> Any:
        yield {"lock": threading.Lock()}

    with pytest.raises(SerializationError, match="keep it out of the state"):
        f()


def test_each_part_named_gets_its_own_error_not_another_s(memory_url: str) -> None:
    """A lambda and a lock in one state: the message named the lock with the lambda's
    error ("Can't pickle local object ...<lambda>")."""
    import threading

    @checkpointed(store=memory_url)
    def f(*, state: Any = None) -> Any:
        yield {"fitness": lambda x: x, "lock": threading.Lock()}

    with pytest.raises(SerializationError) as info:
        f()
    message = str(info.value)
    assert "['lock']" in message and "_thread.lock" in message
    assert "lambda" not in message


class JsonSerializer:
    name = "json"

    def dumps(self, obj: Any) -> bytes:
        return json.dumps(obj).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


def test_custom_serializer_object(memory_url: str) -> None:
    """An object with name, dumps and loads works as a serializer."""
    faults = Faults()

    @checkpointed(store=memory_url, serializer=JsonSerializer(), capture_rng=False)
    def count(n: int, *, state: Any = None) -> Any:
        faults.entered.append(0)
        state = state or {"i": 0}
        while state["i"] < n:
            state["i"] += 1
            yield state
            if state["i"] == 2 and len(faults.entered) == 1:
                raise Crash("once")

    with pytest.raises(Crash):
        count(3)
    assert count(3) == {"i": 3}


def test_serializer_name_mismatch_is_an_error(memory_url: str) -> None:
    """Reading a checkpoint written by another serializer names both serializers."""
    make_evolve(Faults(crash_at={3}), store=memory_url, run_id="mixed")
    with pytest.raises(Crash):
        make_evolve(Faults(crash_at={3}), store=memory_url, run_id="mixed")(5)
    other = make_evolve(Faults(), store=memory_url, run_id="mixed", serializer="cloudpickle")
    with pytest.raises(SerializationError, match=r"'pickle'.*'cloudpickle'"):
        other(5)


# -- RNG ----------------------------------------------------------------------------------


def test_crash_before_first_yield_replays_the_same_randomness(memory_url: str) -> None:
    """The RNG recorded at the fresh start makes a crash in generation 1 replay identically."""
    random.seed(0)
    np.random.seed(0)
    expected = reference(5)
    evolve = make_evolve(Faults(crash_at={1}), store=memory_url)
    random.seed(0)
    np.random.seed(0)
    with pytest.raises(Crash):
        evolve(5)
    random.seed(99)  # a restarted process would not have the same RNG state
    np.random.seed(99)
    assert evolve(5) == expected


@pytest.mark.parametrize("capture", [False, True])
def test_capture_rng_false_leaves_the_process_rng_alone(memory_url: str, capture: bool) -> None:
    """capture_rng=False: a resume draws from the process's RNG; True restores the saved one."""
    evolve = make_evolve(Faults(crash_at={3}), store=memory_url, capture_rng=capture)
    with pytest.raises(Crash):
        evolve(5)
    random.seed(5)
    for _ in range(3):  # generations 3, 4 and 5 draw one number each
        random.random()
    after_three_draws = random.getstate()
    random.seed(5)
    make_evolve(Faults(), store=memory_url, capture_rng=capture)(5)
    assert (random.getstate() == after_three_draws) is (not capture)


def test_all_checkpoints_corrupt_refuses_fresh_start(memory_url: str) -> None:
    """When nothing verifies, the call raises instead of silently starting over."""
    faults = Faults(crash_at={3})
    evolve = make_evolve(faults, store=memory_url)
    with pytest.raises(Crash):
        evolve(5)
    store = open_store(memory_url)
    for name in names(memory_url, evolve.run_id(5)):
        store.put(f"{evolve.run_id(5)}/{name}", [b"garbage"])
    entries = len(faults.entered)
    with pytest.raises(CheckpointCorruptError, match=evolve.run_id(5)):
        evolve(5)
    assert len(faults.entered) == entries


class Population:
    """A class whose method is checkpointed: the instance takes part in the run id."""

    def __init__(self, size: int) -> None:
        self.size = size

    @checkpointed(store="memory://methods")
    def evolve(self, generations: int, *, state: Any = None) -> Any:
        state = state or 0
        while state < generations:
            state += 1
            yield state
        return state * self.size



def test_methods_have_the_helpers() -> None:
    """A decorated method works through the instance, helpers included; self is in the id."""
    from resumable.stores._memory import MemoryStore

    MemoryStore("methods").clear()
    pop = Population(3)
    assert pop.evolve(4) == 12
    assert "Population.evolve" in pop.evolve.run_id(4)
    assert pop.evolve.run_id(4) == Population(3).evolve.run_id(4)
    assert pop.evolve.run_id(4) != Population(5).evolve.run_id(4)
    latest = pop.evolve.latest(4)
    assert latest is not None and latest.step == 4
    assert list(pop.evolve.iter(4)) == []
    pop.evolve.reset(4)
    assert pop.evolve.latest(4) is None


def test_result_that_cannot_be_loaded_names_the_record(memory_url: str) -> None:
    """A stored result whose class is gone raises SerializationError naming its key."""
    import pickle

    from resumable._run import RESULT

    evolve = make_evolve(Faults(), store=memory_url)
    evolve(2)
    run = Run(open_store(memory_url), evolve.run_id(2))
    # a result pickled by reference to a module that does not exist here
    payload = pickle.dumps(Faults()).replace(b"tests.toy", b"gone.away")
    run.store.put(run.key(RESULT), run._encode(RESULT, [payload], "result", "pickle"))
    with pytest.raises(SerializationError, match=f"{evolve.run_id(2)}/result"):
        evolve(2)


def test_restart_backoff_is_configurable_and_leaves_global_random(
    memory_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$RESUMABLE_RESTART_BACKOFF pauses restarts, with jitter from a private generator."""
    monkeypatch.setenv("RESUMABLE_RESTART_BACKOFF", "0.05")
    random.seed(0)
    np.random.seed(0)
    faults = Faults(crash_at={2})
    evolve = make_evolve(faults, store=memory_url, restarts=1)
    started = time.monotonic()
    assert evolve(4) == reference(4)  # bit-identical: the jitter did not touch random
    assert time.monotonic() - started >= 0.025  # the pause happened (lower bound only)
    monkeypatch.setenv("RESUMABLE_RESTART_BACKOFF", "soon")
    faults2 = Faults(crash_at={2})
    with pytest.raises(ConfigurationError, match="RESUMABLE_RESTART_BACKOFF"):
        make_evolve(faults2, store=memory_url + "-2", restarts=1)(4)


def test_sync_saves_with_a_failed_save_keep_every_array_distinct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed save in RESUMABLE_SYNC mode never lets two arrays share one snapshot buffer."""
    from resumable import StoreError
    from resumable.stores._local import LocalStore

    monkeypatch.setenv("RESUMABLE_SYNC", "1")
    fail = [True]

    class Flaky(LocalStore):
        def put(self, key: str, data: Any) -> None:
            if key.endswith("-000000000002") and fail and fail.pop():
                raise StoreError("simulated failure", url=self.url, key=key)
            super().put(key, data)

    n = 1 << 15
    boom = [True, True]

    @checkpointed(store=Flaky(tmp_path), every=3, restarts=3, keep=None)
    def f(steps: int, *, state: Any = None) -> Any:
        s = state or {"i": 0, "a": np.zeros(n)}
        while s["i"] < steps:
            if s["i"] == 2 and boom and boom.pop():
                raise Crash("body failed")
            i = s["i"] + 1
            s = {"i": i, "a": np.full(n, float(i))}
            if i >= 3:
                s["b"] = np.full(n, -float(i))  # a second array of the same size
            yield s

    f(3)
    latest = f.latest(3)
    assert latest is not None and latest.step == 3
    assert latest.state["a"][0] == 3.0 and latest.state["b"][0] == -3.0


@pytest.mark.parametrize("sync", [False, True])
def test_last_state_is_saved_when_an_earlier_save_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    """A save that failed for good stops the run, but the last yielded state is saved first.

    The save of step 1 fails (the body waits until it has been tried); the uploader
    never lets a later success hide that failure, so the run
    stops at a later submit or at once ($RESUMABLE_SYNC=1), with its last state saved.
    """
    from resumable import StoreError
    from resumable.stores._local import LocalStore

    monkeypatch.setenv("RESUMABLE_SYNC", "1" if sync else "0")
    failing = [True]
    attempted = threading.Event()

    class FailsOnce(LocalStore):
        def put(self, key: str, data: Any) -> None:
            if "/ckpt-" in key and failing and failing.pop():
                attempted.set()
                raise StoreError("simulated failure", url=self.url, key=key)
            super().put(key, data)

    yielded: list[int] = []

    @checkpointed(store=FailsOnce(tmp_path), run_id="late")
    def f(*, state: Any = None) -> Any:
        s = state or 0
        while s < 50:
            s += 1
            if s == 2:  # the save of step 1 (not a later one) is the one that fails
                assert attempted.wait(60)
            yielded.append(s)
            yield s

    with pytest.raises(StoreError, match="simulated failure"):
        f()
    if sync:
        assert yielded == [1]  # stopped at the yield whose save failed
    stopped = yielded[-1]
    latest = f.latest()
    assert latest is not None and latest.step == stopped  # saved again before the error left
    assert f() == 50  # and the run goes on from there
    assert yielded[len(yielded) - (50 - stopped)] == stopped + 1


def test_a_completed_run_called_again_leaves_the_rngs_where_the_run_left_them(
    tmp_path: Path,
) -> None:
    """A script that chains calls (phase 1, then phase 2) gives the uninterrupted result
    after a restart only if the recalled phase 1 leaves the RNGs as its run did."""

    @checkpointed(store=str(tmp_path))
    def f(n: int, *, state: Any = None) -> Any:
        s = state or 0
        while s < n:
            s += 1
            random.random()
            np.random.random()
            yield s
        return s

    random.seed(1)
    np.random.seed(1)
    assert f(5) == 5
    after = (random.random(), float(np.random.random()))
    random.seed(1)
    np.random.seed(1)
    assert f(5) == 5  # the stored result, the body is not run
    assert (random.random(), float(np.random.random())) == after
    random.seed(1)
    np.random.seed(1)
    it = f.iter(5)
    assert it.result == 5  # at once, and the RNGs are restored at once too
    assert (random.random(), float(np.random.random())) == after


@pytest.fixture
def numpy_rng() -> Iterator[None]:
    """numpy's global RNG as the test found it, whatever the test did to it: its object
    (``np.random.mtrand._rand``), its bit generator's kind (MT19937) and its state."""
    saved = np.random.get_state(legacy=False)
    original = np.random.mtrand._rand
    yield
    np.random.mtrand._rand = original
    np.random.set_bit_generator(np.random.MT19937())
    np.random.set_state(saved)


@pytest.mark.parametrize("how", ["pcg64", "replaced"])
def test_numpy_global_rng_of_another_kind_is_captured_and_restored(
        numpy_rng: None, how: str) -> None:
    """The global RNG on another bit generator (no warning at every capture), or
    np.random.mtrand._rand replaced: capture then restore reproduces the same draws."""
    import warnings

    from resumable import _rng

    if how == "pcg64":
        np.random.set_bit_generator(np.random.PCG64(5))
    else:
        np.random.mtrand._rand = np.random.RandomState(99)
        np.random.seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = _rng.capture()
        first = np.random.random(4).tolist()
        _rng.restore(state)
        assert np.random.random(4).tolist() == first


@pytest.mark.parametrize(("saved_on", "restored_on"),
                         [("PCG64", "MT19937"), ("MT19937", "PCG64"), ("PCG64", "SFC64")])
def test_numpy_global_rng_is_restored_onto_the_bit_generator_it_was_saved_from(
        numpy_rng: None, saved_on: str, restored_on: str) -> None:
    """A body that puts numpy's global RNG on another bit generator
    (np.random.set_bit_generator(PCG64(seed))) could never be resumed: a new process
    starts on MT19937, and the PCG64 state saved with the checkpoint was set onto it
    (ValueError: state must be for a MT19937 PRNG). An in-process restart to before the
    switch failed the same way the other way round (review 39). The global RNG is now put
    back on the kind of bit generator it was saved from, with its state."""
    from resumable import _rng

    np.random.set_bit_generator(getattr(np.random, saved_on)(11))
    np.random.random(3)
    np.random.standard_normal()  # an odd count: a gauss stays cached
    state = _rng.capture()
    expected = [*np.random.random(4).tolist(), np.random.standard_normal()]
    np.random.set_bit_generator(getattr(np.random, restored_on)(5))  # a new process
    _rng.restore(state)
    assert type(np.random.mtrand._rand._bit_generator).__name__ == saved_on
    assert [*np.random.random(4).tolist(), np.random.standard_normal()] == expected


class _MyPCG(np.random.PCG64):
    """A user's own bit generator: its state names it "_MyPCG", not a numpy class."""


def test_numpy_global_rng_restores_onto_a_users_bit_generator_and_only_numpys_own_object(
        numpy_rng: None) -> None:
    """Review 40 of edef24b: (1) a subclass of a numpy bit generator (its state names the
    subclass) was looked up in np.random only, so the restore still failed; (2) the switch
    went through np.random.set_bit_generator, which re-makes np.random.mtrand._rand: a
    program that had installed its own RandomState there had it switched to a randomly
    seeded generator, while the object set_state restores was left on the wrong kind."""
    from resumable import _rng

    np.random.set_bit_generator(_MyPCG(3))
    state = _rng.capture()
    expected = np.random.random(4).tolist()
    mine = np.random.RandomState(np.random.MT19937(7))
    np.random.mtrand._rand = mine  # the program's own, as mtrand._rand
    untouched = np.random.RandomState(np.random.MT19937(7)).random(3).tolist()
    np.random.get_state.__self__.__init__(np.random.MT19937(2))  # a new process
    _rng.restore(state)
    assert type(np.random.get_state.__self__._bit_generator) is _MyPCG
    assert np.random.random(4).tolist() == expected
    assert type(mine._bit_generator) is np.random.MT19937
    assert mine.random(3).tolist() == untouched


@pytest.mark.parametrize("saved_state", [
    {"bit_generator": "NoSuchBitGenerator", "state": {}, "has_gauss": 0, "gauss": 0.0},
    {"bit_generator": "other.Gen", "s": [1, 2], "has_gauss": 0, "gauss": 0.0},
], ids=["unknown-kind", "no-state-entry"])
def test_a_global_rng_state_numpy_cannot_restore_is_a_configuration_error(
        numpy_rng: None, saved_state: dict[str, Any]) -> None:
    """A bit generator this process cannot make, or whose state numpy's set_state cannot
    take (randomgen's have no "state" entry): a ConfigurationError (exit 78) naming the
    kind and what to do, not numpy's ValueError."""
    from resumable import _rng

    with pytest.raises(ConfigurationError, match=saved_state["bit_generator"]):
        _rng.restore({"random": random.getstate(), "numpy": saved_state})


def test_two_bit_generators_of_one_name_restore_by_their_state(
        numpy_rng: None) -> None:
    """numpy's states record only the class name: with two imported subclasses named
    alike (one of PCG64, one of MT19937), the first found was taken, and numpy's KeyError
    escaped, leaving the global RNG re-made on the wrong class (review 42). The one whose
    state has the saved state's fields is chosen, whichever is in place."""
    from resumable import _rng

    fast_a = type("Fast", (np.random.PCG64,), {"__module__": "mod_a"})
    fast_b = type("Fast", (np.random.MT19937,), {"__module__": "mod_b"})
    np.random.set_bit_generator(fast_a(4))
    state = _rng.capture()
    expected = np.random.random(3).tolist()
    for now in (fast_b(1), np.random.MT19937(1), np.random.SFC64(1)):
        np.random.set_bit_generator(now)  # a new process, on something else
        _rng.restore(state)
        assert type(np.random.get_state.__self__._bit_generator) is fast_a, now
        assert np.random.random(3).tolist() == expected, now


@contextlib.contextmanager
def _generator_lock_held_by_another_thread() -> Iterator[None]:
    """The lock of numpy's global bit generator, held by another thread for the block, as
    a draw holds it for its length; let go of at the end, however the block ends."""
    held, release = threading.Event(), threading.Event()

    def holding() -> None:
        with np.random.get_state.__self__._bit_generator.lock:
            held.set()
            assert release.wait(120)

    holder = threading.Thread(target=holding)
    holder.start()
    assert held.wait(120)
    try:
        yield
    finally:
        release.set()
        holder.join(120)


def test_a_switching_restore_waits_for_a_draw_and_keeps_the_old_generator(numpy_rng: None) -> None:
    """Another thread drawing from np.random holds the generator's lock; the restore that
    switches the generator's kind re-made it under no lock, and freed the generator the
    draw was reading: a segfault (review 42). It now waits for the draw (the lock), and
    keeps the replaced generator alive."""
    from resumable import _rng

    np.random.set_bit_generator(np.random.PCG64(2))
    state = _rng.capture()
    old = np.random.SFC64(3)
    np.random.set_bit_generator(old)
    with _generator_lock_held_by_another_thread():  # as a draw holds it
        restorer = threading.Thread(target=_rng.restore, args=(state,))
        restorer.start()
        restorer.join(0.5)
        waited = restorer.is_alive()  # (never done while the lock is held)
    restorer.join(120)
    assert waited, "the switch did not wait for the draw holding the generator's lock"
    assert type(np.random.get_state.__self__._bit_generator) is np.random.PCG64
    # (bit generators take no weak references: the library keeps it, not only us)
    assert any(kept is old for kept in _rng._replaced), "the replaced one is not kept"


@pytest.mark.parametrize("bad", ["overflow", "short-key"])
def test_a_failed_switching_restore_leaves_numpys_rng_exactly_as_it_was(
        numpy_rng: None, bad: str) -> None:
    """A saved state set_state refuses with an error other than ValueError, KeyError or
    TypeError (OverflowError for a negative PCG64 state, IndexError for a short MT19937
    key) escaped and left the global RNG on the new, randomly seeded kind; the put-back
    also lost the cached normal of the generator in place (review 43)."""
    from resumable import _rng

    np.random.set_bit_generator(np.random.SFC64(8))
    np.random.standard_normal()  # an odd count: a normal stays cached
    before = np.random.get_state(legacy=False)
    expected = [np.random.standard_normal(), *np.random.random(2).tolist()]
    np.random.set_state(before)
    broken: Any = (
        {"bit_generator": "PCG64", "state": {"state": -1, "inc": 1}, "has_uint32": 0,
         "uinteger": 0, "has_gauss": 0, "gauss": 0.0} if bad == "overflow"
        else ("MT19937", np.zeros(5, dtype=np.uint32), 0, 0, 0.0))
    with pytest.raises(ConfigurationError, match="cannot be restored"):
        _rng.restore({"random": random.getstate(), "numpy": broken})
    assert type(np.random.get_state.__self__._bit_generator) is np.random.SFC64
    assert [np.random.standard_normal(), *np.random.random(2).tolist()] == expected


@pytest.mark.parametrize("bad", ["short-key", "bad-pos", "legacy-short-key", "pcg64-bad-inc"])
def test_a_refused_state_of_the_same_kind_leaves_numpys_rng_exactly_as_it_was(
        numpy_rng: None, bad: str) -> None:
    """A saved state of the kind in place (no switch) that set_state refuses: numpy writes
    the cached normal before the bit generator refuses the rest, so the next normal drawn
    was the broken state's (review 44); the generator is put back exactly here too."""
    from resumable import _rng

    if bad == "pcg64-bad-inc":
        np.random.set_bit_generator(np.random.PCG64(5))
    else:
        np.random.seed(1)
    before = np.random.get_state(legacy=False)
    expected = [np.random.standard_normal(), *np.random.random(2).tolist()]
    np.random.set_state(before)
    broken: Any = {
        "short-key": {"bit_generator": "MT19937", "has_gauss": 1, "gauss": 123.456,
                      "state": {"key": np.zeros(3, dtype=np.uint32), "pos": 0}},
        "bad-pos": {"bit_generator": "MT19937", "has_gauss": 1, "gauss": 7.5,
                    "state": {"key": np.zeros(624, dtype=np.uint32), "pos": "x"}},
        "legacy-short-key": ("MT19937", np.zeros(3, dtype=np.uint32), 0, 1, 99.0),
        "pcg64-bad-inc": {"bit_generator": "PCG64", "state": {"state": 1, "inc": "bad"},
                          "has_uint32": 0, "uinteger": 0, "has_gauss": 1, "gauss": 42.0},
    }[bad]
    with pytest.raises(ConfigurationError, match="cannot be restored"):
        _rng.restore({"random": random.getstate(), "numpy": broken})
    assert [np.random.standard_normal(), *np.random.random(2).tolist()] == expected


def test_two_threads_restoring_other_kinds_at_once_both_succeed(numpy_rng: None) -> None:
    """Two runs resuming in two threads, one saved on PCG64 and one on MT19937: a restore
    decided whether to switch, then another thread switched the kind before its set_state,
    which refused the state: a ConfigurationError (exit 78) for a sound checkpoint
    (review 44). Restores of the global RNG now take turns."""
    from resumable import _rng

    np.random.set_bit_generator(np.random.PCG64(1))
    pcg = _rng.capture()
    np.random.set_bit_generator(np.random.MT19937(2))
    mt = _rng.capture()
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def restoring(state: Any) -> None:
        start.wait(60)
        for _ in range(3000):
            try:
                _rng.restore(state)
            except BaseException as err:
                errors.append(err)
                return

    threads = [threading.Thread(target=restoring, args=(s,)) for s in (pcg, mt)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]


def test_a_restore_while_this_thread_holds_numpys_lock_and_another_restores_finishes(
        numpy_rng: None) -> None:
    """Thread A holds numpy's generator lock (numpy's pattern for a thread drawing in
    bulk) and restores; thread B restores meanwhile. B took the restores' lock and then
    waited, in set_state, for A's generator lock, while A waited for the restores' lock:
    both hung for ever (review 45 of 01227eb). Locks are taken in one order now: the
    generator's, then the restores'."""
    from resumable import _rng

    np.random.seed(1)
    state = _rng.capture()
    expected = np.random.random(3).tolist()
    a_holds = threading.Event()
    done: list[str] = []
    errors: list[BaseException] = []

    def run(name: str, body: Callable[[], None]) -> threading.Thread:
        def target() -> None:
            try:
                body()
                done.append(name)
            except BaseException as err:
                errors.append(err)
        thread = threading.Thread(target=target, daemon=True)  # (a hang must not block exit)
        thread.start()
        return thread

    def a() -> None:
        with np.random.get_state.__self__._bit_generator.lock:
            a_holds.set()
            b.join(0.5)  # (B is in its restore, waiting for this lock)
            _rng.restore(state)

    b_go = threading.Event()

    def restore_b() -> None:
        assert b_go.wait(60)
        _rng.restore(state)

    b = run("B", restore_b)
    thread_a = run("A", a)
    assert a_holds.wait(60)
    b_go.set()
    thread_a.join(60)
    b.join(60)
    assert not errors, errors[0]
    assert sorted(done) == ["A", "B"], f"hung: {sorted({'A', 'B'} - set(done))}"
    assert np.random.random(3).tolist() == expected


def test_a_restore_inside_a_restore_in_one_thread_finishes(
        numpy_rng: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal handler (or a bit generator's own code) that restores while this thread is
    inside a restore waited for the restores' lock, which this thread held: a hang (review
    45 of 01227eb). The lock is reentrant: the inner restore runs, then the outer one."""
    from resumable import _rng

    np.random.set_bit_generator(np.random.PCG64(1))
    inner = _rng.capture()
    np.random.set_bit_generator(np.random.MT19937(2))
    outer = _rng.capture()
    expected = np.random.random(3).tolist()
    real = _rng._change
    calls: list[int] = []

    def nested() -> int:  # (inside the outer restore, before its set_state)
        if not calls:
            calls.append(1)
            _rng.restore(inner)  # as a signal handler would
        return real()

    monkeypatch.setattr(_rng, "_change", nested)
    errors: list[BaseException] = []

    def restoring() -> None:
        try:
            _rng.restore(outer)
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=restoring, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the restore inside a restore waited for itself"
    assert calls and not errors, errors[0] if errors else "the inner restore never ran"
    assert type(np.random.get_state.__self__._bit_generator) is np.random.MT19937
    assert np.random.random(3).tolist() == expected  # the outer one's, done last


@pytest.mark.parametrize("b_holds_the_lock", [False, True], ids=["plain", "holding"])
def test_a_restore_between_another_restores_switch_and_its_set_state_finishes(
        numpy_rng: None, monkeypatch: pytest.MonkeyPatch, b_holds_the_lock: bool) -> None:
    """Thread A switched the generator's kind and is between its switch and its set_state;
    thread B restores then (also inside `with np.random.get_bit_generator().lock`, numpy's
    pattern). With a lock over the restores, B took the new generator's lock and waited
    for the restores' lock, which A held while its set_state waited for B's: both hung
    (review 46 of 56ae937). Both finish, and the one that ends last wins."""
    from resumable import _rng

    np.random.set_bit_generator(np.random.PCG64(1))
    pcg = _rng.capture()
    np.random.set_bit_generator(np.random.MT19937(2))
    mt = _rng.capture()
    expected = np.random.random(3).tolist()  # (mt's: B's, then A's once more)
    np.random.set_bit_generator(np.random.SFC64(3))
    real_switch = _rng._switch
    a_switched, a_go = threading.Event(), threading.Event()
    a_thread: list[threading.Thread] = []

    def pausing_switch(rs: Any, generator: Any, kind: Any) -> None:
        real_switch(rs, generator, kind)
        if threading.current_thread() is a_thread[0] and not a_switched.is_set():
            a_switched.set()
            assert a_go.wait(60)

    monkeypatch.setattr(_rng, "_switch", pausing_switch)
    done: list[str] = []
    errors: list[BaseException] = []

    def restore(name: str, state: Any, holding: bool) -> None:
        try:
            if holding:
                with np.random.get_state.__self__._bit_generator.lock:
                    _rng.restore(state)
            else:
                _rng.restore(state)
            done.append(name)
        except BaseException as err:
            errors.append(err)

    a_thread.append(threading.Thread(target=restore, args=("A", mt, False), daemon=True))
    a_thread[0].start()
    assert a_switched.wait(60)  # A is on MT19937 now, before its set_state
    b = threading.Thread(target=restore, args=("B", pcg, b_holds_the_lock), daemon=True)
    b.start()
    b.join(60)
    a_go.set()
    a_thread[0].join(60)
    assert not errors, errors[0]
    assert done == ["B", "A"], f"hung: {sorted({'A', 'B'} - set(done))}"
    assert type(np.random.get_state.__self__._bit_generator) is np.random.MT19937
    assert np.random.random(3).tolist() == expected


def test_a_process_forked_during_a_restore_can_draw_and_restore(
        numpy_rng: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork (a fork pool starting) while another thread restored: the restore held
    numpy's generator lock for its whole length, and the child, where no thread lets go
    of it, hung at its first np.random call (review 46 of 56ae937)."""
    import signal

    from resumable import _rng

    np.random.seed(4)
    state = _rng.capture()
    real = _rng._change
    inside, leave = threading.Event(), threading.Event()

    def paused() -> int:  # (in the middle of the restore)
        if threading.current_thread() is not threading.main_thread():
            inside.set()
            assert leave.wait(60)
        return real()

    monkeypatch.setattr(_rng, "_change", paused)
    restorer = threading.Thread(target=_rng.restore, args=(state,), daemon=True)
    restorer.start()
    try:
        assert inside.wait(60)
        status = in_child(lambda: (np.random.random(), _rng.restore(state)))
    finally:
        leave.set()
        restorer.join(60)
    assert status == 0, (
        f"the child exited {status} ({-int(signal.SIGALRM)}: it hung on numpy's generator "
        "lock)")


class _NoCopy(np.random.MT19937):
    """A bit generator that cannot be copied (so a restore has no trial to try a state
    on first): a subclass whose __init__ needs an argument."""

    def __init__(self, seed: Any) -> None:
        super().__init__(seed)

    def __reduce__(self) -> Any:
        raise TypeError("not copyable")


def test_a_refused_restore_does_not_undo_another_threads_restore(
        numpy_rng: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread B restores a state numpy refuses while thread S restores a sound one, on a
    generator that cannot be copied. With no copy to try a state on first, B's set_state
    on the global generator wrote part of the state it then refused (the cached normal,
    the key) after S's restore, and B's put-back, read before S's restore, undid it
    (reviews 47 and 49: 997 of 2000 rounds). Such a generator is now tried on the numpy
    class it derives from. B is paused, if it gets that far, after reading what it would
    put back, until S has restored."""
    from resumable import _rng

    np.random.set_bit_generator(_NoCopy(1))
    np.random.standard_normal(3)  # (a normal cached)
    good = _rng.capture()
    expected = np.random.standard_normal(4).tolist()
    np.random.seed(2)
    broken = {"numpy": {"bit_generator": "_NoCopy", "has_gauss": 1, "gauss": 9.0,
                        "state": {"key": np.arange(10, dtype=np.uint32), "pos": 3}}}
    real = _rng._cached_normal
    b_ready, s_in = threading.Event(), threading.Event()

    def pausing(np_: Any, rs: Any) -> dict[str, Any]:  # (B, having read what it would put back)
        got = real(np_, rs)
        if threading.current_thread().name == "B":
            b_ready.set()
            assert s_in.wait(60)
        return got

    monkeypatch.setattr(_rng, "_cached_normal", pausing)
    errors: dict[str, BaseException] = {}

    def restore(name: str, state: Any) -> None:
        try:
            _rng.restore(state)
        except BaseException as err:
            errors[name] = err
        finally:
            if name == "S":
                s_in.set()
            b_ready.set()

    b = threading.Thread(target=restore, args=("B", broken), name="B", daemon=True)
    b.start()
    assert b_ready.wait(60)
    s = threading.Thread(target=restore, args=("S", good), name="S", daemon=True)
    s.start()
    b.join(60)
    s.join(60)
    assert set(errors) == {"B"} and isinstance(errors["B"], ConfigurationError), errors
    assert np.random.standard_normal(4).tolist() == expected, "S's restore was damaged"


class _Guarded(_NoCopy):
    """A subclass that cannot be copied and checks states in its own way (in
    __setattr__, not with a ``state`` of its own): the numpy class it derives from
    accepts more."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "state" and value["state"]["pos"] == 0:
            raise ValueError("_Guarded refuses pos 0")
        super().__setattr__(name, value)


@pytest.mark.parametrize("name", ["7", "none", "dotted", "own check"])
def test_a_state_tried_on_the_numpy_class_a_subclass_derives_from_is_not_taken_as_sound(
        numpy_rng: None, name: str) -> None:
    """A subclass that cannot be copied is tried on its numpy class (bc5d6b3). The saved
    name was replaced by that class's whatever it was, so the trial passed states the
    global generator then refused, and that refusal was taken for another thread's
    switch: 1000 retries (0.5 s), "other threads switched ... 1000 times", and the cached
    normal written each time (review 52). The name is replaced only when it is the
    subclass's, and a refusal after such a trial is the state's fault, put back."""
    from resumable import _rng

    kind = _Guarded if name == "own check" else _NoCopy
    np.random.set_bit_generator(kind(1))
    np.random.standard_normal(1)  # (a normal cached)
    saved = np.random.get_state(legacy=False)
    expected = np.random.standard_normal(3).tolist()
    np.random.set_state(saved)
    dotted = f"{_NoCopy.__module__}._NoCopy"
    broken = {**saved, "bit_generator": {"7": 7, "none": None, "dotted": dotted,
                                         "own check": "_Guarded"}[name]}
    if name == "own check":
        broken["state"] = {**saved["state"], "pos": 0}
    with pytest.raises(ConfigurationError, match="cannot be restored"):
        _rng.restore({"numpy": broken})
    assert np.random.standard_normal(3).tolist() == expected


class _Counting(random.Random):
    """A program's own Random, whose state is its own format (its draws counted)."""

    def __init__(self, seed: Any = None) -> None:
        self.count = 0
        super().__init__(seed)

    def getstate(self) -> Any:
        return ("counting", super().getstate(), self.count)

    def setstate(self, state: Any) -> None:
        _, inner, self.count = state
        super().setstate(inner)


def test_a_programs_own_random_class_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``random``'s state was tried on a plain random.Random (bc5d6b3), which refuses the
    state of a program's own Random subclass installed as the module's functions: a
    sound checkpoint could not be resumed (review 52). It is tried on a copy of the
    instance in place."""
    from resumable import _rng

    inst = _Counting(1)
    for attr in ("random", "getstate", "setstate"):
        monkeypatch.setattr(random, attr, getattr(inst, attr))
    random.random()
    saved = _rng.capture()
    expected = [random.random() for _ in range(3)]
    _rng.restore(saved)
    assert [random.random() for _ in range(3)] == expected


class _SeededRandom(random.Random):
    """A program's own Random that cannot be copied: its __init__ needs a seed."""

    def __init__(self, seed: Any) -> None:
        super().__init__(seed)


def test_a_damaged_random_state_on_a_random_that_cannot_be_copied_changes_nothing(
        numpy_rng: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``random``'s state is tried on a copy of the instance in place (23feeab); one that
    cannot be copied got no trial, so a damaged state was refused by random.setstate
    after numpy's RNG had been set: a bare ValueError, numpy's RNG changed (review 53).
    It is now set on the instance first."""
    from resumable import _rng

    inst = _SeededRandom(1)
    for attr in ("random", "getstate", "setstate"):
        monkeypatch.setattr(random, attr, getattr(inst, attr))
    np.random.set_bit_generator(np.random.PCG64(1))
    sound = _rng.capture()  # (numpy's part: a PCG64 state, a switch to restore it)
    np.random.set_bit_generator(np.random.MT19937(2))
    random_before = inst.getstate()
    expected = np.random.random(3).tolist()
    np.random.set_bit_generator(np.random.MT19937(2))
    with pytest.raises(ConfigurationError, match="random module's state"):
        _rng.restore({**sound, "random": (3, (1, 2, 3), None)})
    assert inst.getstate() == random_before
    assert type(np.random.get_bit_generator()) is np.random.MT19937
    assert np.random.random(3).tolist() == expected


def test_a_refused_restore_leaves_a_random_that_cannot_be_copied_as_it_was(
        numpy_rng: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no trial, random's state is set before numpy's (8133d23); a numpy state then
    refused left random at the saved state, and a damaged random state left a new
    gauss_next (Random.setstate writes it before its C part refuses), while the error said
    the RNGs were left as they were (review 54). random's own state is put back."""
    from resumable import _rng

    inst = _SeededRandom(1)
    for attr in ("random", "getstate", "setstate", "gauss"):
        monkeypatch.setattr(random, attr, getattr(inst, attr))
    sound = _rng.capture()
    random.random()
    random.gauss(0, 1)  # (a gauss_next cached: it must stay as it is too)
    before = inst.getstate()
    assert before[2] is not None and before != sound["random"]
    damaged_numpy = ("MT19937", np.zeros(3, dtype=np.uint32), 0, 0, 0.0)
    for state in ({**sound, "numpy": damaged_numpy},
                  {**sound, "random": (3, (1, 2, 3), 0.123)},
                  {**sound, "random": (2, ("x",), 0.5)}):
        with pytest.raises(ConfigurationError, match=r"left as they were|start over"):
            _rng.restore(state)
        assert inst.getstate() == before


def test_a_subclass_that_cannot_be_made_is_refused_with_what_to_do(numpy_rng: None) -> None:
    """A checkpoint saved on a bit generator class whose __init__ needs arguments cannot
    be restored in a new process, where another kind is in place; the error said so, and
    not what to do (review 52)."""
    from resumable import _rng

    np.random.set_bit_generator(_NoCopy(1))
    saved = _rng.capture()
    np.random.set_bit_generator(np.random.PCG64(2))
    with pytest.raises(ConfigurationError, match=r"defaults for all its arguments.*"
                       r"capture_rng=False"):
        _rng.restore(saved)


class _SharedCopy(np.random.MT19937):
    """A bit generator whose __deepcopy__ returns itself (a program's, for speed)."""

    def __deepcopy__(self, memo: Any) -> Any:
        return self


def test_a_copy_that_is_the_generator_itself_is_no_trial(numpy_rng: None) -> None:
    """The trial a state is set on first was a deepcopy of the generator in place; one
    whose __deepcopy__ returns itself had the refused state written into numpy's global
    generator (review 49). Such a copy is taken as none: the put-back path."""
    from resumable import _rng

    np.random.set_bit_generator(_SharedCopy(5))
    np.random.standard_normal(1)
    before = np.random.get_state(legacy=False)
    expected = np.random.standard_normal(3).tolist()
    np.random.set_state(before)
    # (MT19937's state setter writes the key before it refuses the position)
    broken = {"bit_generator": "_SharedCopy", "has_gauss": 1, "gauss": 9.0,
              "state": {"key": np.arange(624, dtype=np.uint32), "pos": "x"}}
    with pytest.raises(ConfigurationError, match="cannot be restored"):
        _rng.restore({"numpy": broken})
    assert np.random.standard_normal(3).tolist() == expected


def test_a_damaged_random_state_changes_neither_rng(numpy_rng: None) -> None:
    """numpy's RNG is restored before ``random``'s (review 48), so a ``random`` state
    that random.setstate refuses came after numpy's generator had been switched and set:
    a bare struct.error or ValueError, with numpy's RNG changed (review 49). ``random``'s
    state is now tried first, on a Random of its own: a ConfigurationError, and
    neither RNG is changed."""
    from resumable import _rng

    np.random.set_bit_generator(np.random.PCG64(1))
    sound = _rng.capture()
    np.random.set_bit_generator(np.random.MT19937(2))
    in_place = np.random.get_state.__self__._bit_generator
    random.seed(3)
    expected = (random.random(), np.random.random())
    random.seed(3)
    np.random.set_bit_generator(in_place)
    in_place.state = np.random.MT19937(2).state
    assert isinstance(sound["random"], tuple)
    damaged = [("MT19937-raw", b"short", None), (7, (1, 2, 3), None),
               (3, (0,) * 624 + (999,), None)]
    for bad in damaged:
        with pytest.raises(ConfigurationError, match="random module's state"):
            _rng.restore({**sound, "random": bad})
    assert np.random.get_state.__self__._bit_generator is in_place
    assert (random.random(), np.random.random()) == expected


@pytest.mark.parametrize("raw", [
    ("MT19937-raw", b"\0" * 10, 0, 0, 0.0),  # cut short
    ("MT19937-raw", "text", 0, 0, 0.0),  # not bytes
    ("MT19937-raw", b"\0" * 2496),  # items missing
], ids=["short", "text", "missing"])
def test_a_damaged_raw_numpy_state_is_a_configuration_error(
        numpy_rng: None, raw: Any) -> None:
    """A damaged raw record of numpy's RNG was a bare ValueError or TypeError from its
    unpacking (review 49); it is refused as any other state numpy cannot take."""
    from resumable import _rng

    np.random.seed(4)
    expected = np.random.random(3).tolist()
    np.random.seed(4)
    with pytest.raises(ConfigurationError, match="numpy's global RNG cannot be restored"):
        _rng.restore({"numpy": raw})
    assert np.random.random(3).tolist() == expected


def test_a_state_of_another_kind_numpy_refuses_switches_nothing(
        numpy_rng: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused state of another kind was set after a switch, and the switch undone: in
    between, another thread's sound restore could be refused (it found the wrong kind in
    place), then find its own generator back and take its own sound state as refused,
    a ConfigurationError (review 47). The state is tried first: no switch happens."""
    from resumable import _rng

    np.random.seed(3)
    in_place = np.random.get_state.__self__._bit_generator
    expected = np.random.random(3).tolist()
    np.random.seed(3)
    switches: list[Any] = []
    real = _rng._switch
    monkeypatch.setattr(_rng, "_switch", lambda *a: switches.append(a) or real(*a))
    broken = {"bit_generator": "PCG64", "state": {"state": 5, "inc": "x"},
              "has_uint32": 0, "uinteger": 0, "has_gauss": 1, "gauss": 9.0}
    with pytest.raises(ConfigurationError, match="cannot be restored"):
        _rng.restore({"random": random.getstate(), "numpy": broken})
    assert switches == []
    assert np.random.get_state.__self__._bit_generator is in_place
    assert np.random.random(3).tolist() == expected


def _optioned(seed: Any, number: int) -> _Optioned:
    return _Optioned(seed, number=number)


class _Optioned(np.random.PCG64):
    """A bit generator made with an option its state records and checks, as randomgen's
    Philox(number=2) or Romu(variant="trio"), and that a copy keeps."""

    def __init__(self, seed: Any = None, *, number: int = 4) -> None:
        super().__init__(seed)
        self.number = number

    @property  # type: ignore[override]
    def state(self) -> dict[str, Any]:
        return {**np.random.PCG64.state.__get__(self), "number": self.number}

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        if value.get("number") != self.number:
            raise ValueError(f"the state has number={value.get('number')}, but this "
                             f"generator was made with number={self.number}")
        np.random.PCG64.state.__set__(self, {k: v for k, v in value.items() if k != "number"})

    def __reduce__(self) -> Any:
        return _optioned, (None, self.number), self.state

    def __setstate__(self, state: Any) -> None:
        self.state = state


def test_a_generator_made_with_options_restores_onto_itself(numpy_rng: None) -> None:
    """The trial of a saved state was made on a generator of the class in place with its
    defaults, which refuses a state of another option: a sound checkpoint of randomgen's
    Philox(number=2) was a ConfigurationError at an in-process restart (review 48 of
    37f17e6). The trial is a copy of the generator in place."""
    from resumable import _rng

    np.random.set_bit_generator(_Optioned(1, number=2))
    state = _rng.capture()
    expected = np.random.random(3).tolist()
    _rng.restore(state)
    assert np.random.random(3).tolist() == expected


class _SeededFromRandom(np.random.PCG64):
    """A program's bit generator that, made without a seed, takes one from ``random``."""

    def __init__(self, seed: Any = None) -> None:
        super().__init__(random.getrandbits(64) if seed is None else seed)


def test_restoring_numpys_rng_leaves_randoms_stream_as_saved(numpy_rng: None) -> None:
    """Restoring numpy's RNG made a generator of the kind in place to try the state on;
    a program's subclass that seeds itself from ``random`` then moved ``random``'s
    stream, restored just before: every resumed run was one draw on (review 48)."""
    from resumable import _rng

    np.random.set_bit_generator(_SeededFromRandom(3))
    random.seed(7)
    state = _rng.capture()
    expected = (random.random(), np.random.random())
    _rng.restore(state)
    assert (random.random(), np.random.random()) == expected


class _FreshLock(np.random.PCG64):
    """A bit generator whose lock property makes a new lock at each read."""

    @property  # type: ignore[override]
    def lock(self) -> Any:
        return threading.RLock()


def test_a_switch_away_from_a_generator_whose_lock_is_new_at_each_read(
        numpy_rng: None) -> None:
    """The switch let go of the lock it read again, not the one it took: RuntimeError
    (release of an un-acquired lock), and an OS-seeded MT19937 left in place (review 46)."""
    from resumable import _rng

    np.random.seed(5)
    state = _rng.capture()
    expected = np.random.random(3).tolist()
    np.random.set_bit_generator(_FreshLock(1))
    _rng.restore(state)
    assert np.random.random(3).tolist() == expected


def test_a_switch_waits_for_a_draw_in_another_thread_past_the_bound(
        numpy_rng: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy >= 2's lock is reentrant, so the bound on the switch's wait (for numpy < 2's
    plain lock, below) only turned a draw in another thread that held it longer into a
    fatal ConfigurationError, while set_state waits for the same lock unbounded (review
    44). Such a wait is now as long as the draw."""
    from resumable import _rng

    monkeypatch.setattr(_rng, "_SWITCH_WAIT", 0.01)
    np.random.set_bit_generator(np.random.PCG64(1))
    state = _rng.capture()
    expected = np.random.random(3).tolist()
    np.random.set_bit_generator(np.random.SFC64(1))
    errors: list[BaseException] = []

    def restoring() -> None:
        try:
            _rng.restore(state)
        except BaseException as err:
            errors.append(err)

    with _generator_lock_held_by_another_thread():  # as a long draw holds it
        restorer = threading.Thread(target=restoring)
        restorer.start()
        restorer.join(0.5)  # (50 times the bound)
    restorer.join(120)
    assert not errors, errors[0]
    assert type(np.random.get_state.__self__._bit_generator) is np.random.PCG64
    assert np.random.random(3).tolist() == expected


class _PlainLocked(np.random.SFC64):
    """A bit generator with a plain, not reentrant, lock, as numpy < 2 makes them."""

    plain = threading.Lock()

    @property  # type: ignore[override]
    def lock(self) -> Any:
        return _PlainLocked.plain


def test_a_switch_gives_up_on_a_plain_lock_this_thread_holds(
        numpy_rng: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy < 2 has a plain Lock on its bit generators: a thread that holds it and
    restores waited for itself for ever (review 43). That wait is bounded, then a
    ConfigurationError says why, and the generator stays as it was."""
    from resumable import _rng

    monkeypatch.setattr(_rng, "_SWITCH_WAIT", 0.2)
    np.random.set_bit_generator(np.random.PCG64(1))
    state = _rng.capture()
    held = _PlainLocked(1)
    np.random.set_bit_generator(held)
    with _PlainLocked.plain, pytest.raises(ConfigurationError, match="numpy < 2"):
        _rng.restore(state)
    assert np.random.get_state.__self__._bit_generator is held


def test_a_run_that_switches_numpys_global_bit_generator_resumes(
        numpy_rng: None, memory_url: str) -> None:
    """The whole story of the test above: the body switches the global RNG to PCG64 at its
    fresh start and fails at step 3; the call again (the global RNG back on MT19937, as
    in a new process) resumes, and the run's draws are those of an uninterrupted run."""
    crash = [False]  # (not in the reference run)

    def body(*, state: Any = None) -> Any:
        if state is None:
            np.random.set_bit_generator(np.random.PCG64(1))
            state = {"g": 0, "draws": []}
        while state["g"] < 6:
            state = {"g": state["g"] + 1, "draws": [*state["draws"], float(np.random.random())]}
            if state["g"] == 3 and crash[0]:
                crash[0] = False
                raise Crash("step 3")
            yield state
        return state["draws"]

    np.random.set_bit_generator(np.random.MT19937(0))
    reference = list(checkpointed(store=memory_url, run_id="reference")(body)())
    crash[0] = True
    np.random.set_bit_generator(np.random.MT19937(0))
    f = checkpointed(store=memory_url, run_id="resumed")(body)
    with pytest.raises(Crash):
        f()
    np.random.set_bit_generator(np.random.MT19937(0))  # a new process
    assert f() == reference
    crash[0] = True
    np.random.set_bit_generator(np.random.MT19937(0))
    restarted = checkpointed(store=memory_url, run_id="restarted", restarts=1, every=1000)
    assert restarted(body)() == reference  # restarts from before the switch


def test_numpy_global_state_read_from_memory_follows_a_new_bit_generator(numpy_rng: None) -> None:
    """The raw read of numpy's global RNG keeps views of its memory from one yield to the
    next; after np.random.set_bit_generator it reads the new generator, with its own
    position and cached gauss, and restoring gives its draws back."""
    from resumable import _rng

    np.random.seed(1)
    for seed in (7, 8):
        _rng.capture()  # views made for the generator in use
        np.random.set_bit_generator(np.random.MT19937(seed))
        np.random.random(5 + seed)
        np.random.standard_normal()  # an odd count: a gauss stays cached
        expected = np.random.get_state()
        state = _rng.capture()
        assert state["numpy"][0] == "MT19937-raw"  # the fast path is the one tested
        first = [*np.random.random(4).tolist(), np.random.standard_normal()]
        np.random.seed(0)
        _rng.restore(state)
        got = np.random.get_state()
        assert got[1].tolist() == expected[1].tolist() and got[2:] == expected[2:], seed
        assert [*np.random.random(4).tolist(), np.random.standard_normal()] == first


def test_random_state_read_from_memory_follows_a_new_global_instance() -> None:
    """The raw read of ``random``'s state keeps a view of the instance's memory from one
    yield to the next; with the module's functions bound to another random.Random (a
    program that swaps in its own instance), it reads that one, and restoring gives its
    draws back."""
    from resumable import _rng

    names = ("getstate", "setstate", "random", "gauss", "seed")
    original = {name: getattr(random, name) for name in names}
    saved = random.getstate()
    try:
        for seed in (21, 22):
            _rng.capture()  # a view made for the instance in use
            inst = random.Random(seed)
            for name in names:
                setattr(random, name, getattr(inst, name))
            random.random()
            random.gauss(0.0, 1.0)
            expected = inst.getstate()
            state = _rng.capture()
            assert state["random"][0] == "MT19937-raw"  # the fast path is the one tested
            first = [random.random() for _ in range(4)] + [random.gauss(0.0, 1.0)]
            random.seed(0)
            _rng.restore(state)
            assert inst.getstate() == expected, seed
            assert [random.random() for _ in range(4)] + [random.gauss(0.0, 1.0)] == first
    finally:
        for name, function in original.items():
            setattr(random, name, function)
        random.setstate(saved)


def test_the_buffer_pool_keeps_only_the_sizes_of_the_latest_snapshot() -> None:
    """A state that grows by one element per generation: the pool stays bounded by the
    latest snapshot's sizes (it kept every size it had seen, 2.3 GiB for 8 MiB states)."""
    from resumable._run import BufferPool

    pool = BufferPool()
    for i in range(50):
        n = (1 << 20) + 8 * i
        frames: list[Any] = [b"pickle", pool.take(n), pool.take(n)]
        pool.give_back(frames)
        held = sum(len(b) for free in pool._free.values() for b in free)
        assert held <= 3 * n, (i, held)
    same: list[Any] = [b"pickle", pool.take(1 << 20)]
    pool.give_back(same)
    assert pool.take(1 << 20) is same[1]  # equal sizes are still reused


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**80), draws=st.integers(0, 1500),
       gauss=st.booleans())
def test_random_state_read_from_memory_restores_the_same_draws(
        seed: int, draws: int, gauss: bool) -> None:
    """The global ``random`` state is read from memory (random.getstate() cost 11 us per
    yield): whatever the seed, position in the key and cached gauss, restoring the
    capture gives random.getstate() back exactly and the same draws after it."""
    from resumable import _rng

    saved = random.getstate()
    try:
        random.seed(seed)
        for _ in range(draws):
            random.random()
        if gauss:
            random.gauss(0.0, 1.0)  # leaves gauss_next set
        expected = random.getstate()
        state = _rng.capture()
        assert state["random"][0] == "MT19937-raw"  # the fast path is the one tested
        first = [random.random() for _ in range(5)] + [random.gauss(0.0, 1.0)]
        _rng.restore(state)
        assert random.getstate() == expected
        assert [random.random() for _ in range(5)] + [random.gauss(0.0, 1.0)] == first
    finally:
        random.setstate(saved)


def test_random_state_records_of_the_older_form_still_restore() -> None:
    """Checkpoints written before the raw read hold random.getstate()'s tuple."""
    from resumable import _rng

    saved = random.getstate()
    try:
        random.seed(11)
        old_form = {"random": random.getstate()}
        first = random.random()
        _rng.restore(old_form)
        assert random.random() == first
    finally:
        random.setstate(saved)


def test_the_upload_thread_takes_every_newest_save_whether_it_idles_runs_or_rests() -> None:
    """The upload thread is told of a save only when it knows of none (067b4f1): a save
    handed over while it idles, while it runs another, and while it rests after one
    (the duty's pause) is each taken; one replaced before it started is dropped."""
    from resumable._uploader import Uploader

    up = Uploader("test-upload", duty=0.5)  # rests as long as each save took
    ran: list[str] = []
    dropped: list[str] = []
    started, go, done = threading.Event(), threading.Event(), threading.Event()

    def job(name: str, block: bool = False) -> Callable[[], None]:
        def run() -> None:
            ran.append(name)
            if block:
                started.set()
                assert go.wait(30)
            done.set()
        return run

    try:
        up.submit(job("idle"))  # the thread idles (it has not started yet: it starts)
        assert done.wait(30), ran
        done.clear()
        up.submit(job("runs", block=True))  # idle again, in a wait without a timeout
        assert started.wait(30), ran
        up.submit(job("replaced"), on_drop=lambda: dropped.append("replaced"))
        up.submit(job("newest"))  # replaces the one waiting: no wake-up needed, none sent
        go.set()
        up.wait_idle()
        assert ran == ["idle", "runs", "newest"] and dropped == ["replaced"], (ran, dropped)
        done.clear()
        up.submit(job("after a rest"))  # just after a save: the thread rests, then takes it
        assert done.wait(30), ran
        up.flush()
    finally:
        go.set()
        up.close()
    assert ran[-1] == "after a rest", ran


def test_a_stray_object_named_like_a_later_checkpoint_costs_no_good_checkpoint(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A foreign object named ckpt-99999999-... (sorted after every name the run writes)
    was counted by retention as the newest checkpoint: with keep=1, every checkpoint the
    next attempt wrote was deleted as soon as written, and the attempt after that found
    nothing that verified (CheckpointCorruptError, all progress lost)."""
    crash_at = [3, 7]

    @checkpointed(store=str(tmp_path), run_id="stray", keep=1)
    def body(n: int, *, state: Any = None) -> Any:
        state = state or 0
        while state < n:
            state += 1
            yield state
            if crash_at and state == crash_at[0]:
                crash_at.pop(0)
                raise RuntimeError("the pod died")
        return state

    with pytest.raises(RuntimeError):
        body(10)
    (tmp_path / "stray" / "ckpt-99999999-000000000001").write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError):
        body(10)
    names = sorted(p.name for p in (tmp_path / "stray").glob("ckpt-*"))
    assert names == ["ckpt-00000002-000000000007", "ckpt-99999999-000000000001"]
    with caplog.at_level(logging.INFO, logger="resumable"):
        assert body(10) == 10
    assert "from ckpt-00000002-000000000007" in caplog.text


@checkpointed(store="memory://pickled-job")
def _pickled_job(seed: int, *, state: Any = None) -> Any:
    s = state or 0
    while s < 3:
        s += 1
        yield s
    return seed * 100 + s


class _PickledWalker:
    def __init__(self, k: int) -> None:
        self.k = k

    @checkpointed(store="memory://pickled-walker")
    def walk(self, n: int, *, state: Any = None) -> Any:
        yield 1
        return self.k * n


def test_a_decorated_function_goes_to_a_process_pool() -> None:
    """pickle took the wrapper through its __dict__, looked the wrapped function up by
    its name, found the wrapper, and failed ("not the same object"): no pool.map(job)."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    assert pickle.loads(pickle.dumps(_pickled_job)) is _pickled_job
    bound = pickle.loads(pickle.dumps(_PickledWalker(3).walk))
    assert bound(5) == 15 and bound.run_id(5) == _PickledWalker(3).walk.run_id(5)
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        assert list(pool.map(_pickled_job, range(3))) == [3, 103, 203]


def _undecorated_steps(n: int, *, state: Any = None) -> Any:
    s = state or 0
    while s < n:
        s += 1
        yield s
    return s * 10


_aliased_job = checkpointed(store="memory://aliased-job")(_undecorated_steps)


class _AliasedMethod:
    def _fit(self, n: int, *, state: Any = None) -> Any:
        yield 1
        return n + 1

    fit = checkpointed(store="memory://aliased-method")(_fit)

    @classmethod
    @checkpointed(store="memory://aliased-classmethod")
    def build(cls, n: int, *, state: Any = None) -> Any:
        yield 1
        return n + 2


def test_a_decorated_function_under_another_name_pickles_decorated() -> None:
    """Pickling by the wrapped function's name broke where that name leads elsewhere
    (review 32): ``g = checkpointed(...)(f)`` failed ("not the same object"), and a
    method held under another name came back as the plain method, whose call in a
    worker then ran without checkpoints. Each now comes back decorated."""
    import pickle

    import cloudpickle

    from resumable._decorator import CheckpointedFunction

    for dumps in (pickle.dumps, cloudpickle.dumps):
        job = pickle.loads(dumps(_aliased_job))
        assert isinstance(job, CheckpointedFunction)
        assert job(2) == 20 and job.run_id(2) == _aliased_job.run_id(2)
        fit = pickle.loads(dumps(_AliasedMethod().fit))
        assert hasattr(fit, "run_id") and fit(4) == 5
        build = pickle.loads(dumps(_AliasedMethod.build))
        assert hasattr(build, "run_id") and build(4) == 6


_SCRIPT_TO_A_FRESH_INTERPRETER = """
import subprocess, sys
import cloudpickle
from resumable import checkpointed

@checkpointed(store=sys.argv[1])
def job(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s
    return s * 10

# as joblib's and Dask's workers get a task: cloudpickled, into an interpreter that has
# not run this script
worker = "import sys, cloudpickle; print(cloudpickle.loads(sys.stdin.buffer.read())(3))"
done = subprocess.run([sys.executable, "-c", worker], input=cloudpickle.dumps(job),
                      capture_output=True)
print(done.stdout.decode().strip(), done.stderr.decode()[-300:])
"""


def _run_script(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """``source`` run as a script, its store ``tmp_path / "s"`` as its argument."""
    script = tmp_path / "script.py"
    script.write_text(source)
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, str(script), str(tmp_path / "s")],
                          capture_output=True, text=True, cwd=root, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(root)))


def test_a_scripts_decorated_function_goes_to_a_cloudpickle_worker(tmp_path: Path) -> None:
    """A script's @checkpointed function pickled by name only: joblib's loky workers and
    others that do not run the script failed ("Can't get attribute 'job' on <module
    '__main__'>", BrokenProcessPool; review 32). cloudpickle takes it by value."""
    done = _run_script(tmp_path, _SCRIPT_TO_A_FRESH_INTERPRETER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:1] == ["30"], done.stdout
    assert any(p.name.startswith("__main__.job-") for p in (tmp_path / "s").iterdir())


_SIGNED_SCRIPT_FUNCTION_IN_A_STATE = """
import pickle, sys
import cloudpickle
from resumable import checkpointed

KEY = b"k" * 32
BIG = bytes(8_000_000)  # a module global the body reads

@checkpointed(store=sys.argv[1], signing_key=KEY, run_id="score")
def score(n, *, state=None):
    yield len(BIG)
    return n

@checkpointed(store=sys.argv[1], signing_key=KEY, run_id="outer")
def outer(*, state=None):
    for step in range(2):
        yield {"step": step, "objective": score}
    return "done"

print(outer(), len(pickle.dumps(score)), flush=True)
try:
    cloudpickle.dumps(score)
except pickle.PicklingError as err:
    print("refused:", err, flush=True)
"""


def test_a_scripts_function_pickles_small_and_never_carries_its_signing_key(
        tmp_path: Path) -> None:
    """A state or a pool task holding a script's @checkpointed function carried a
    cloudpickle of it, options and globals included: the signing key in clear in every
    checkpoint, and every global the body reads (80 MB per pool task; review 34). By
    name again; by value only for cloudpickle, and never with an explicit key."""
    done = _run_script(tmp_path, _SIGNED_SCRIPT_FUNCTION_IN_A_STATE)
    assert done.returncode == 0, done.stderr
    first, refused = done.stdout.splitlines()
    result, size = first.split()
    assert result == "done" and int(size) < 200
    assert "signing_key" in refused and "RESUMABLE_SIGNING_KEY" in refused
    for path in (tmp_path / "s").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"k" * 32 not in data, path
            assert len(data) < 100_000, path
