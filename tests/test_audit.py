"""f.audit: resumes from every checkpoint and names the first state that differs."""

from __future__ import annotations

import pickle
import random
import re
import sys
import tempfile
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from resumable import ConfigurationError, ResumableError, checkpointed
from resumable._audit import TOO_DEEP, AuditReport, first_difference
from resumable.stores._memory import MemoryStore
from tests import audit_targets as targets

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(autouse=True)
def _targets_store_stays_empty() -> Generator[None]:
    """The audit writes only to its private store, never to the function's own."""
    yield
    assert MemoryStore(targets.STORE.split("://")[1]).list("") == []


# -- what it catches ------------------------------------------------------------------

def test_catches_a_module_level_random_generator() -> None:
    """A body drawing from a module-level random.Random (not captured) diverges at once."""
    report = targets.draws_from_module_rng.audit(8)
    assert not report.ok
    assert (report.step, report.resumed_from, report.path) == (1, 0, "state['draws'][0]")
    assert "uninterrupted: 0." in str(report.detail)


def test_catches_a_module_level_random_generator_in_a_fresh_process() -> None:
    """In a new interpreter the module is imported again: its generator starts over."""
    report = targets.draws_from_module_rng.audit(8, fresh_process=True)
    assert not report.ok
    assert report.path is not None and report.path.startswith("state['draws'][")


def test_catches_a_set_of_strings_iterated_in_a_fresh_process() -> None:
    """Another PYTHONHASHSEED iterates a set of strings in another order."""
    report = targets.iterates_a_set.audit(8, fresh_process=True)
    assert not report.ok
    assert report.path == "state['tags']"
    assert "PYTHONHASHSEED=" in str(report.detail)
    assert report.fresh_process


def test_catches_a_body_reading_the_clock() -> None:
    """time.time() in the state is never the same twice."""
    report = targets.reads_the_clock.audit(8)
    assert not report.ok
    assert (report.step, report.path) == (1, "state['started']")


def test_a_body_that_fails_on_resume_is_reported_with_its_exception() -> None:
    """A body that only works from a fresh start diverges at the first resumed step."""
    report = targets.fails_on_resume.audit(8)
    assert not report.ok
    assert (report.step, report.resumed_from, report.path) == (2, 1, None)
    assert "raised KeyError" in str(report.detail)


def test_catches_state_kept_on_the_object_of_a_method() -> None:
    """obj.method.audit: a counter on self is state outside the state."""
    report = targets.Walker(1.0).counts.audit(6)
    assert not report.ok
    assert (report.step, report.resumed_from, report.path) == (2, 1, "state['seen'][1]")


# -- what passes ----------------------------------------------------------------------

@pytest.mark.parametrize("fresh_process", [False, True])
def test_a_numpy_body_passes(fresh_process: bool) -> None:
    """Arrays, a Generator in the state and numpy's captured global RNG resume exactly."""
    steps = 3 if fresh_process else 5  # a new interpreter per resume takes ~0.5 s
    report = targets.numpy_walk.audit(8, 50, 1, steps=steps, fresh_process=fresh_process)
    assert report.ok, report
    assert (report.steps, report.resumes, report.step, report.path) == (steps, steps, None, None)


@pytest.mark.parametrize("fresh_process", [False, True])
def test_a_method_passes(fresh_process: bool) -> None:
    """obj.method.audit(...) audits the bound call, in this process or a new one."""
    report = targets.Walker(2.5).walk.audit(7, steps=2, fresh_process=fresh_process)
    assert report.ok, report
    assert (report.steps, report.resumes) == (2, 2)


@pytest.mark.parametrize("fresh_process", [False, True])
def test_a_deap_loop_passes(fresh_process: bool) -> None:
    """DEAP individuals (list subclasses with a fitness) drawn from the captured random."""
    report = targets.deap_sphere.audit(6, steps=3, fresh_process=fresh_process)
    assert report.ok, report


def test_a_noisy_deap_fitness_is_named_down_to_its_value() -> None:
    """A fitness drawn from a generator outside the state: the path ends in .fitness."""
    report = targets.deap_sphere.audit(6, True, steps=3)
    assert not report.ok
    assert report.path is not None
    assert re.fullmatch(r"state\['population'\]\[\d+\]\.fitness\.wvalues\[0\]",
                        report.path), report


