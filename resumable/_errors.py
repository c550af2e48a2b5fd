"""The exception hierarchy. Every message says what failed, where, and what to do."""

from __future__ import annotations

# Process exit codes for errors that escape to the top of a program (see _exit.py).
# A Kubernetes podFailurePolicy keys on these to tell retriable from fatal failures.
EXIT_SIGTERM = 143
EXIT_STORE = 74  # EX_IOERR: storage failed for good; a new pod may succeed (retriable)
EXIT_SERIALIZATION = 70  # EX_SOFTWARE: the state cannot be (de)serialized (fatal)
EXIT_CORRUPT = 65  # EX_DATAERR: no checkpoint of the run passes verification (fatal)
EXIT_TAMPERED = 77  # EX_NOPERM: a signature is missing or wrong (fatal)
EXIT_FENCED = 73  # a newer attempt owns the run; this pod must stop (ignore, do not retry)
EXIT_CONFIG = 78  # EX_CONFIG: bad store URL, run id or option (fatal)


class ResumableError(Exception):
    """Root of every error raised by resumable."""

    exit_code = 1


class ConfigurationError(ResumableError, ValueError):
    """An option, store URL or run id is invalid."""

    exit_code = EXIT_CONFIG


class StoreURLError(ConfigurationError):
    """A store URL that cannot be used as written (its form, its options, a path that is a
    file): the error to fix in the URL itself, wherever it came from (reviews 151, 155)."""


class RunMismatchError(ConfigurationError):
    """A fixed run id (``run_id=``, ``$RESUMABLE_RUN_ID``) was called with other arguments.

    ``differences`` names what differs (argument names, and ``version=``).
    """

    def __init__(self, message: str, *, differences: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.differences = differences


class StoreError(ResumableError):
    """A storage operation failed for good (after retries, or at once for permanent errors)."""

    exit_code = EXIT_STORE

    def __init__(self, message: str, *, url: str | None = None, key: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.key = key


class CheckpointCorruptError(ResumableError):
    """No checkpoint of the run passes verification; the run will not silently restart."""

    exit_code = EXIT_CORRUPT


class CheckpointTamperedError(CheckpointCorruptError):
    """A checkpoint's signature is missing or wrong."""

    exit_code = EXIT_TAMPERED


class SerializationError(ResumableError, TypeError):
    """The state cannot be serialized or deserialized with the configured serializer."""

    exit_code = EXIT_SERIALIZATION


class FencedError(ResumableError):
    """A newer attempt of the same run owns it; this attempt writes nothing more."""

    exit_code = EXIT_FENCED


__all__ = [
    "EXIT_CONFIG",
    "EXIT_CORRUPT",
    "EXIT_FENCED",
    "EXIT_SERIALIZATION",
    "EXIT_SIGTERM",
    "EXIT_STORE",
    "EXIT_TAMPERED",
    "CheckpointCorruptError",
    "CheckpointTamperedError",
    "ConfigurationError",
    "FencedError",
    "ResumableError",
    "RunMismatchError",
    "SerializationError",
    "StoreError",
]
