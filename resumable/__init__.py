"""resumable: checkpoint a generator-style computation and resume it after the process dies."""

from __future__ import annotations

from . import _exit
from ._audit import AuditReport
from ._decorator import CheckpointedFunction, RunIterator, checkpointed
from ._errors import (
    CheckpointCorruptError,
    CheckpointTamperedError,
    ConfigurationError,
    FencedError,
    ResumableError,
    RunMismatchError,
    SerializationError,
    StoreError,
)
from ._policy import EveryN, EverySeconds, KeepLast
from ._run import Checkpoint
from ._signals import install_signal_handlers
from .serializers import Serializer, register_serializer
from .stores import Store, open_store, register_store

_exit.install()

__version__ = "0.1.0"

__all__ = [
    "AuditReport",
    "Checkpoint",
    "CheckpointCorruptError",
    "CheckpointTamperedError",
    "CheckpointedFunction",
    "ConfigurationError",
    "EveryN",
    "EverySeconds",
    "FencedError",
    "KeepLast",
    "ResumableError",
    "RunIterator",
    "RunMismatchError",
    "SerializationError",
    "Serializer",
    "Store",
    "StoreError",
    "checkpointed",
    "install_signal_handlers",
    "open_store",
    "register_serializer",
    "register_store",
]