@pytest.fixture
def ga(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import ga as module

    return module


@pytest.mark.parametrize("fresh_process", [False, True])
def test_the_ga_example_passes(ga: Any, memory_url: str, fresh_process: bool) -> None:
    """examples/ga.py's evolve resumes bit for bit, but for the seconds it measures."""
    evolve = checkpointed(store=memory_url)(ga.evolve)
    report = evolve.audit(20, 30, 1, dims=5, exclude=["state['seconds']"],
                          steps=3 if fresh_process else 5, fresh_process=fresh_process)
    assert report.ok, report
    assert MemoryStore(memory_url.split("://")[1]).list("") == []


def test_the_ga_example_differs_only_in_its_measured_seconds(ga: Any, memory_url: str) -> None:
    """Without exclude, the one thing that may differ is the wall-clock time in the state."""
    report = checkpointed(store=memory_url)(ga.evolve).audit(20, 30, 1, dims=5)
    assert report.ok or report.path == "state['seconds']", report


def test_exclude_accepts_either_quote_and_one_string(ga: Any, memory_url: str) -> None:
    """exclude='state["seconds"]' is the path the report prints as state['seconds']."""
    report = checkpointed(store=memory_url)(ga.evolve).audit(
        12, 20, 2, dims=4, steps=3, exclude='state["seconds"]')
    assert report.ok, report


def _really_resumes_identically(fn: Any, make_args: Any, n: int, crash_after: int) -> bool:
    """The experiment the audit stands for: stop after a step, resume with new arguments."""
    def states(store: str, stop: int | None = None) -> list[bytes]:
        it = checkpointed(store=store, run_id="really")(fn).iter(*make_args())
        out = []
        for state in it:
            out.append(pickle.dumps(state, protocol=5))
            if len(out) == stop:
                it.close()  # saves that step, as a SIGTERM would
                break
        return out

    tag = f"really-{fn.__qualname__}-{crash_after}"
    start = (random.getstate(), np.random.get_state())
    try:
        expected = states(f"memory://{tag}-a")
        random.setstate(start[0])  # both runs start from the same global RNGs
        np.random.set_state(start[1])
        resumed = states(f"memory://{tag}-b", crash_after)[:crash_after]
        resumed += states(f"memory://{tag}-b")
    finally:
        MemoryStore(f"{tag}-a").clear()
        MemoryStore(f"{tag}-b").clear()
    return all(first_difference(pickle.loads(x), pickle.loads(y)) is None
               for x, y in zip(expected, resumed, strict=True))


@pytest.mark.parametrize(("fn", "make_args"), [
    (targets.draws_from_module_rng.__wrapped__, lambda: (4,)),
    (targets.reads_the_clock.__wrapped__, lambda: (4,)),
    (targets.iterates_a_set.__wrapped__, lambda: (4,)),
    (targets.numpy_walk.__wrapped__, lambda: (4, 6, 9)),
    (targets.Walker.walk.__wrapped__, lambda: (targets.Walker(0.5), 4)),
    (targets.Walker.counts.__wrapped__, lambda: (targets.Walker(0.5), 4)),
    (targets.Sampler.run.__wrapped__, lambda: (targets.Sampler(4), 4)),
], ids=["module-rng", "clock", "set", "numpy", "method", "counter-on-self", "rng-on-self"])
def test_the_verdict_agrees_with_a_real_interrupted_run(fn: Any, make_args: Any) -> None:
    """ok exactly when stopping after step 1, 2 or 3 and resuming gives the same states."""
    really = all(_really_resumes_identically(fn, make_args, 4, k) for k in (1, 2, 3))
    report = checkpointed(store="memory://never-used")(fn).audit(*make_args(), steps=4)
    assert report.ok == really, report
    assert MemoryStore("never-used").list("") == []


@pytest.mark.parametrize("options", [
    {"every": 3, "keep": 1},
    {"every": "1h", "restarts": 2},
    {"serializer": "cloudpickle"},
    {"signing_key": "k" * 32},
    {"capture_rng": False},
])
def test_the_function_options_are_used_and_do_not_matter(options: dict[str, Any]) -> None:
    """Whatever every, keep or restarts say, every step is audited with the same serializer."""
    body = checkpointed(store="memory://never-used", **options)(targets.numpy_walk.__wrapped__)
    if not options.get("capture_rng", True):
        report = body.audit(8, 5, 3)  # numpy's global RNG, not captured: resumes differ
        assert not report.ok and report.path == "state['x'][0, 0]", report
        return
    report = body.audit(8, 5, 3, steps=4)
    assert report.ok, report
    assert (report.steps, report.resumes) == (4, 4)
    assert MemoryStore("never-used").list("") == []


def test_the_path_starts_with_the_state_argument_name() -> None:
    """state_arg="ckpt" names paths ckpt[...]."""
    @checkpointed(state_arg="ckpt")
    def clock(n: int, *, ckpt: Any = None) -> Generator[Any]:
        ckpt = ckpt or {"t": []}
        while len(ckpt["t"]) < n:
            ckpt["t"].append(time.time())
            yield ckpt

    report = clock.audit(4, steps=2)
    assert (report.ok, report.path) == (False, "ckpt['t'][0]")


@settings(max_examples=10)
@given(size=st.integers(1, 6), seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 4))
def test_any_numpy_walk_passes_and_a_module_rng_always_fails(size: int, seed: int,
                                                             steps: int) -> None:
    """For any problem size, seed and number of steps: the verdicts do not depend on them."""
    assert targets.numpy_walk.audit(steps + 1, size, seed, steps=steps).ok
    report = targets.draws_from_module_rng.audit(steps + 1, steps=steps)
    assert (report.ok, report.step, report.resumed_from) == (False, 1, 0)


