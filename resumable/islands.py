"""Islands: several checkpointed runs that exchange migrants through the store.

Each island is its own ``@checkpointed`` run (in Kubernetes, one index of an Indexed
Job). Every ``every`` generations an island publishes its emigrants as an immutable,
create-only object ``<experiment>/migrants/<island>/<generation>`` and reads the
emigrants its topology sends it for the same generation, waiting until they exist::

    archipelago = Archipelago("s3://bucket/islands", "exp-1", islands=4, every=5)

    @checkpointed(store="s3://bucket/islands")
    def island(archipelago, index, generations, *, state=None):
        ...
        immigrants = archipelago.migrate(index, generation, emigrants)  # [] when not due
        ...
        yield state

    island(archipelago, index, 50)

The island's run id must name the experiment: passed as an argument, the Archipelago is
part of the derived run id by its plan (store URL, experiment, islands, topology, every,
serializer, generations; not its signing key, timeout or store client), the same in every
process, so a restarted island resumes its run and another experiment is another run.
With a global archipelago and ``island(index, generations)`` a new experiment name
would resume, or return the stored result of, the old experiment's island runs. A fixed
``run_id=f"exp-1.island-{index}"`` does as well.

An experiment is signed by all its islands or by none (``signing_key=`` or
``$RESUMABLE_SIGNING_KEY``), as its plan's signature says: an island without the key in a
signed experiment is refused (ConfigurationError) before it writes anything, as is a keyed
island in an unsigned one (CheckpointTamperedError). An Archipelago with ``signing_key=``
is never pickled (its key would travel in clear, as with a ``@checkpointed`` function's);
one keyed from the environment pickles without the key and reads it where it is loaded.

Migrant objects are written once and never change, so an island resumed after a crash
reads exactly what it read before, and the archipelago's result does not depend on
which pods died when. A publish of a generation that already has an object must give
the same values, bit for bit, else ``MigrantConflictError``: a zombie island can never
replace what the live one wrote, and a body that is not deterministic is caught at its
first migration. The record itself is deterministic (no wall-clock time in it), so
republishing the same objects gives the same bytes; a resumed island's emigrants may not:
pickle's bytes also say which objects are shared (a DEAP individual restored from a
checkpoint no longer shares its ``"fitness"`` key with its class, a restored array's
dtype is not numpy's own object), so where the bytes differ both are loaded and compared
value by value, as ``f.audit`` compares states.

An island that ends before a neighbour needs its migrants must not leave the neighbour
waiting for the timeout in every retry: ``generations=`` puts the last generation in
the plan, and ``finish(island, generation)`` records a create-only
``<experiment>/finished/<island>`` that a waiting neighbour reads (ConfigurationError at
once). A create-only write the store refuses with nothing there to read (a local folder
at the name) is a StoreError naming the key, never a zombie's conflict; a reader sees no
object at a folder's name (as on S3), and its timeout's message names the keys below it.

``f.audit`` of an island body does not write to the experiment: while the audit runs the
body (its thread, threads in a copy of its context, every thread of a
``fresh_process=True`` interpreter), the plan, migrants and finish markers it writes go
to the audit's private overlay, and reads look there first, then in the store. Any other
thread is real, audit or not: a plain thread the body starts, and processes it starts,
write to the experiment (threads cannot be told to be the body's otherwise); a process
forked from an audit (a fork pool made inside it) is refused, as its writes would go into
a copy of the overlay that nobody reads.
The island's own objects are the audit's alone, so a resume's republish is compared with
the audit's uninterrupted run's (a non-deterministic body is still caught). A neighbour's
migrants that are nowhere are a ConfigurationError at once, never a wait: the audit
needs them to exist in the experiment already.
"""

from __future__ import annotations

import contextlib
import json
import logging
import numbers
import operator
import os
import pickle
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from . import _format, _settings
from ._audit import TOO_DEEP, Sandbox, current_sandbox, first_difference
from ._decorator import _signing_key
from ._errors import (
    EXIT_CORRUPT,
    EXIT_STORE,
    CheckpointCorruptError,
    CheckpointTamperedError,
    ConfigurationError,
    ResumableError,
    StoreError,
)
from .serializers import Serializer, dumps_frames, get_serializer, loads_frames
from .stores import Store, join_payload, open_store

log = logging.getLogger("resumable")

