"""Resumable drop-ins for the GA libraries people already use.

Each submodule is an optional extra and is imported only when used, so
``import resumable`` never imports DEAP, PyGAD, pymoo, cma or nevergrad:

- ``resumable.integrations.deap``: ``ea_simple``, ``ea_mu_plus_lambda``,
  ``ea_mu_comma_lambda`` (``pip install 'resumable[deap]'``)
- ``resumable.integrations.pygad``: ``run(ga_instance, **options)``
- ``resumable.integrations.pymoo``: ``minimize(problem, algorithm, termination=None, ...)``
- ``resumable.integrations.ask_tell(optimizer, objective, budget, **options)``: any
  ``ask()``/``tell()`` optimizer (pycma, nevergrad, pymoo algorithms)

Every one takes the ``@checkpointed`` options as keyword arguments (``store=``,
``run_id=``, ``every=``, ``keep=``, ``serializer=``, ``signing_key=``, ``progress=``...)
and returns what the library's own call returns, equal to it for the same seed whether
or not the process died on the way.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._ask_tell import ask_tell

__all__ = ["ask_tell", "deap", "pygad", "pymoo"]

_SUBMODULES = ("deap", "pygad", "pymoo")


def missing_library(err: ModuleNotFoundError, integration: str, extra: str) -> BaseException:
    """What to raise when an integration's library (or numpy) is not installed: the pip
    extra that brings it. ``err`` itself for a module missing inside that library."""
    if err.name not in (extra, "numpy"):  # (a module inside an installed library)
        return err
    return ModuleNotFoundError(
        f"resumable.integrations.{integration} needs {err.name}, which is not installed: "
        f"pip install 'resumable[{extra}]' (it pins the version the integration was "
        "tested with)", name=err.name)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
