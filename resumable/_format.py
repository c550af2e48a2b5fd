"""The verified object format: a header, then the payload frames.

Everything the framework reads back goes through ``decode`` and is checked (magic,
version, lengths, the checksum over header and payload, and the HMAC when a key is set)
before a single byte is handed to a deserializer: unpickling untrusted or damaged
bytes can run arbitrary code or crash in odd ways, so verification comes first.

Layout (little endian), version 2 (and 3, the same for final checkpoints, see
``VERSION_FINAL``)::

    fixed   magic(8) version(u16) flags(u16) header_len(u32) step(u64) epoch(u64)
            created(f64) payload_len(u64) digest(32) mac(32)
    names   serializer_len(u8) serializer kind_len(u8) kind name_len(u8) name
    frames  count(u32) length(u64) * count
    pad     zero bytes up to the next multiple of 64: header_len is one
    payload each frame followed by zero bytes up to the next multiple of 64

Every frame therefore starts at a 64-byte boundary of the object: read into a 64-byte
aligned buffer (the stores do, see ``_aligned``), numpy arrays unpickled from the
frames are aligned and compute the same bits as before the save. Version 1 had no
padding (and CRC32 for unsigned objects); it is still read, its frames copied into
aligned memory on load.

``digest`` covers the header (digest and mac zeroed) and the payload. Unsigned
objects use CRC32C (hardware, ~10 GB/s: it catches damage such as bit flips and
truncation, and is computed once, in one pass over the payload, which also gives the
whole object's CRC32C that S3 verifies on upload, ``Encoded.crc32c``); signed objects
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from . import _crc
from .stores._base import Buffer

MAGIC = b"RSMBL\x00CK"
VERSION = 2
# Version 2's layout, for final checkpoints only (FLAG_FINAL): a resumable from before
# them reads one as "written by a newer resumable", which it is, not as damage; every
# other object stays version 2, which it reads
VERSION_FINAL = 3
READABLE_VERSIONS = (1, 2, 3)
ALIGN = 64  # frames start at multiples of this in version 2
FLAG_SIGNED = 1
# A checkpoint of the state the body left at its return, after its code past its last
# yield (every=n or a duration, that yield not due): read by ``f.latest()``, never
# resumed from (see Run.load_latest)
FLAG_FINAL = 2
_KNOWN_FLAGS = FLAG_SIGNED | FLAG_FINAL
_VERSION_AT = 8  # (after the magic)
_FIXED = struct.Struct("<8sHHIQQdQ32s32s")
_DIGEST_AT = _FIXED.size - 64
_MAC_AT = _FIXED.size - 32
_ZERO32 = bytes(32)
_PADDING = memoryview(bytes(ALIGN))
# Bounds a header read from the store must keep (a damaged length is refused before
# anything is allocated for it). Each numpy array of a state is a frame of its own, so a
# population of array individuals has as many: 65,536 (with a 1 MiB header) were written,
# then refused on resume as damage (review 114). encode() refuses what reads would.
MAX_FRAMES = 1 << 23
MAX_HEADER = 1 << 27  # (room for MAX_FRAMES lengths and the names)
CRC_BLOCK = 1 << 20  # granularity of Encoded.crc32c_blocks
_SMALL_PAYLOAD = 64 << 10


def _pad(n: int) -> int:
    return -n % ALIGN


class TooManyFrames(ValueError):
    """An object with more frames than a reader accepts (see MAX_FRAMES)."""


class InvalidObject(Exception):
    """Verification failed; ``tampered`` says whether the signature was the reason."""

    def __init__(self, reason: str, *, tampered: bool = False, newer: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tampered = tampered
        self.newer = newer  # a format version above this library's: upgrade, not damage


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
    final: bool = False  # FLAG_FINAL

    def frame_offsets(self) -> list[int]:
        """Where each frame starts in the object."""
        offsets = []
        pos = self.header_len
        for length in self.frame_lengths:
            offsets.append(pos)
            pos += length + (_pad(length) if self.version >= 2 else 0)
        return offsets


@dataclass(frozen=True)
class Decoded:
    header: Header
    frames: list[memoryview]


class Encoded(list[Buffer]):
    """An object's buffers in order (the header first), with CRC32Cs of their bytes.

    ``crc32c`` is the CRC32C of the whole object; ``crc32c_blocks`` the CRC32C of each
    ``CRC_BLOCK`` bytes of the payload (the object after the header; the last block may
    be shorter). Both are None for signed objects (their digest is SHA-256). A store
    that can hand them to the storage (S3's ``ChecksumCRC32C`` of an object or of a
    part made of whole blocks) lets the storage verify what it received against the
    checksum computed when the object was encoded, with no second pass over the bytes.
    """

    crc32c: int | None = None
    crc32c_blocks: tuple[int, ...] | None = None
    crc32c_block_size = CRC_BLOCK


def _mac(key: bytes, header: bytes | bytearray) -> bytes:
    return hmac.new(key, header, hashlib.sha256).digest()


def _sha256(header: bytes | bytearray, views: Iterable[Buffer]) -> bytes:
    h = hashlib.sha256(header)
    for v in views:
        h.update(v)
    return h.digest()


def _crc_field(crc: int) -> bytes:
    return crc.to_bytes(4, "little") + bytes(28)


def _digest(version: int, signed: bool, header: bytes | bytearray,
            views: Sequence[memoryview]) -> bytes:
    """SHA-256 for signed objects; CRC32C (v2) or CRC32 (v1), zero-padded, otherwise."""
    if signed:
        return _sha256(header, views)
    if version >= 2:
        crc = _crc.extend(0, header)
        for v in views:
            # Large payloads are hashed on several cores and the pieces combined.
            crc = (_crc.extend(crc, v) if v.nbytes <= _SMALL_PAYLOAD
                   else _crc.combine(crc, _crc.of(v), v.nbytes))
        return _crc_field(crc)
    crc = zlib.crc32(header)
    for v in views:
        crc = zlib.crc32(v, crc)  # releases the GIL on large buffers, like hashlib
    return _crc_field(crc)


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
    final: bool = False,
) -> Encoded:
    """Header plus the frames, each padded to 64 bytes, as a zero-copy list of buffers."""
    if len(frames) > MAX_FRAMES:
        raise TooManyFrames(
            f"{len(frames):,} frames (numpy arrays) in one object: at most {MAX_FRAMES:,} "
            "can be read back; hold the arrays in fewer, larger ones (np.stack)")
    views = [memoryview(f).cast("B") for f in frames]
    if final and kind != "ckpt":
        raise ValueError(f"only a checkpoint can be final, not a {kind!r} object")
    name_b, kind_b, obj_b = serializer.encode(), kind.encode(), name.encode()
    if max(len(name_b), len(kind_b), len(obj_b)) > 255:
        raise ValueError("serializer, kind and object names must be at most 255 bytes")
    lengths = [v.nbytes for v in views]
    payload: list[Buffer] = []
    for view in views:
        payload.append(view)
        if _pad(view.nbytes):
            payload.append(_PADDING[: _pad(view.nbytes)])
    payload_len = sum(n + _pad(n) for n in lengths)
    tail = (
        bytes([len(name_b)])
        + name_b
        + bytes([len(kind_b)])
        + kind_b
        + bytes([len(obj_b)])
        + obj_b
        + struct.pack(f"<I{len(lengths)}Q", len(lengths), *lengths)
    )
    table_end = _FIXED.size + len(tail)
    header_len = table_end + _pad(table_end)
    flags = (FLAG_SIGNED if key else 0) | (FLAG_FINAL if final else 0)
    header = bytearray(
        _FIXED.pack(
            MAGIC, VERSION_FINAL if final else VERSION, flags, header_len, step, epoch,
            created, payload_len, _ZERO32, _ZERO32
        )
        + tail
        + bytes(header_len - table_end)
    )
    out = Encoded([bytes(header), *payload])
    if key:
        header[_DIGEST_AT:_MAC_AT] = _sha256(header, payload)
        header[_MAC_AT : _FIXED.size] = _mac(key, header)
    else:
        # One pass over the payload gives every CRC: the blocks' (for S3's parts), the
        # digest's (header zeroed) and the stored object's (header as written).
        blocks = _block_crcs(payload)
        if payload_len <= _SMALL_PAYLOAD:  # hashing again costs less than combining
            header[_DIGEST_AT:_MAC_AT] = _crc_field(_crc_of([header, *payload]))
            out.crc32c = _crc_of([header, *payload])
        else:
            body = _crc.join((crc, min(CRC_BLOCK, payload_len - i * CRC_BLOCK))
                             for i, crc in enumerate(blocks))
            header[_DIGEST_AT:_MAC_AT] = _crc_field(
                _crc.combine(_crc.extend(0, header), body, payload_len))
            out.crc32c = _crc.combine(_crc.extend(0, header), body, payload_len)
        out.crc32c_blocks = tuple(blocks)
    out[0] = bytes(header)
    return out


def _crc_of(buffers: Iterable[Buffer]) -> int:
    crc = 0
    for buf in buffers:
        crc = _crc.extend(crc, buf)
    return crc


def _block_crcs(payload: Sequence[Buffer]) -> list[int]:
    """The CRC32C of each CRC_BLOCK bytes of the concatenated buffers."""
    blocks: list[int] = []
    crc, room = 0, CRC_BLOCK
    for buf in payload:
        view = memoryview(buf)
        pos = 0
        while pos < view.nbytes:
            n = min(room, view.nbytes - pos)
            crc = _crc.extend(crc, view[pos : pos + n])
            pos += n
            room -= n
            if room == 0:
                blocks.append(crc)
                crc, room = 0, CRC_BLOCK
    if room < CRC_BLOCK:
        blocks.append(crc)
    return blocks


def header_length(prefix: Buffer) -> int | None:
    """The header length a prefix of an object announces, unchecked; None if too short."""
    view = memoryview(prefix).cast("B")
    if view.nbytes < _FIXED.size:
        return None
    length: int = _FIXED.unpack_from(view)[3]
    return length


def _check_magic(magic: bytes) -> None:
    if magic != MAGIC:
        raise InvalidObject("not a resumable object (bad magic); it was written by something else")


def _check_lengths(header_len: int, payload_len: int, n: int) -> None:
    """The header's and payload's lengths against the object's size, ``n`` bytes."""
    if not _FIXED.size + 7 <= header_len <= min(n, MAX_HEADER):
        raise InvalidObject(f"header length {header_len} out of range for a {n}-byte object")
    if payload_len != n - header_len:
        raise InvalidObject(
            f"truncated or padded: header says {payload_len} payload bytes, "
            f"object has {n - header_len}"
        )