TIMEOUT_ENV = "RESUMABLE_MIGRATION_TIMEOUT"
DEFAULT_TIMEOUT = 600.0  # seconds: long enough for a killed pod to be replaced and catch up
KIND = "migrants"
PLAN = "plan"  # <experiment>/plan: the plan every island of the experiment must share
FINISHED = "finished"  # <experiment>/finished/<island>: the generation its run ended at
_CREATE_TRIES = 3  # create-only write refused, yet nothing to read: tries before giving up
MAX_KEY_BYTES = 255  # an object's name, as the verified format records it (UTF-8 bytes)
# Without generations=, the longest key an experiment name must leave room for: one of a
# generation of this many digits (a billion generations less one).
_UNBOUNDED_DIGITS = 9
_jitter = random.Random()  # private retry jitter: never the captured global RNG, and not an
# attribute of an Archipelago (capture_rng would save it, the run id would encode it)
Topology = str | Mapping[int, Sequence[int]]


class MigrationError(ResumableError):
    """Migrants could not be exchanged: a neighbour's emigrants never appeared.

    Retriable (exit 74): a new pod resumes and waits again.
    """

    exit_code = EXIT_STORE


class MigrantConflictError(MigrationError):
    """A generation's emigrants were already published with different content.

    Either a zombie attempt computed something else, or the island body is not
    deterministic; retrying does not help (exit 65).
    """

    exit_code = EXIT_CORRUPT


def _timeout(value: float | None) -> float:
    if value is None:
        return _settings.MIGRATION_TIMEOUT.read()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
        raise ConfigurationError(
            f"migration timeout must be a number of seconds >= 0, not {value!r}")
    return float(value)


def _sources(islands: int, topology: Topology) -> dict[int, tuple[int, ...]]:
    """For each island, the islands whose emigrants it receives, in order."""
    if topology == "ring":
        return {i: ((i - 1) % islands,) if islands > 1 else () for i in range(islands)}
    if topology == "full":
        return {i: tuple(j for j in range(islands) if j != i) for i in range(islands)}
    if isinstance(topology, str):
        raise ConfigurationError(
            f"unknown topology {topology!r}; use 'ring', 'full' or a mapping "
            "{island: [islands it receives from]}"
        )
    if not isinstance(topology, Mapping):
        raise ConfigurationError(
            "topology must be 'ring', 'full' or a mapping {island: [islands it receives "
            f"from]}}, not {topology!r}"
        )
    out: dict[int, tuple[int, ...]] = {}
    for island in range(islands):
        given = topology.get(island, ())
        if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Iterable):
            raise ConfigurationError(
                f"topology: island {island} receives from {given!r}, not a list of islands "
                f"in 0..{islands - 1}"
            )
        senders = []
        for s in given:
            index = None if isinstance(s, bool) else getattr(s, "__index__", None)
            if index is None or not 0 <= index() < islands or index() == island:
                raise ConfigurationError(
                    f"topology: island {island} receives from {s!r}, which is not another "
                    f"island in 0..{islands - 1}"
                )
            if index() in senders:
                raise ConfigurationError(
                    f"topology: island {island} receives from {index()} twice ({given!r}): "
                    "its migrants would arrive twice; name each sender once"
                )
            senders.append(index())
        out[island] = tuple(senders)
    extra = set(topology) - set(range(islands))
    if extra:
        raise ConfigurationError(f"topology names islands {sorted(extra)} outside 0..{islands - 1}")
    return out


