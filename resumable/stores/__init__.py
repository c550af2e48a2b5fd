"""Stores chosen by URL scheme: ``file`` (and plain paths), ``memory``, ``s3``."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

from .. import _settings
from .._errors import ConfigurationError, StoreURLError
from ._base import Payload, Store, SupportsHead, head_of, join_payload, payload_size


class Listed(NamedTuple):
    """One object of a listing, with what the listing says about it."""

    key: str
    size: int  # bytes
    modified: float  # when the object was written (POSIX seconds)


@runtime_checkable
class SupportsListInfo(Protocol):
    """An optional store method: a listing that also gives each object's size and time.

    ``resumable ls`` builds its table from it alone (S3 lists 1,000 objects per request
    with these fields), instead of reading the newest checkpoint's header of every run;
    stores without it get their headers read, in parallel. The bundled ``file`` and
    ``s3`` stores implement it.
    """

    def list_info(self, prefix: str) -> list[Listed]:
        """The objects whose keys start with ``prefix``, ascending by key."""


class SupportsRemoveTempFiles(Protocol):
    """An optional store method: delete the leftovers of writes that never finished
    (a killed save's temp files) under a run's prefix; returns how many. Called when
    the run is claimed (older attempts are fenced) and by ``resumable rm``. With
    ``older_than`` (seconds since the epoch) only the leftovers begun before that time:
    a newer attempt's write in flight is not a leftover."""

    def remove_temp_files(self, prefix: str, older_than: float | None = None) -> int: ...


# scheme -> "module:factory" (imported lazily) or a factory taking the URL.
_registry: dict[str, str | Callable[[str], Store]] = {
    "file": "resumable.stores._local:LocalStore.from_url",
    "memory": "resumable.stores._memory:MemoryStore.from_url",
    "s3": "resumable.stores._s3:S3Store.from_url",
}
_install_hints = {"s3": "Install boto3 for s3:// URLs: pip install 'resumable[s3]'"}
registry: Mapping[str, str | Callable[[str], Store]] = MappingProxyType(_registry)

DEFAULT_STORE = _settings.STORE.default
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def register_store(scheme: str, factory: Callable[[str], Store], clobber: bool = False) -> None:
    """Make ``scheme://...`` URLs open with ``factory(url)``."""
    if scheme in _registry and not clobber:
        raise ValueError(f"a store is already registered for {scheme}://; pass clobber=True")
    _registry[scheme] = factory


def default_store_url() -> str:
    return _settings.STORE.read()


# What a built-in scheme's URL names its store by, and what to write instead of a '#'
# (or, but in s3's options, a '?') that would name nothing
_NAMED_BY = {
    "file": ("path", "in a folder's name write '#' as %23 and '?' as %3F, or pass the "
                     "folder as a plain path"),
    "s3": ("bucket and prefix", "an s3 prefix cannot hold '#'; options go after '?'"),
    "memory": ("name", "a memory store's name cannot hold '#' or '?'"),
}


def normalize_url(url: str | os.PathLike[str]) -> str:
    """A canonical URL for a store argument: plain paths become absolute file:// URLs."""
    text = os.fspath(url)
    if not text or not text.strip():
        raise StoreURLError(
            "store URL is empty; pass a path, file:///abs/path, s3://bucket/prefix or memory://name"
        )
    if any(ord(c) < 32 for c in text):
        raise StoreURLError(f"store URL {text!r} contains control characters")
    m = _SCHEME.match(text)
    if m is None:
        if "://" in text or text.startswith(("s3:", "file:", "memory:")):
            raise StoreURLError(
                f"store URL {text!r} is malformed; expected scheme://..., "
                "e.g. s3://bucket/prefix or file:///abs/path"
            )
        try:
            return Path(text).expanduser().resolve().as_uri()
        except (RuntimeError, ValueError, OSError) as err:  # "~nobody", NUL bytes, ...
            raise StoreURLError(f"store path {text!r} cannot be used: {err}") from None
    scheme = m.group(1).lower()
    try:
        parts = urlsplit(text)
    except ValueError as err:  # e.g. an unbalanced '[' reads as a broken IPv6 host
        raise StoreURLError(f"store URL {text!r} is malformed: {err}") from None
    if scheme not in _registry:
        known = ", ".join(f"{s}://" for s in sorted(_registry))
        raise StoreURLError(f"store URL {text!r} has unknown scheme {scheme}://; use {known}")
    # A part the store never reads would make two URLs one store (review 138: exp#1 and
    # exp#2 were one folder, and the second returned the first one's result). Built-in
    # schemes only: a registered store's factory reads its URL as it likes.
    named = _NAMED_BY.get(scheme)
    ignored = "" if named is None else "#" if "#" in text else (
        "?" if "?" in text and scheme != "s3" else "")
    if named is not None and ignored:
        what, advice = named
        raise StoreURLError(
            f"store URL {text!r}: {text[text.index(ignored):]!r} names no store (a store is "
            f"its {what}); {advice}"
        )
    if scheme == "file" and "\x00" in unquote(parts.path):
        raise StoreURLError(
            f"store URL {text!r}: its path holds a NUL (%00), which no folder's name can"
        )
    if scheme == "s3" and not parts.netloc:
        raise StoreURLError(
            f"store URL {text!r} names no bucket; it must look like s3://bucket/prefix"
        )
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StoreURLError(
                f"store URL {text!r}: file URLs need an absolute path, e.g. file:///data/ckpt"
            )
        if not parts.path.startswith("/"):
            raise StoreURLError(f"store URL {text!r}: file URL path must be absolute")
    return scheme + text[len(scheme) :]


def from_store_variable(message: str, instead: str) -> str:
    """A StoreURLError's ``message`` for a URL that came from $RESUMABLE_STORE, saying so
    (review 151: the error named the URL, not where it came from); ``instead``: how else
    to give a store (the library's ``store=``, the CLI's STORE)."""
    name = _settings.STORE.name
    if not os.environ.get(name) or f"${name}" in message:
        return message
    return f"{message} (the store URL is ${name}'s: fix or unset it, or {instead})"


def open_store(url: str | os.PathLike[str] | Store | None = None) -> Store:
    """The store for a URL, path or store object (None: $RESUMABLE_STORE, else ./.resumable)."""
    if url is not None and not isinstance(url, (str, os.PathLike)):
        if isinstance(url, Store):
            return url
        raise ConfigurationError(
            f"store must be a URL, a path or a store object, not {type(url).__name__}"
        )
    if url is None and os.environ.get(_settings.STORE.name):
        try:
            return open_store(default_store_url())
        except StoreURLError as err:  # (not an AWS profile's error, review 154)
            err.args = (from_store_variable(str(err), "pass store="), *err.args[1:])
            raise
    canonical = normalize_url(default_store_url() if url is None else url)
    scheme = canonical.split("://", 1)[0]
    factory = _registry[scheme]
    if isinstance(factory, str):
        module_name, attr = factory.split(":")
        try:
            target: object = importlib.import_module(module_name)
        except ImportError as err:
            hint = _install_hints.get(scheme, str(err))
            raise ConfigurationError(f"cannot open {canonical}: {hint}") from err
        for part in attr.split("."):
            target = getattr(target, part)
        factory = target  # type: ignore[assignment]
    # Factories may share expensive parts (boto3 clients, memory dicts) between calls.
    return factory(canonical)  # type: ignore[operator]


__all__ = [
    "Listed",
    "Payload",
    "Store",
    "SupportsHead",
    "SupportsListInfo",
    "SupportsRemoveTempFiles",
    "default_store_url",
    "from_store_variable",
    "head_of",
    "join_payload",
    "normalize_url",
    "open_store",
    "payload_size",
    "register_store",
    "registry",
]