# -- it never touches the real run ----------------------------------------------------

def test_never_touches_the_real_run_the_arguments_or_the_global_rngs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$RESUMABLE_STORE/$RESUMABLE_RUN_ID stay unused, arguments unchanged, RNGs restored."""
    real = tmp_path / "real-store"
    monkeypatch.setenv("RESUMABLE_STORE", str(real))
    monkeypatch.setenv("RESUMABLE_RUN_ID", "the-real-run")

    @checkpointed()
    def body(log: list[float], n: int, *, state: Any = None) -> Generator[Any]:
        state = state or {"step": 0, "total": 0.0}
        while state["step"] < n:
            state["total"] += random.random() + float(np.random.random())
            state["step"] += 1
            log.append(state["step"])  # changes the argument, not the state
            yield state

    random.seed(5)
    np.random.seed(5)
    before = (random.getstate(), pickle.dumps(np.random.get_state()))
    log: list[float] = []
    report = body.audit(log, 6)
    assert report.ok, report
    assert log == []  # each run got its own copy
    assert (random.getstate(), pickle.dumps(np.random.get_state())) == before
    assert not real.exists()
    assert body.latest(log, 6) is None

    body([], 4)  # a real run, completed, in the real store under the real run id
    files = {p: p.read_bytes() for p in real.rglob("*") if p.is_file()}
    assert files and all("the-real-run" in str(p) for p in files)
    report = body.audit([], 4, steps=3)  # runs the body: no stored result is returned
    assert (report.ok, report.steps, report.resumes) == (True, 3, 3)
    assert {p: p.read_bytes() for p in real.rglob("*") if p.is_file()} == files


def test_a_function_saving_to_s3_is_audited_without_opening_s3() -> None:
    """The real store is never opened: no bucket, no endpoint, no credentials needed."""
    body = checkpointed(store="s3://no-such-bucket/runs")(targets.numpy_walk.__wrapped__)
    report = body.audit(6, 4, 1, steps=3)
    assert report.ok, report


def test_an_audit_in_another_thread() -> None:
    """Runs started outside the main thread (no signal handler) are audited the same."""
    reports: list[AuditReport] = []
    worker = threading.Thread(target=lambda: reports.append(
        targets.Walker(1.0).walk.audit(5, steps=3)))
    worker.start()
    worker.join()
    assert len(reports) == 1 and reports[0].ok, reports


def test_a_fresh_process_audit_leaves_no_files(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The store copies the new interpreters resume from are deleted afterwards."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    report = targets.Walker(1.5).walk.audit(5, steps=2, fresh_process=True)
    assert report.ok, report
    assert list(tmp_path.iterdir()) == []


def test_a_body_that_returns_before_steps_is_audited_as_far_as_it_goes() -> None:
    """steps=5 on a two-step run audits two steps, and resumes from its last checkpoint
    too (only the return is left to run); a run with no yield has nothing to audit."""
    report = targets.numpy_walk.audit(2, 3, 1, steps=5)
    assert (report.ok, report.steps, report.resumes, report.returned) == (True, 2, 3, True)
    report = targets.numpy_walk.audit(0, 3, 1)
    assert (report.ok, report.steps, report.resumes) == (True, 0, 0)


def test_an_uninterrupted_run_that_raises_is_an_error_not_a_verdict() -> None:
    """Nothing to compare with: the audit says what the body raised, and where."""
    @checkpointed()
    def broken(n: int, *, state: Any = None) -> Generator[Any]:
        yield {"step": 1}
        raise ValueError("bad input")

    with pytest.raises(ResumableError, match=r"uninterrupted run raised ValueError: bad input "
                                             r"at step 2"):
        broken.audit(5)


# -- what it refuses ------------------------------------------------------------------

def test_fresh_process_refuses_a_nested_function(memory_url: str) -> None:
    """A closure cannot be imported by a new interpreter: a clear error, nothing run."""
    @checkpointed(store=memory_url)
    def nested(n: int, *, state: Any = None) -> Generator[Any]:
        yield n

    with pytest.raises(ConfigurationError, match=r"inside a function.*fresh_process=False"):
        nested.audit(3, fresh_process=True)


def test_fresh_process_refuses_a_function_of_main(memory_url: str) -> None:
    """A script's functions live in __main__, which a new interpreter does not have."""
    def script_body(n: int, *, state: Any = None) -> Generator[Any]:
        yield n

    script_body.__module__, script_body.__qualname__ = "__main__", "script_body"
    with pytest.raises(ConfigurationError, match=r"defined in __main__.*move it into a module"):
        checkpointed(store=memory_url)(script_body).audit(3, fresh_process=True)


