"""The verified object format: a header, then the payload frames.

Everything the framework reads back goes through ``decode`` and is checked (magic,
version, lengths, SHA-256 over header and payload, and the HMAC when a key is set)
before a single byte is handed to a deserializer: unpickling untrusted or damaged
bytes can run arbitrary code or crash in odd ways, so verification comes first.

Layout (little endian)::

    fixed   magic(8) version(u16) flags(u16) header_len(u32) step(u64) epoch(u64)
            created(f64) payload_len(u64) digest(32) mac(32)
    names   serializer_len(u8) serializer kind_len(u8) kind name_len(u8) name
    frames  count(u32) length(u64) * count
    payload the frames, back to back

``digest`` covers the header (digest and mac zeroed) and the payload. Unsigned
objects use CRC32 (zlib, ~6 GB/s: it catches damage such as bit flips and truncation,
and costs the background upload and the resume a fraction of SHA-256); signed objects
use SHA-256, because ``mac`` (HMAC-SHA256 over the header with only the mac zeroed)
covers the payload through the digest, and only a cryptographic digest makes that
sound. ``name`` is the object's key (``<run_id>/ckpt-...``): a
reader that expects another key rejects the object, so a signed checkpoint cannot be
copied into another run or replayed under a newer name.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from .stores._base import Buffer

MAGIC = b"RSMBL\x00CK"
VERSION = 1
FLAG_SIGNED = 1
_FIXED = struct.Struct("<8sHHIQQdQ32s32s")
_DIGEST_AT = _FIXED.size - 64
_MAC_AT = _FIXED.size - 32
_ZERO32 = bytes(32)
MAX_HEADER = 1 << 20
MAX_FRAMES = 1 << 16


class InvalidObject(Exception):
    """Verification failed; ``tampered`` says whether the signature was the reason."""

    def __init__(self, reason: str, *, tampered: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tampered = tampered


@dataclass(frozen=True)
class Header:
    version: int
    signed: bool
    step: int
    epoch: int
    created: float
    serializer: str
    kind: str
    name: str
    frame_lengths: tuple[int, ...]
    header_len: int
    payload_len: int


@dataclass(frozen=True)
class Decoded:
    header: Header
    frames: list[memoryview]


def _mac(key: bytes, header: bytes | bytearray) -> bytes:
    return hmac.new(key, header, hashlib.sha256).digest()


def _digest(signed: bool, header: bytes | bytearray, views: Sequence[memoryview]) -> bytes:
    """SHA-256 for signed objects; CRC32, zero-padded to 32 bytes, otherwise."""
    if signed:
        h = hashlib.sha256(header)
        for v in views:
            h.update(v)
        return h.digest()
    crc = zlib.crc32(header)
    for v in views:
        crc = zlib.crc32(v, crc)  # releases the GIL on large buffers, like hashlib
    return crc.to_bytes(4, "little") + bytes(28)


def encode(
    frames: Sequence[Buffer],
    *,
    kind: str,
    serializer: str,
    step: int = 0,
    epoch: int = 0,
    created: float,
    name: str = "",
    key: bytes | None = None,
) -> list[Buffer]:
    """Header plus the frames as one zero-copy payload (a list of buffers)."""
    views = [memoryview(f).cast("B") for f in frames]
    name_b, kind_b, obj_b = serializer.encode(), kind.encode(), name.encode()
    if max(len(name_b), len(kind_b), len(obj_b)) > 255:
        raise ValueError("serializer, kind and object names must be at most 255 bytes")
    lengths = [v.nbytes for v in views]
    payload_len = sum(lengths)
    tail = (
        bytes([len(name_b)])
        + name_b
        + bytes([len(kind_b)])
        + kind_b
        + bytes([len(obj_b)])
        + obj_b
        + struct.pack(f"<I{len(lengths)}Q", len(lengths), *lengths)
    )
    header_len = _FIXED.size + len(tail)
    flags = FLAG_SIGNED if key else 0
    header = bytearray(
        _FIXED.pack(
            MAGIC, VERSION, flags, header_len, step, epoch, created, payload_len, _ZERO32, _ZERO32
        )
        + tail
    )
    header[_DIGEST_AT:_MAC_AT] = _digest(bool(key), header, views)
    if key:
        header[_MAC_AT : _FIXED.size] = _mac(key, header)
    return [bytes(header), *views]


def header_length(prefix: Buffer) -> int | None:
    """The header length a prefix of an object announces, unchecked; None if too short."""
    view = memoryview(prefix).cast("B")
    if view.nbytes < _FIXED.size:
        return None
    length: int = _FIXED.unpack_from(view)[3]
    return length


def read_header(data: Buffer, size: int | None = None) -> Header:
    """Parse and bounds-check the header; raises InvalidObject. Does not check the digest.

    ``data`` is the whole object, or with ``size`` (the whole object's length) a prefix
    of it that holds at least the header (``header_length`` tells how much that is).
    """
    view = memoryview(data).cast("B")
    n = view.nbytes if size is None else size
    if view.nbytes > n:
        raise ValueError(f"a prefix of {view.nbytes} bytes is longer than the object ({n})")
    if n < _FIXED.size:
        raise InvalidObject(f"too short ({n} bytes) to be a resumable object")
    if view.nbytes < _FIXED.size:
        raise ValueError(f"a prefix of {view.nbytes} bytes cannot hold a header")
    magic, version, flags, header_len, step, epoch, created, payload_len, _, _ = _FIXED.unpack_from(
        view
    )
    if magic != MAGIC:
        raise InvalidObject("not a resumable object (bad magic); it was written by something else")
    if version != VERSION:
        raise InvalidObject(f"unsupported format version {version} (this library reads {VERSION})")
    if flags & ~FLAG_SIGNED:
        raise InvalidObject(f"unknown flags {flags:#x}")
    if not _FIXED.size + 7 <= header_len <= min(n, MAX_HEADER):
        raise InvalidObject(f"header length {header_len} out of range for a {n}-byte object")
    if header_len > view.nbytes:
        raise ValueError(f"the header needs {header_len} bytes; only {view.nbytes} were read")
    if payload_len != n - header_len:
        raise InvalidObject(
            f"truncated or padded: header says {payload_len} payload bytes, "
            f"object has {n - header_len}"
        )
    pos = _FIXED.size
    try:
        name_len = view[pos]
        serializer = bytes(view[pos + 1 : pos + 1 + name_len]).decode()
        pos += 1 + name_len
        kind_len = view[pos]
        kind = bytes(view[pos + 1 : pos + 1 + kind_len]).decode()
        pos += 1 + kind_len
        obj_len = view[pos]
        obj_name = bytes(view[pos + 1 : pos + 1 + obj_len]).decode()
        pos += 1 + obj_len
        (count,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if count > MAX_FRAMES or pos + 8 * count != header_len:
            raise InvalidObject("frame table does not match the header length")
        lengths = struct.unpack_from(f"<{count}Q", view, pos)
    except (IndexError, struct.error, UnicodeDecodeError) as err:
        raise InvalidObject(f"malformed header ({err})") from None
    if sum(lengths) != payload_len:
        raise InvalidObject("frame lengths do not add up to the payload length")
    return Header(
        version=version,
        signed=bool(flags & FLAG_SIGNED),
        step=step,
        epoch=epoch,
        created=created,
        serializer=serializer,
        kind=kind,
        name=obj_name,
        frame_lengths=tuple(lengths),
        header_len=header_len,
        payload_len=payload_len,
    )


def decode(
    data: Buffer, *, key: bytes | None = None, kind: str | None = None, name: str | None = None
) -> Decoded:
    """Verify ``data`` completely, then return its header and frames (views into ``data``)."""
    header = read_header(data)
    view = memoryview(data).cast("B")
    fixed = bytearray(view[: header.header_len])
    stored_digest = bytes(fixed[_DIGEST_AT:_MAC_AT])
    stored_mac = bytes(fixed[_MAC_AT : _FIXED.size])
    fixed[_DIGEST_AT : _FIXED.size] = bytes(64)
    computed = _digest(header.signed, fixed, [view[header.header_len :]])
    if not hmac.compare_digest(computed, stored_digest):
        raise InvalidObject("checksum mismatch: the object is damaged")
    if not header.signed and stored_mac != _ZERO32:
        raise InvalidObject("unsigned object carries a signature field")
    if key is not None:
        if not header.signed:
            raise InvalidObject("signature missing (a signing key is set)", tampered=True)
        fixed[_DIGEST_AT:_MAC_AT] = stored_digest
        if not hmac.compare_digest(_mac(key, fixed), stored_mac):
            raise InvalidObject(
                "signature wrong: written with another key, or altered", tampered=True
            )
    if kind is not None and header.kind != kind:
        raise InvalidObject(f"holds a {header.kind!r} record where a {kind!r} was expected")
    if name is not None and header.name != name:
        raise InvalidObject(
            f"was written as {header.name!r}, not {name!r}: copied or renamed",
            tampered=header.signed,
        )
    frames = []
    pos = header.header_len
    for length in header.frame_lengths:
        frames.append(view[pos : pos + length])
        pos += length
    return Decoded(header, frames)