class Archipelago:
    """The migration plan of ``islands`` island runs that share ``store`` and ``experiment``.

    ``topology``: ``"ring"`` (island i receives from i-1), ``"full"`` (from every other
    island) or a mapping ``{island: [islands it receives from]}``. ``every``: migrate at
    generations that are multiples of it. ``signing_key`` (or ``$RESUMABLE_SIGNING_KEY``)
    signs and checks migrants as it does checkpoints. ``timeout`` (or
    ``$RESUMABLE_MIGRATION_TIMEOUT``, default 600 s) bounds the wait for a neighbour.
    ``generations`` (optional): the last generation of every island; it joins the plan,
    so an island run for another number of generations is refused at its first
    migration instead of leaving a neighbour waiting for migrants that never come.
    ``finish(island, generation)`` records where an island's run ended.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store | None,
        experiment: str,
        islands: int,
        topology: Topology = "ring",
        every: int = 1,
        *,
        signing_key: bytes | str | None = None,
        timeout: float | None = None,
        serializer: str | Serializer = "pickle",
        generations: int | None = None,
    ) -> None:
        islands = _integer("islands", islands, 1, "a positive int")
        every = _integer("every", every, 1, "a positive int (generations)")
        if generations is not None:
            generations = _integer("generations", generations, 1,
                                   "a positive int (every island's last generation) or None")
        _check_experiment(experiment, islands, generations)
        sources = _sources(islands, topology)
        seconds = _timeout(timeout)
        self.store = open_store(store)
        self.experiment = experiment
        self.islands = islands
        self.every = every
        self.generations = generations
        self.sources = sources
        self.timeout = seconds
        self._key = _signing_key(signing_key)
        # signing_key= given (not $RESUMABLE_SIGNING_KEY): such an Archipelago is never
        # pickled, as a @checkpointed function with signing_key= is not by value.
        self._key_given = signing_key is not None
        self._serializer = get_serializer(serializer)
        self._real = _Experiment(self.store)  # what runs outside an f.audit read and write

    def __repr__(self) -> str:
        return (f"Archipelago({self.store.url!r}, {self.experiment!r}, "
                f"islands={self.islands}, every={self.every}, "
                f"generations={self.generations})")

    def _identity_parts(self) -> tuple[Any, None]:
        """What identifies it as an island body's argument (the run id, and a fixed run
        id's check): the experiment it migrates in, its store and its plan, as every
        process makes them alike. Not its signing key (from the environment or not), its
        timeout, its store client or what it has cached: a restarted island with the same
        Archipelago(...) resumes its run, and another experiment is another run.
        (The hook the run id's encoding asks an object for before pickling it; pickling
        would carry more, or, with signing_key=, refuse.)"""
        return ("resumable.islands.Archipelago", self.store.url, self.experiment,
                self.plan()), None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a Dask task, a process pool): the plan, store and settings, never the
        signing key. With signing_key= it would travel in clear, so it is refused (as a
        @checkpointed function with signing_key= is); a key from $RESUMABLE_SIGNING_KEY is
        left out and read from the environment where it is loaded."""
        if self._key_given:
            raise pickle.PicklingError(
                f"cannot pickle the Archipelago of experiment {self.experiment!r} "
                f"({self.store.url}): it would carry its signing_key= in clear; give the key "
                "through $RESUMABLE_SIGNING_KEY instead (set on the workers too: a pickled "
                "Archipelago reads it where it is loaded), or make the Archipelago in a "
                "module the workers import (a function that uses it is then pickled by "
                "name, without it)")
        return {k: v for k, v in vars(self).items() if k not in ("_key", "_real")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._key = _signing_key(None)
        self._real = _Experiment(self.store)

    def __copy__(self) -> Archipelago:
        """A copy in this process (f.audit copies a call's arguments): its key too, which
        travels nowhere (pickling refuses it, review 108)."""
        clone = object.__new__(type(self))
        vars(clone).update(vars(self))
        return clone

    def __deepcopy__(self, memo: dict[int, Any]) -> Archipelago:
        # (the same experiment, store and plan: nothing of it is the caller's to change)
        return self.__copy__()

    def plan(self) -> dict[str, Any]:
        """What every island of the experiment must agree on: which generations migrate,
        who receives from whom, how migrants are serialized, and (when given) the last
        generation."""
        plan: dict[str, Any] = {
            "islands": self.islands, "every": self.every,
            "sources": {str(i): list(s) for i, s in sorted(self.sources.items())},
            "serializer": self._serializer.name}
        if self.generations is not None:  # (absent otherwise: older plans still match)
            plan["generations"] = self.generations
        return plan

    def _check_plan(self) -> None:
        """Record the plan at the experiment's first migration (create-only), and refuse
        to migrate under another one: a restarted island with another ``islands``,
        ``topology``, ``every``, ``generations`` or serializer would otherwise read other
        neighbours' migrants than before (a silently different result) or wait for
        generations that are never published (a MigrationError after the timeout)."""
        io = self._io()
        if io.plan_checked:
            return
        key = f"{self.experiment}/{PLAN}"
        where = f"{self.store.url.rstrip('/')}/{key}"
        ours = json.dumps(self.plan(), sort_keys=True, separators=(",", ":")).encode()
        data = _format.encode([ours], kind=PLAN, serializer="raw", created=0.0, name=key,
                              key=self._key)
        existing = self._create(io, key, data, "the plan", own=False)
        if existing is not None:
            self._check_signed(existing, key, where)
            theirs = bytes(self._verified(
                existing, PLAN, key, f"the plan of experiment {self.experiment!r} at {where}",
                "Check").frames[0])
            if theirs != ours:
                raise ConfigurationError(
                    f"experiment {self.experiment!r} in {self.store.url} migrates under the "
                    f"plan {theirs.decode(errors='replace')} ({where}), but this Archipelago "
                    f"has {ours.decode()}: every island of an experiment, in every restart, "
                    "needs the same islands, topology, every, generations and serializer. "
                    "Fix this island's settings, or use a new experiment name for a new plan."
                )
        io.plan_checked = True

    def _check_signed(self, plan: Any, key: str, where: str) -> None:
        """An experiment is signed by all its islands or by none, as its plan (written
        by its first migration) says. An island without the key in a signed experiment
        would publish unsigned create-only migrants that its neighbours refuse and that
        nobody can replace; a keyed island in an unsigned one would refuse them all. Both
        are refused here, before the island writes anything."""
        try:  # (the checksum only: a damaged plan is named by _verified, next)
            signed = _format.decode(plan, kind=PLAN, name=key).header.signed
        except _format.InvalidObject:
            return
        if signed and self._key is None:
            raise ConfigurationError(
                f"experiment {self.experiment!r} in {self.store.url} is signed (its plan, "
                f"{where}, carries a signature), but this Archipelago has no signing key: "
                "its emigrants would be unsigned objects that its neighbours refuse and "
                "that, written once, nobody could replace. Set $RESUMABLE_SIGNING_KEY (the "
                "experiment's key) for this island, or pass signing_key=.")
        if not signed and self._key is not None:
            raise CheckpointTamperedError(
                f"experiment {self.experiment!r} in {self.store.url} is unsigned (its plan, "
                f"{where}, carries no signature: the experiment was started without a "
                "signing key, or someone else wrote it), but this Archipelago has a "
                "signing key ($RESUMABLE_SIGNING_KEY or signing_key=) and would refuse "
                "every migrant of it. An experiment is signed by all its islands or by "
                "none: start a new experiment name with the key set for every island (or, "
                "if this one is meant to be unsigned, run every island of it without a key).")

    def _io(self) -> _Experiment:
        """Where this call reads and writes: the experiment's store, or, in the body of
        an ``f.audit``, that audit's overlay on it (one per audit and Archipelago)."""
        sandbox = current_sandbox(f"Archipelago of experiment {self.experiment!r}: a "
                                  "migration, plan or finish marker")
        if sandbox is None:
            return self._real
        with sandbox.lock:
            entry = sandbox.caches.get(id(self))
            if entry is None or entry[0] is not self:
                entry = sandbox.caches[id(self)] = (self, _Audited(self.store, sandbox))
        io: _Experiment = entry[1]
        return io

    def _create(self, io: _Experiment, key: str, data: Any, what: str, *, own: bool) -> Any:
        """Create the object ``key`` (create-only): None when this call created it, else
        the bytes already there. A store that refuses the create yet has nothing to read
        (something other than an object at that name, or a deletion each time) is a
        StoreError naming the key, never taken for a conflicting object. ``own``: an
        object of the writing island (in an audit, only the audit's own count)."""
        where = f"{self.store.url.rstrip('/')}/{key}"
        with self._naming(what):
            for _ in range(_CREATE_TRIES):
                if io.put_if_absent(key, data, own=own):
                    return None
                existing = io.get(key, own=own)
                if existing is not None:
                    return existing
        raise StoreError(
            f"{what} of experiment {self.experiment!r} could not be written at {where}: "
            f"the store refuses to create it (the "
            f"name is taken) yet has no object there to read, {_CREATE_TRIES} times. Look "
            "at that name in the store: something other than an object (a folder?) may "
            "be there; move it away, or use a new experiment name.",
            url=self.store.url, key=key)

    @contextlib.contextmanager
    def _naming(self, what: str) -> Iterator[None]:
        """A StoreError inside says which object of which experiment it was about."""
        try:
            yield
        except StoreError as err:
            raise StoreError(f"{what} of experiment {self.experiment!r}: {err}",
                             url=err.url, key=err.key) from err

    def _keys_below(self, io: _Experiment, key: str, island: int) -> str:
        """What a timeout's message adds when keys lie below the awaited object's name
        (a folder there): on a store where a name cannot be both (a local folder) the
        sender's publish fails with a StoreError, so the wait was for nothing."""
        try:
            below = io.list(f"{key}/")
        except ResumableError:  # (only a hint: the timeout is the error)
            return ""
        if not below:
            return ""
        return (f" {len(below)} key(s) lie below that name ({below[0]!r}...), as in a "
                f"folder: on a store where a name cannot be both (a local folder), island "
                f"{island} cannot publish there and fails with a StoreError; move them away.")

    def _check_generation(self, who: str, generation: int, doing: str) -> None:
        """A generation past the plan's last one is refused at once: no neighbour will
        ever publish it. ``who doing generation g`` is the sentence that says what."""
        if self.generations is not None and generation > self.generations:
            raise ConfigurationError(
                f"{who} of experiment {self.experiment!r} in {self.store.url} "
                f"{doing} generation {generation}, past the experiment's last generation "
                f"{self.generations} (generations={self.generations} in its plan): no "
                "island migrates after it. Run every island's body for the Archipelago's "
                "generations, or use a new experiment name for a longer run."
            )

    def _finished_key(self, island: int) -> str:
        return f"{self.experiment}/{FINISHED}/{island}"

    def _finished_where(self, island: int) -> str:
        return f"{self.store.url.rstrip('/')}/{self._finished_key(island)}"

    def _ended_at(self, io: _Experiment, island: int, *, own: bool) -> int | None:
        """The generation ``island``'s run ended at, as its finish marker says, or None."""
        if island in io.ended:
            return io.ended[island]
        key = self._finished_key(island)
        with self._naming(f"the finish marker of island {island}"):
            data = io.get(key, own=own)
        if data is None:
            return None
        end = self._end_in(data, island)
        io.ended[island] = end  # create-only: it never changes
        return end

    def _end_in(self, data: Any, island: int) -> int:
        key = self._finished_key(island)
        what = f"the finish marker of island {island} at {self._finished_where(island)}"
        raw = bytes(self._verified(data, FINISHED, key, what, "Check").frames[0])
        try:
            end = json.loads(raw)["generation"]
        except (ValueError, TypeError, KeyError):
            end = None
        if isinstance(end, bool) or not isinstance(end, int) or end < 0:
            raise CheckpointCorruptError(
                f"{what} passed verification but holds {raw[:80]!r}, not a generation. "
                "Check the store, or start a new experiment.")
        return end

    def finish(self, island: int, generation: int) -> None:
        """Record that ``island``'s run ended at ``generation``: a create-only
        ``<experiment>/finished/<island>`` object. A neighbour waiting for its migrants of
        a later generation then fails at once (ConfigurationError), not after the
        timeout, and the island itself can no longer migrate after ``generation``.
        Call it when the island's body ends (after its loop, before it returns); a
        resumed island calls it again with the same generation, which is a no-op."""
        island = self._check_island(island)
        generation = _integer("generation", generation, 0, "an int >= 0")
        self._check_generation(f"island {island}", generation, "finishes at")
        self._check_plan()
        io = self._io()
        key = self._finished_key(island)
        ours = json.dumps({"generation": generation}, separators=(",", ":")).encode()
        data = _format.encode([ours], kind=FINISHED, serializer="raw", step=generation,
                              epoch=island, created=0.0, name=key, key=self._key)
        existing = self._create(io, key, data, f"the finish marker of island {island}",
                                own=True)
        if existing is not None:
            end = self._end_in(existing, island)
            if end != generation:
                raise ConfigurationError(
                    f"island {island} of experiment {self.experiment!r} finishes at "
                    f"generation {generation}, but it already finished at generation {end} "
                    f"({self._finished_where(island)}): an island's run ends at the same "
                    "generation on every attempt (draw randomness only from the captured "
                    "RNGs). A longer run needs a new experiment name."
                )
        io.ended[island] = generation

    def key(self, island: int, generation: int) -> str:
        island = self._check_island(island)
        generation = _integer("generation", generation, 0, "an int >= 0")
        key = f"{self.experiment}/migrants/{island}/{generation}"
        if len(key.encode()) > MAX_KEY_BYTES:  # (only past the generations the name has room for)
            raise ConfigurationError(
                f"the emigrants of island {island} at generation {generation} of experiment "
                f"{self.experiment!r} would be named {key!r}, {len(key.encode())} bytes: past "
                f"the limit of {MAX_KEY_BYTES} bytes for an object's name. Use a shorter "
                "experiment name, or give Archipelago(generations=N) so that the name is "
                "checked against the longest key at once.")
        return key

    def where(self, island: int, generation: int) -> str:
        return f"{self.store.url.rstrip('/')}/{self.key(island, generation)}"

    def due(self, generation: int) -> bool:
        """Whether ``generation`` is a migration generation."""
        generation = _integer("generation", generation, 0, "an int >= 0")
        return generation > 0 and generation % self.every == 0

    def migrate(self, island: int, generation: int, emigrants: Any) -> list[Any]:
        """Publish ``emigrants`` and return the immigrants, one entry per sending island
        (in topology order); ``[]`` when ``generation`` is not a migration generation."""
        island = self._check_island(island)
        generation = _integer("generation", generation, 0, "an int >= 0")
        self._check_generation(f"island {island}", generation, "migrates at")
        if not self.due(generation):
            return []
        self.publish(island, generation, emigrants)
        return [self.receive(source, generation, reader=island)
                for source in self.sources[island]]

    def publish(self, island: int, generation: int, emigrants: Any) -> None:
        """Create the migrant object, or check that the existing one holds the same values."""
        island = self._check_island(island)
        generation = _integer("generation", generation, 0, "an int >= 0")
        key = self.key(island, generation)
        self._check_generation(f"island {island}", generation, "publishes at")
        self._check_plan()
        io = self._io()
        end = io.ended.get(island)
        if end is None and island not in io.unfinished:
            # Read once: only this island (a later call of this body) writes its marker.
            end = self._ended_at(io, island, own=True)
            if end is None:
                io.unfinished.add(island)
        if end is not None and generation > end:
            raise ConfigurationError(
                f"island {island} of experiment {self.experiment!r} publishes emigrants "
                f"for generation {generation} ({self.where(island, generation)}), but its "
                f"run already finished at generation {end} ({self._finished_where(island)}): "
                "its neighbours were told no more migrants come. A longer run needs a new "
                "experiment name."
            )
        what = f"the emigrants at {self.where(island, generation)}"
        frames = dumps_frames(self._serializer, emigrants, what, root="emigrants")
        # created is the generation, not the clock: a replayed publish gives the same bytes.
        data = _format.encode(frames, kind=KIND, serializer=self._serializer.name,
                              step=generation, epoch=island, created=float(generation),
                              name=key, key=self._key)
        existing = self._create(io, key, data, f"the emigrants of island {island} at "
                                               f"generation {generation}", own=True)
        if existing is None or bytes(existing) == join_payload(data):
            return
        # Other bytes, maybe the same values (a resumed island: see the module's text).
        # The existing object is verified first: a damaged one is named as such.
        before = self._decode(existing, island, generation)
        again = loads_frames(self._serializer, [memoryview(f) for f in frames])
        found = first_difference(before, again, path="emigrants",
                                 dumps=self._serializer.dumps)
        if found is not None and found.reason == TOO_DEEP:
            # Undecided. The neighbours read the existing object either way; a conflict
            # would end this (maybe resumed) island for good.
            log.warning("island %d republished generation %d of experiment %r with other "
                        "pickle bytes than %s, and the two could not be compared (too "
                        "deeply nested); that object stands", island, generation,
                        self.experiment, self.where(island, generation))
            return
        if found is None:
            log.info("island %d republished generation %d of experiment %r: the same "
                     "values as %s (other pickle bytes: objects restored from a "
                     "checkpoint); that object stands", island, generation,
                     self.experiment, self.where(island, generation))
            return
        where = (f" They differ at {found.path} ({found.reason}): {found.expected} "
                 f"there, {found.actual} now.")
        if isinstance(io, _Audited):
            raise MigrantConflictError(
                f"f.audit of {io.sandbox.name}: island {island} of experiment "
                f"{self.experiment!r} published emigrants for generation {generation} that "
                "differ from those the audit's uninterrupted run published for it (kept in "
                f"the audit, never written to {self.where(island, generation)}):{where} The "
                "island's body is not deterministic: a resumed island would fail here "
                "(draw randomness only from the captured RNGs)."
            )
        raise MigrantConflictError(
            f"island {island} of experiment {self.experiment!r} published emigrants for "
            f"generation {generation} that differ from those already at "
            f"{self.where(island, generation)}:{where} Either another attempt of this island "
            "(a zombie pod) computed something else, or the island's body is not "
            "deterministic (draw randomness only from the captured RNGs). The existing "
            "object stands."
        )

    def receive(self, island: int, generation: int, *, reader: int | None = None) -> Any:
        """The emigrants ``island`` published for ``generation``, waiting until they exist."""
        island = self._check_island(island)
        generation = _integer("generation", generation, 0, "an int >= 0")
        key = self.key(island, generation)
        who = "" if reader is None else f"island {reader} "
        self._check_generation(f"island {reader}" if reader is not None else "a reader",
                               generation, f"receives island {island}'s emigrants at")
        io = self._io()
        deadline = time.monotonic() + self.timeout
        pause = 0.02
        what = f"the emigrants of island {island} at generation {generation}"
        while True:
            with self._naming(what):
                data = io.get(key, own=False)
            if data is not None:
                return self._decode(data, island, generation)
            end = self._ended_at(io, island, own=False)
            if end is not None:
                # The marker comes after the island's last publish: read once more.
                with self._naming(what):
                    data = io.get(key, own=False)
                if data is not None:
                    return self._decode(data, island, generation)
                raise ConfigurationError(
                    f"{who or 'this reader '}needs the emigrants of island {island} at generation "
                    f"{generation} of experiment {self.experiment!r} "
                    f"({self.where(island, generation)}), but island {island} finished at "
                    f"generation {end} ({self._finished_where(island)}) without publishing "
                    "them, and never will; retrying does not help. "
                    + ("Every island must run as many generations as the islands it "
                       "receives from (give all of them the same generations, e.g. "
                       "Archipelago(..., generations=N)), or use a new experiment name."
                       if generation > end else
                       "Its body must call migrate() at every generation up to its "
                       "last; if the object was deleted, use a new experiment name.")
                )
            if isinstance(io, _Audited):
                raise io.missing(self, island, generation, who)
            left = deadline - time.monotonic()
            if left <= 0:
                raise MigrationError(
                    f"{who}waited {self.timeout:g} s for the emigrants of island {island} at "
                    f"generation {generation} of experiment {self.experiment!r} "
                    f"({self.where(island, generation)}): is island {island} running, and "
                    f"with the same store? Raise ${TIMEOUT_ENV} if its pods restart slowly."
                    + self._keys_below(io, key, island)
                )
            time.sleep(min(left, pause * (0.5 + _jitter.random())))
            pause = min(pause * 1.5, 2.0)

    def _decode(self, data: Any, island: int, generation: int) -> Any:
        decoded = self._verified(data, KIND, self.key(island, generation),
                                 f"the emigrants at {self.where(island, generation)}",
                                 "Migrants are never rewritten; check", serializer=True)
        return loads_frames(self._serializer, decoded.frames)

    def _verified(self, data: Any, kind: str, key: str, what: str, check: str, *,
                  serializer: bool = False) -> _format.Decoded:
        """``data`` decoded as a verified ``kind`` record (and, with ``serializer``,
        written with ours), or CheckpointTamperedError / CheckpointCorruptError naming
        ``what`` and what to check (``check`` starts that sentence)."""
        try:
            decoded = _format.decode(data, key=self._key, kind=kind, name=key)
            if serializer and decoded.header.serializer != self._serializer.name:
                raise _format.InvalidObject(
                    f"written with serializer {decoded.header.serializer!r}, "
                    f"not {self._serializer.name!r}"
                )
        except _format.InvalidObject as err:
            error: Callable[[str], Exception] = (
                CheckpointTamperedError if err.tampered else CheckpointCorruptError)
            raise error(
                f"{what} fails verification: {err.reason}. {check} the signing key "
                "($RESUMABLE_SIGNING_KEY) and the store, or start a new experiment."
            ) from None
        return decoded

    def _check_island(self, island: int) -> int:
        """``island`` as a plain int (numpy integers welcome), or a ConfigurationError."""
        where = f"of experiment {self.experiment!r}"
        value = _integer("island", island, 0, f"an int in 0..{self.islands - 1} {where}")
        if value >= self.islands:
            raise ConfigurationError(
                f"island {island!r} is not in 0..{self.islands - 1} {where}"
            )
        return value


class _Experiment:
    """The experiment's store as an Archipelago reads and writes it, with what it caches
    about the objects there (create-only objects never change)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.plan_checked = False
        self.ended: dict[int, int] = {}  # islands whose finish marker was read or written
        self.unfinished: set[int] = set()  # islands publishing here that had no marker

    def get(self, key: str, *, own: bool) -> Any:
        return self.store.get(key)

    def put_if_absent(self, key: str, data: Any, *, own: bool) -> bool:
        return self.store.put_if_absent(key, data)

    def list(self, prefix: str) -> list[str]:
        return self.store.list(prefix)


class _Audited(_Experiment):
    """In the body of an ``f.audit``: writes go to the audit's private overlay, never to
    the store; reads look in the overlay, then in the store (read-only). The writing
    island's own objects (``own``: its migrants and finish marker) are the audit's
    alone: the audit may run the body with other arguments than the experiment's real
    run, and a resume's republish is compared with what this audit's uninterrupted run
    published, as a resumed island's is with its first attempt's. The plan and the
    other islands' objects are read through: an audit reads the neighbours' real
    migrants, under the experiment's plan."""

    def __init__(self, store: Store, sandbox: Sandbox) -> None:
        super().__init__(store)
        self.sandbox = sandbox

    def _name(self, key: str) -> tuple[str, str]:
        return self.store.url, key

    def get(self, key: str, *, own: bool) -> Any:
        with self.sandbox.lock:
            blob = self.sandbox.objects.get(self._name(key))
        if blob is not None:
            return bytearray(blob)
        return None if own else self.store.get(key)

    def put_if_absent(self, key: str, data: Any, *, own: bool) -> bool:
        blob = join_payload(data)
        if not own and self.store.get(key) is not None:
            return False  # (read before the lock: no store request holds it)
        with self.sandbox.lock:
            if self._name(key) in self.sandbox.objects:
                return False
            self.sandbox.objects[self._name(key)] = blob
            return True

    def list(self, prefix: str) -> list[str]:
        with self.sandbox.lock:
            mine = {k for (url, k) in self.sandbox.objects
                    if url == self.store.url and k.startswith(prefix)}
        return sorted(mine | set(self.store.list(prefix)))

    def missing(self, archipelago: Archipelago, island: int, generation: int,
                who: str) -> ConfigurationError:
        """An audit does not wait for a neighbour (it might wait for ever: nobody runs
        it for the audit); what it needs must already be in the experiment."""
        return ConfigurationError(
            f"f.audit of {self.sandbox.name}: {who or 'a reader '}needs the emigrants of "
            f"island {island} at generation {generation} of experiment "
            f"{archipelago.experiment!r} ({archipelago.where(island, generation)}, key "
            f"{archipelago.key(island, generation)!r}), which neither the experiment's "
            "store nor this audit holds. An audit never writes to the experiment and "
            "never waits for a neighbour: the migrants it reads must already exist (audit "
            f"after island {island}'s real run has published generation {generation}), "
            "or audit fewer steps (steps=) or generations, so that the body does not "
            "reach that migration.")


def _check_experiment(experiment: Any, islands: int, generations: int | None) -> None:
    """A name every key of the experiment can be written under, or a ConfigurationError:
    no empty, '.' or '..' parts, no control characters (a NUL byte ends a file name), valid
    UTF-8, and short enough that its longest key, the emigrants of its last island at its
    last generation (at a 9-digit generation without ``generations=``), fits the
    verified format's limit of 255 bytes for an object's name."""
    if (not isinstance(experiment, str) or not experiment
            or experiment != experiment.strip("/")
            or any(part in ("", ".", "..") for part in experiment.split("/"))):
        raise ConfigurationError(
            f"experiment must be a non-empty name (a str) without leading, trailing or "
            f"doubled '/' and without '.' or '..' parts, not {experiment!r}"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in experiment):
        raise ConfigurationError(
            f"experiment {experiment!r} contains control characters; choose a plain name "
            "like 'exp-1'")
    try:
        size = len(experiment.encode())
    except UnicodeEncodeError:
        raise ConfigurationError(
            f"experiment {experiment!r} is not valid UTF-8 text (a lone surrogate?); choose "
            "a plain name like 'exp-1'") from None
    last = "9" * _UNBOUNDED_DIGITS if generations is None else str(generations)
    longest = f"/{KIND}/{islands - 1}/{last}"
    if size + len(longest) > MAX_KEY_BYTES:
        bound = ("without generations=, room for generations of "
                 f"{_UNBOUNDED_DIGITS} digits" if generations is None
                 else f"generations={generations}")
        raise ConfigurationError(
            f"experiment {experiment[:40]!r}... is {size} bytes (UTF-8): its longest key, "
            f"'<experiment>{longest}' ({bound}), would be {size + len(longest)} bytes, "
            f"past the limit of {MAX_KEY_BYTES} bytes for an object's name. Use an "
            f"experiment name of at most {MAX_KEY_BYTES - len(longest)} bytes.")


def _integer(name: str, value: Any, minimum: int, what: str) -> int:
    """``value`` as a plain int >= ``minimum``: any integer type (numpy's too), never a
    bool or a float, else a ConfigurationError that names the argument."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < minimum:
        raise ConfigurationError(f"{name} must be {what}, not {value!r}")
    return number


__all__ = ["Archipelago", "MigrantConflictError", "MigrationError"]