@pytest.mark.parametrize("steps", [0, -1, True, 2.5])
def test_steps_must_be_a_positive_int(steps: Any) -> None:
    """steps=0 and friends fail before anything runs."""
    with pytest.raises(ConfigurationError, match="steps must be an int >= 1"):
        targets.numpy_walk.audit(3, 4, 1, steps=steps)


# -- the report -----------------------------------------------------------------------

def test_the_report_reads_well() -> None:
    """str() says what diverged, where and how; repr() shows the fields."""
    bad = targets.reads_the_clock.audit(8, steps=3)
    text = str(bad)
    assert text.splitlines()[0] == (
        "audit of reads_the_clock: 3 step(s) uninterrupted, 1 resume(s) in this process: "
        "DIVERGES")
    assert "  first divergent step: 1 (resumed from step 0)" in text
    assert "  path: state['started']" in text
    assert repr(bad).startswith("AuditReport(ok=False, step=1, path=\"state['started']\", "
                                "resumed_from=0, detail='values differ; uninterrupted: ")
    good = targets.numpy_walk.audit(8, 5, 2, steps=2)
    assert str(good) == ("audit of numpy_walk: 2 step(s) uninterrupted, 2 resume(s) in this "
                         "process: every resumed state is bit-identical to the uninterrupted run")
    assert repr(good) == "AuditReport(ok=True, function='numpy_walk', steps=2, resumes=2)"
    assert isinstance(good, AuditReport)