# What a store reads of an object before it allocates memory for the whole (see screen)
SCREEN_BYTES = _FIXED.size


def marked_final(prefix: Buffer) -> bool:
    """Whether an object's first bytes say it is a final checkpoint (version 3 with
    FLAG_FINAL), before anything is verified: enough to pass one over, never to use it."""
    view = memoryview(prefix).cast("B")
    if view.nbytes < _FIXED.size or bytes(view[:8]) != MAGIC:
        return False
    version, flags = struct.unpack_from("<HH", view, _VERSION_AT)
    return version == VERSION_FINAL and bool(flags & FLAG_FINAL)


def screen(prefix: Buffer, size: int) -> None:
    """Before a store allocates ``size`` bytes for an object that begins with ``prefix``
    (``SCREEN_BYTES`` of it): InvalidObject where those bytes already show that it is not
    an object this library reads at that size (someone else's file at its name, a damaged
    length), so that it is skipped as damage instead of being read whole (review 138: a
    1 TiB sparse file at a checkpoint's name stopped the resume with ENOMEM). Passes what
    ``decode`` of the whole may accept, and a newer version's object (only the whole
    object tells a newer one from a flipped bit in its version field)."""
    view = memoryview(prefix).cast("B")
    if view.nbytes < _FIXED.size:
        return
    magic, version, _, header_len, _, _, _, payload_len, _, _ = _FIXED.unpack_from(view)
    _check_magic(magic)
    if version in READABLE_VERSIONS:
        _check_lengths(header_len, payload_len, size)


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
    _check_magic(magic)
    if version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        if version < min(READABLE_VERSIONS):  # (no resumable writes it)
            raise InvalidObject(f"damaged: its format version field reads {version}, which "
                                f"no resumable writes (this library reads {readable})")
        whole = view.nbytes == n
        if whole:  # (the whole object: a flipped bit shows, see _verifies_as)
            for readable_version in READABLE_VERSIONS:
                if _verifies_as(view, n, header_len, readable_version):
                    raise InvalidObject(
                        f"damaged: its format version field reads {version}, but the "
                        f"object verifies as version {readable_version} (a flipped bit)")
        raise InvalidObject(
            f"unsupported format version {version} (this library reads versions "
            f"{readable}); it was written by a newer resumable: upgrade resumable to "
            "read it" + ("" if whole else " (or it is damaged: a header alone cannot "
                         "tell; `resumable verify` reads the whole object)"), newer=True)
    if flags & ~_KNOWN_FLAGS:
        raise InvalidObject(f"unknown flags {flags:#x}")
    if bool(flags & FLAG_FINAL) != (version == VERSION_FINAL):
        # (both or neither: one flipped bit does not make a checkpoint final, which no
        # resume would start from, nor a final one resumable)
        raise InvalidObject(f"damaged: version {version} with flags {flags:#x}")
    _check_lengths(header_len, payload_len, n)
    if header_len > view.nbytes:
        raise ValueError(f"the header needs {header_len} bytes; only {view.nbytes} were read")
    aligned = version >= 2
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
        table_end = pos + 8 * count
        expected_len = table_end + (_pad(table_end) if aligned else 0)
        if count > MAX_FRAMES or expected_len != header_len:
            raise InvalidObject("frame table does not match the header length")
        lengths = struct.unpack_from(f"<{count}Q", view, pos)
    except (IndexError, struct.error, UnicodeDecodeError) as err:
        raise InvalidObject(f"malformed header ({err})") from None
    if flags & FLAG_FINAL and kind != "ckpt":
        raise InvalidObject(f"damaged: a {kind!r} object marked as a final checkpoint")
    if aligned and any(view[table_end:header_len]):
        raise InvalidObject("the header's padding is not zero")
    if sum(n + _pad(n) if aligned else n for n in lengths) != payload_len:
        raise InvalidObject("frame lengths do not add up to the payload length")
    return Header(
        version=version,
        signed=bool(flags & FLAG_SIGNED),
        final=bool(flags & FLAG_FINAL),
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


def _verifies_as(view: memoryview, n: int, header_len: int, version: int) -> bool:
    """Whether the object verifies with ``version`` in its version field: one bit flipped
    in a readable version reads as a version above this library's, "written by a newer
    resumable", where it is damage (review 109). The digest covers the field, so a newer
    object does not verify so. Only the header is copied (review 110: the object was,
    once per readable version: 400 MiB more for a 400 MiB object)."""
    if not _FIXED.size + 7 <= header_len <= min(n, MAX_HEADER, view.nbytes):
        return False
    fixed = bytearray(view[:header_len])
    struct.pack_into("<H", fixed, _VERSION_AT, version)
    try:
        header = read_header(fixed, n)
    except (InvalidObject, ValueError):
        return False
    return _digest_matches(fixed, version, header.signed, view[header_len:])


def _digest_matches(fixed: bytearray, version: int, signed: bool, payload: memoryview) -> bool:
    """Whether the header ``fixed`` (a copy) holds the digest of itself and ``payload``;
    its digest and signature fields are zeroed on the way, as they were when it was made."""
    stored = bytes(fixed[_DIGEST_AT:_MAC_AT])
    fixed[_DIGEST_AT : _FIXED.size] = bytes(64)
    return hmac.compare_digest(_digest(version, signed, fixed, [payload]), stored)


def check_placed(header: Header, kind: str | None, name: str | None) -> None:
    """InvalidObject if the header says the object is another kind, or was written under
    another name (``name``: its key in the store, e.g. ``run/ckpt-...``)."""
    if kind is not None and header.kind != kind:
        raise InvalidObject(f"holds a {header.kind!r} record where a {kind!r} was expected")
    if name is not None and header.name != name:
        raise InvalidObject(
            f"was written as {header.name!r}, not {name!r}: copied or renamed",
            tampered=header.signed,
        )


def decode(
    data: Buffer, *, key: bytes | None = None, kind: str | None = None, name: str | None = None
) -> Decoded:
    """Verify ``data`` completely, then return its header and frames (views into ``data``).

    The payload is read once, by the checksum; the frames are views, not copies, so
    frames of an object read into aligned memory are aligned too.
    """
    header = read_header(data)
    view = memoryview(data).cast("B")
    fixed = bytearray(view[: header.header_len])
    stored_digest = bytes(fixed[_DIGEST_AT:_MAC_AT])
    stored_mac = bytes(fixed[_MAC_AT : _FIXED.size])
    if not _digest_matches(fixed, header.version, header.signed, view[header.header_len :]):
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
    check_placed(header, kind, name)
    frames = [view[start : start + length]
              for start, length in zip(header.frame_offsets(), header.frame_lengths, strict=True)]
    return Decoded(header, frames)
