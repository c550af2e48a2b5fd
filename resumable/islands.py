"""Islands: several checkpointed runs that exchange migrants through the store.

Each island is its own ``@checkpointed`` run (in Kubernetes, one index of an Indexed
Job). Every ``every`` generations an island publishes its emigrants as an immutable,
create-only object ``<experiment>/migrants/<island>/<generation>`` and reads the
emigrants its topology sends it for the same generation, waiting until they exist::

    archipelago = Archipelago("s3://bucket/islands", "exp-1", islands=4, every=5)

    @checkpointed(store="s3://bucket/islands")
    def island(index, generations, *, state=None):
        ...
        immigrants = archipelago.migrate(index, generation, emigrants)  # [] when not due
        ...
        yield state

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
"""

from __future__ import annotations

import json
import logging
import numbers
import operator
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import _format, _settings
from ._audit import TOO_DEEP, first_difference
from ._decorator import _signing_key
from ._errors import (
    EXIT_CORRUPT,
    EXIT_STORE,
    CheckpointCorruptError,
    CheckpointTamperedError,
    ConfigurationError,
    ResumableError,
)
from .serializers import Serializer, dumps_frames, get_serializer, loads_frames
from .stores import Store, join_payload, open_store

log = logging.getLogger("resumable")

TIMEOUT_ENV = "RESUMABLE_MIGRATION_TIMEOUT"
DEFAULT_TIMEOUT = 600.0  # seconds: long enough for a killed pod to be replaced and catch up
KIND = "migrants"
PLAN = "plan"  # <experiment>/plan: the plan every island of the experiment must share
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
    ) -> None:
        islands = _integer("islands", islands, 1, "a positive int")
        every = _integer("every", every, 1, "a positive int (generations)")
        if (not isinstance(experiment, str) or not experiment
                or experiment != experiment.strip("/")
                or any(part in ("", ".", "..") for part in experiment.split("/"))):
            raise ConfigurationError(
                f"experiment must be a non-empty name (a str) without leading, trailing or "
                f"doubled '/' and without '.' or '..' parts, not {experiment!r}"
            )
        sources = _sources(islands, topology)
        seconds = _timeout(timeout)
        self.store = open_store(store)
        self.experiment = experiment
        self.islands = islands
        self.every = every
        self.sources = sources
        self.timeout = seconds
        self._key = _signing_key(signing_key)
        self._serializer = get_serializer(serializer)
        self._jitter = random.Random()  # private: never draws from the captured global RNG
        self._plan_checked = False

    def plan(self) -> dict[str, Any]:
        """What every island of the experiment must agree on: which generations migrate,
        who receives from whom, and how migrants are serialized."""
        return {"islands": self.islands, "every": self.every,
                "sources": {str(i): list(s) for i, s in sorted(self.sources.items())},
                "serializer": self._serializer.name}

    def _check_plan(self) -> None:
        """Record the plan at the experiment's first migration (create-only), and refuse
        to migrate under another one: a restarted island with another ``islands``,
        ``topology``, ``every`` or serializer would otherwise read other neighbours'
        migrants than before (a silently different result) or wait for generations
        that are never published (a MigrationError after the timeout)."""
        if self._plan_checked:
            return
        key = f"{self.experiment}/{PLAN}"
        where = f"{self.store.url.rstrip('/')}/{key}"
        ours = json.dumps(self.plan(), sort_keys=True, separators=(",", ":")).encode()
        data = _format.encode([ours], kind=PLAN, serializer="raw", created=0.0, name=key,
                              key=self._key)
        if not self.store.put_if_absent(key, data):
            existing = self.store.get(key)
            if existing is None:  # deleted in between: the next migration records it again
                return
            theirs = bytes(self._verified(
                existing, PLAN, key, f"the plan of experiment {self.experiment!r} at {where}",
                "Check").frames[0])
            if theirs != ours:
                raise ConfigurationError(
                    f"experiment {self.experiment!r} in {self.store.url} migrates under the "
                    f"plan {theirs.decode(errors='replace')} ({where}), but this Archipelago "
                    f"has {ours.decode()}: every island of an experiment, in every restart, "
                    "needs the same islands, topology, every and serializer. Fix this "
                    "island's settings, or use a new experiment name for a new plan."
                )
        self._plan_checked = True

    def key(self, island: int, generation: int) -> str:
        island = self._check_island(island)
        generation = _integer("generation", generation, 0, "an int >= 0")
        return f"{self.experiment}/migrants/{island}/{generation}"

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
        self._check_plan()
        what = f"the emigrants at {self.where(island, generation)}"
        frames = dumps_frames(self._serializer, emigrants, what, root="emigrants")
        # created is the generation, not the clock: a replayed publish gives the same bytes.
        data = _format.encode(frames, kind=KIND, serializer=self._serializer.name,
                              step=generation, epoch=island, created=float(generation),
                              name=key, key=self._key)
        if self.store.put_if_absent(key, data):
            return
        existing = self.store.get(key)
        if existing is not None and bytes(existing) == join_payload(data):
            return
        where = ""
        if existing is not None:
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
        deadline = time.monotonic() + self.timeout
        pause = 0.02
        while True:
            data = self.store.get(key)
            if data is not None:
                return self._decode(data, island, generation)
            left = deadline - time.monotonic()
            if left <= 0:
                who = "" if reader is None else f"island {reader} "
                raise MigrationError(
                    f"{who}waited {self.timeout:g} s for the emigrants of island {island} at "
                    f"generation {generation} of experiment {self.experiment!r} "
                    f"({self.where(island, generation)}): is island {island} running, and "
                    f"with the same store? Raise ${TIMEOUT_ENV} if its pods restart slowly."
                )
            time.sleep(min(left, pause * (0.5 + self._jitter.random())))
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