def test_the_summary_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """One line for a pass (INFO), a warning for a divergence; the audit's runs stay quiet."""
    with caplog.at_level("INFO", logger="resumable"):
        targets.numpy_walk.audit(8, 5, 2, steps=2)
        targets.reads_the_clock.audit(8, steps=2)
    messages = [(r.levelname, r.getMessage().splitlines()[0]) for r in caplog.records]
    assert messages == [
        ("INFO", "audit of numpy_walk: 2 step(s) uninterrupted, 2 resume(s) in this process: "
                 "every resumed state is bit-identical to the uninterrupted run"),
        ("WARNING", "audit of reads_the_clock: 2 step(s) uninterrupted, 1 resume(s) in this "
                    "process: DIVERGES"),
    ]


# -- the comparison -------------------------------------------------------------------

def test_floats_compare_by_their_bits() -> None:
    """NaN equals NaN, -0.0 differs from 0.0, and equal reprs show the bits."""
    nan = float("nan")
    assert first_difference({"x": [nan, 1.0]}, {"x": [nan, 1.0]}) is None
    diff = first_difference({"x": [0.0]}, {"x": [-0.0]})
    assert diff is not None and diff.path == "state['x'][0]"
    other_nan = struct_nan(1)
    diff = first_difference([nan], [other_nan])
    assert diff is not None and diff.path == "state[0]"
    assert (diff.expected, diff.actual) == ("nan (bits 7ff8000000000000)",
                                            "nan (bits 7ff8000000000001)")


def struct_nan(payload: int) -> float:
    import struct

    value: float = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0]
    return value


def test_numpy_values_compare_by_dtype_shape_and_bytes() -> None:
    """The first differing element is named by its index; dtype and shape come first."""
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    b = a.copy()
    b[1, 2] = np.nextafter(b[1, 2], np.inf)
    diff = first_difference({"pop": a}, {"pop": b})
    assert diff is not None and diff.path == "state['pop'][1, 2]"
    assert "1 of 12 element(s) differ (float64)" in diff.reason
    diff = first_difference(a, a.astype(np.float32))
    assert diff is not None and diff.reason == "dtypes differ"
    diff = first_difference(a, a.reshape(4, 3))
    assert diff is not None and diff.reason == "shapes differ"
    assert first_difference(np.float32(1), np.float64(1)) is not None
    g1, g2 = np.random.default_rng(1), np.random.default_rng(1)
    assert first_difference(g1, g2) is None
    g2.random()
    diff = first_difference({"rng": g1}, {"rng": g2})
    assert diff is not None and diff.path.startswith("state['rng'].bit_generator.state[")


def test_a_difference_after_an_equal_rng_is_found() -> None:
    """The walk compares each random.Random by its getstate(), a new tuple per call. With
    the first pair of tuples freed, the second pair could get their ids, and the walk took
    them as a pair it had compared already: a second Random that differs was missed, and
    f.audit called two different states identical."""
    same = [random.Random(i) for i in range(4)]
    other = [random.Random(i) for i in range(3)] + [random.Random(9)]
    diff = first_difference({"rngs": same}, {"rngs": other})
    assert diff is not None and diff.path.startswith("state['rngs'][3].getstate()")
    diff = first_difference({"r1": random.Random(1), "r2": random.Random(2)},
                            {"r1": random.Random(1), "r2": random.Random(3)})
    assert diff is not None and diff.path.startswith("state['r2']")


class _ArrayIndividual(np.ndarray):  # type: ignore[type-arg]
    """As DEAP's creator makes an individual of numpy.ndarray: its fitness in __dict__,
    pickled by its own __reduce__."""

    def __reduce__(self) -> Any:
        return (_array_individual, (self.__array__(), dict(self.__dict__)))


def _array_individual(array: Any, attrs: dict[str, Any]) -> Any:
    out = np.asarray(array).view(_ArrayIndividual)
    out.__dict__.update(attrs)
    return out


def test_state_kept_outside_attributes_is_compared() -> None:
    """Objects whose state is not (only) in __dict__ or __slots__: what pickle keeps of
    them is compared. Before, each of these pairs was called identical."""
    import collections
    import functools

    assert first_difference(functools.partial(max, 1), functools.partial(max, 1)) is None
    diff = first_difference({"f": functools.partial(max, 1)}, {"f": functools.partial(max, 2)})
    assert diff is not None and diff.path.startswith("state['f']")
    diff = first_difference([ValueError("a")], [ValueError("b")])
    assert diff is not None and diff.path.startswith("state[0]")
    diff = first_difference(collections.deque([1], maxlen=3), collections.deque([1]))
    assert diff is not None and "maxlen" in diff.path
    a = _array_individual(np.arange(3.0), {"fitness": (1.0,)})
    b = _array_individual(np.arange(3.0), {"fitness": (2.0,)})
    assert first_difference(a, _array_individual(np.arange(3.0), {"fitness": (1.0,)})) is None
    diff = first_difference([a], [b])
    assert diff is not None and diff.path == "state[0].fitness[0]"


class _SetIndividual(set[int]):
    """As DEAP's knapsack example makes its individuals: a set with a fitness."""

    def __init__(self, genes: Any = ()) -> None:
        super().__init__(genes)
        self.fitness = (float(len(self)),)


def test_a_set_subclass_compares_by_elements_not_by_iteration_order() -> None:
    """A set's iteration order may change when it is loaded again; its reduce lists the
    elements in that order. Before: {7, 15} read back was 'differs at ...[1][0][0]'."""
    a = _SetIndividual({7, 15, 1024 + 7, 3})
    b = a
    for _ in range(4):
        b = pickle.loads(pickle.dumps(b))
        assert first_difference([a], [b]) is None
    c = _SetIndividual({7, 16, 1024 + 7, 3})
    assert first_difference([a], [c]) is not None
    d = _SetIndividual(a)
    d.fitness = (0.5,)
    diff = first_difference([a], [d])
    assert diff is not None and diff.path == "state[0].fitness[0]"


def test_dict_keys_compare_by_their_bits_and_types() -> None:
    """Keys were compared with ==: 0.0 and -0.0, 1 and True, 1 and 1.0 were the same key
    (states called identical), and a key holding a NaN read back was another key."""
    nan = float("nan")
    for a, b in [({0.0: 1}, {-0.0: 1}), ({(0.0, 1.5): 1}, {(-0.0, 1.5): 1}),
                 ({1: "x"}, {True: "x"}), ({1: "x"}, {1.0: "x"}),
                 ({np.float64(0.5): 1}, {0.5: 1})]:
        diff = first_difference({"cache": a}, {"cache": b})
        assert diff is not None and diff.path.startswith("state['cache']"), (a, b)
    cache = {(nan, 1.5): 2.0, (0.5, 1.5): 3.0}
    assert first_difference(cache, pickle.loads(pickle.dumps(cache))) is None
    diff = first_difference({"a": 1, "b": 2}, {"a": 1, "b": 3})
    assert diff is not None and diff.path == "state['b']"


def test_a_generator_compares_its_seed_sequence_too() -> None:
    """Two Generators in the same bit-generator state whose SeedSequences have spawned a
    different number of children spawn different streams: before, 'identical'. (numpy 2
    pickles the SeedSequence with the bit generator, so a resumed run has it too.)"""
    g1, g2 = np.random.default_rng(1), np.random.default_rng(1)
    g2.spawn(1)
    assert g1.bit_generator.state == g2.bit_generator.state
    diff = first_difference({"rng": g1}, {"rng": g2})
    assert diff is not None and diff.path.startswith("state['rng'].bit_generator")
    assert first_difference(np.random.default_rng(1), np.random.default_rng(1)) is None


def test_set_elements_that_share_parts_differently_are_the_same_elements() -> None:
    """A set element's own pickle records what it shares: ("relu", "relu", "tanh") with
    its first gene read back from a checkpoint pickles otherwise. Before: 'elements
    differ in their bits' for equal sets."""
    live = ("relu", "relu", "tanh")
    restored = ("".join(["re", "lu"]), "relu", "tanh")  # an equal string, another object
    assert pickle.dumps(live) != pickle.dumps(restored)
    assert first_difference({"tabu": {live, ("a", "b")}}, {"tabu": {restored, ("a", "b")}}) is None
    nan = float("nan")
    elements = {(nan, 1.0), (2.0, nan)}
    assert first_difference(elements, pickle.loads(pickle.dumps(elements))) is None
    assert first_difference({(0.0, "x")}, {(-0.0, "x")}) is not None
    assert first_difference({live}, {("relu", "tanh", "relu")}) is not None


def test_structured_arrays_with_object_fields_compare_by_value() -> None:
    """Their elements' bytes hold pointers for the object fields. Before: an array read
    back was 'different'; now the fields are compared one by one."""
    dtype = np.dtype([("n", "i8"), ("genes", "O")])
    a = np.array([(1, [1.0, 2.0]), (2, [3.0])], dtype=dtype)
    assert first_difference(a, pickle.loads(pickle.dumps(a))) is None
    b = np.array([(1, [1.0, 2.0]), (2, [-3.0])], dtype=dtype)
    diff = first_difference({"pop": a}, {"pop": b})
    assert diff is not None and diff.path == "state['pop'][1]['genes'][0]"


def test_a_jumped_bit_generator_is_not_a_divergence() -> None:
    """numpy's jumped() gives the new bit generator a SeedSequence of fresh OS entropy,
    which no resumed run has alike; the draws are what count. Spawned children are."""
    g = np.random.PCG64(1)
    a, b = np.random.Generator(g.jumped()), np.random.Generator(g.jumped())
    assert first_difference({"rngs": [a]}, {"rngs": [b]}) is None


def test_masked_arrays_compare_by_data_mask_and_fill_value() -> None:
    """A masked array read back has its default fill value set where the live one has
    none: equal, not 'types differ: NoneType / numpy.ndarray'. Its mask counts."""
    m = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    assert first_difference({"m": m}, {"m": pickle.loads(pickle.dumps(m))}) is None
    other = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 0, 1])
    diff = first_difference({"m": m}, {"m": other})
    assert diff is not None and diff.path.startswith("state['m'].mask")


def _deep(depth: int, leaf: Any) -> Any:
    x = leaf
    for _ in range(depth):
        x = (x, 0)
    return x


def test_a_part_too_deep_to_compare_hides_no_difference_elsewhere() -> None:
    """The walk could not finish a deep part, so it said 'too deeply nested to compare'
    for the whole state, and islands accepted a republish whose 'best' differs."""
    depth = sys.getrecursionlimit() * 2
    diff = first_difference({"lineage": _deep(depth, 1.0), "best": 1.0},
                            {"lineage": _deep(depth, 1.0), "best": 2.0})
    assert diff is not None and diff.path == "state['best']"
    diff = first_difference({"lineage": _deep(depth, 1.0), "best": 1.0},
                            {"lineage": _deep(depth, 1.0), "best": 1.0})
    assert diff is not None and diff.reason == TOO_DEEP
    # in a set: undecided too, not 'elements differ'
    diff = first_difference({_deep(depth, 1.0)}, {_deep(depth, 1.0)})
    assert diff is not None and diff.reason == TOO_DEEP


def test_large_sets_whose_elements_share_parts_differently_are_equal() -> None:
    """Elements that hash by their id (a NaN inside) could only be paired one against
    every other: 1,000 took seconds, 1,001 were 'different'."""
    a = {("relu", "relu", float("nan"), i) for i in range(3000)}  # a NaN object each
    b = {("".join(["re", "lu"]) if i == 7 else "relu", "relu", float("nan"), i)
         for i in range(3000)}
    assert first_difference(a, b) is None
    b.add(("relu", "tanh", float("nan"), 0))
    assert first_difference(a, b) is not None


class _Linked:
    """A lineage chain of objects that pickle themselves."""

    def __init__(self, genes: list[int], parent: Any = None) -> None:
        self.genes, self.parent = genes, parent

    def __reduce__(self) -> Any:
        return (_Linked, (self.genes, self.parent))


def test_a_deep_chain_of_objects_that_pickle_themselves_is_compared() -> None:
    """200 levels, which pickle itself handles: before, 'too deeply nested to compare'."""
    def chain(n: int, last: int = 1) -> Any:
        x = None
        for g in range(n):
            x = _Linked([g % 2, last if g == 0 else 1], x)
        return x

    assert first_difference(chain(200), pickle.loads(pickle.dumps(chain(200)))) is None
    diff = first_difference(chain(200), chain(200, last=2))
    assert diff is not None and diff.reason == "values differ"


class _Fitness:
    def __init__(self, values: tuple[float, ...]) -> None:
        self.wvalues = values


class _Individual(list[float]):
    def __init__(self, genes: list[float], fitness: float) -> None:
        super().__init__(genes)
        self.fitness = _Fitness((fitness,))


def test_paths_name_keys_indices_and_attributes() -> None:
    """The path reads like code: state['population'][3].fitness.wvalues[0]."""
    a = {"population": [_Individual([1.0, 2.0], float(i)) for i in range(5)]}
    b = pickle.loads(pickle.dumps(a))
    b["population"][3].fitness.wvalues = (3.5,)
    diff = first_difference(a, b)
    assert diff is not None and diff.path == "state['population'][3].fitness.wvalues[0]"
    assert (diff.expected, diff.actual) == ("3.0", "3.5")


def test_sets_dict_order_and_exclusions() -> None:
    """Sets by elements, dicts by keys in order; an excluded path is skipped."""
    diff = first_difference({"s": {"a", "b"}}, {"s": {"a", "c"}})
    assert diff is not None and diff.path == "state['s']" and "'b'" in diff.expected
    nan = float("nan")
    assert first_difference({nan, 1.0}, pickle.loads(pickle.dumps({nan, 1.0}))) is None
    assert first_difference({0.0}, {-0.0}) is not None
    diff = first_difference({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert diff is not None and diff.reason == "same keys in another order"
    assert first_difference({"t": 1.0, "x": 2}, {"t": 9.0, "x": 2}, exclude=["state['t']"]) is None


leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=5),
    st.binary(max_size=5),
    # Native byte order: numpy pickles a big-endian datetime64 array as a native one.
    hnp.arrays(hnp.scalar_dtypes().filter(lambda d: d.isnative),
               hnp.array_shapes(max_dims=2, max_side=3)),
)
trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), children, max_size=4),
    ),
    max_leaves=12,
)


def _leaf_paths(tree: Any, path: str = "state") -> list[str]:
    if isinstance(tree, dict):
        return [p for k, v in tree.items() for p in _leaf_paths(v, f"{path}[{k!r}]")]
    if isinstance(tree, (list, tuple)):
        return [p for i, v in enumerate(tree) for p in _leaf_paths(v, f"{path}[{i}]")]
    return [path]


def _replace(tree: Any, path: str, target: str, value: Any) -> Any:
    if path == target:
        return value
    if isinstance(tree, dict):
        return {k: _replace(v, f"{path}[{k!r}]", target, value) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_replace(v, f"{path}[{i}]", target, value)
                          for i, v in enumerate(tree))
    return tree


@given(trees)
def test_a_state_equals_its_resumed_copy(tree: Any) -> None:
    """A pickle round trip (what a resume does) never shows a difference."""
    assert first_difference(tree, pickle.loads(pickle.dumps(tree, protocol=5))) is None


@given(trees, st.data())
def test_a_changed_leaf_is_named_by_its_path(tree: Any, data: st.DataObject) -> None:
    """Change one leaf anywhere: the walk names exactly that path."""
    paths = _leaf_paths(tree)
    assume(paths)
    target = data.draw(st.sampled_from(paths))
    changed = _replace(tree, "state", target, ("changed",))
    diff = first_difference(tree, changed)
    assert diff is not None and diff.path == target, (diff, target)



def test_a_body_that_returns_before_its_first_yield_claims_nothing() -> None:
    """No yield, no checkpoint, no resume: the report said "every resumed state ... is
    bit-identical", a claim about nothing (left alone in note 19). It stays ok (nothing
    differs) and says there was nothing to compare."""

    @checkpointed(store="memory://audit-no-yield", run_id="r")
    def early(n: int, *, state: Any = None) -> Any:
        return n
        yield  # a generator function that never yields

    report = early.audit(3)
    assert report.ok and report.steps == 0 and report.resumes == 0
    text = str(report)
    assert "bit-identical" not in text, text
    assert "nothing to compare" in text and "before its first yield" in text, text
