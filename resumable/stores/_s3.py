"""``s3://bucket/prefix``: the byte-level store on boto3 (AWS, MinIO, R2, Ceph, rclone, moto).

Objects become visible only when complete: a single PutObject, or a
CompleteMultipartUpload for large payloads whose parts are uploaded in parallel
straight from the payload's buffers (no giant joined ``bytes``). Large objects are
read back with parallel ranged GETs into one preallocated ``bytearray``.

Endpoint, region and credentials come from boto3's standard chain; explicit settings
may be given as constructor arguments or on the URL's query string, e.g.
``s3://bucket/prefix?endpoint_url=http://minio:9000&addressing_style=path&sse=aws:kms``.

botocore's own retries are off: its jitter draws from the global ``random`` module,
which ``capture_rng`` saves and restores. ``resumable._retry`` retries every request.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import http.client
import logging
import os
import random
import re
import shlex
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlsplit
from xml.etree import ElementTree
from xml.parsers import expat

from .. import _crc
from .._aligned import aligned_buffer
from .._errors import ConfigurationError, StoreError, StoreURLError
from .._retry import StoreConfigurationError, error_code, retrying
from . import Listed
from ._base import Payload, Screen, payload_size

try:
    import boto3
    import botocore.config
    import botocore.exceptions
    import botocore.utils
except ImportError as _err:  # pragma: no cover - the registry turns this into a hint
    raise ImportError("s3:// stores need boto3: pip install 'resumable[s3]'") from _err

log = logging.getLogger("resumable")

# botocore draws jitter from the global `random` when it refreshes EC2 instance-profile
# credentials (botocore.utils, about hourly on the upload thread). capture_rng owns that
# generator, so botocore gets a private one: a resumed run stays bit-identical.
botocore.utils.random = random.Random()  # type: ignore[attr-defined]

MiB = 1024 * 1024
DEFAULT_PART_SIZE = 8 * MiB
DEFAULT_THRESHOLD = 64 * MiB  # below this a payload goes up in one PutObject
MIN_PART_SIZE = 5 * MiB  # S3's minimum for every part but the last
MAX_PARTS = 10_000
CLOCK_SKEW_MARGIN = 60.0  # seconds: our clock against the server's, for stale uploads
# Parallel parts and ranged GETs. Each stream costs client CPU (copies, hashing, HTTP);
# on a 2-core pod 2 streams moved 512 MiB faster than 8 (309 vs 223 MiB/s up to a
# loopback rclone) and disturbed the training loop less, so scale with the cores.
DEFAULT_WORKERS = max(2, min(8, os.cpu_count() or 2))

_ENV_KEYS = (
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CA_BUNDLE",
)
_URL_OPTIONS = {
    "endpoint_url": str,
    "region": str,
    "addressing_style": str,
    "sse": str,
    "sse_kms_key_id": str,
    "storage_class": str,
    "part_size": int,
    "multipart_threshold": int,
    "max_workers": int,
    "connect_timeout": float,
    "read_timeout": float,
    "checksums": str,
}
_SSE = ("AES256", "aws:kms", "aws:kms:dsse")
_MAX_TIMEOUT = 1e6  # seconds (11 days): a socket takes at most ~9.2e9, botocore less


def _seconds(url: str, option: str, value: Any) -> float:
    """A timeout option as seconds: a real number above 0 and at most _MAX_TIMEOUT."""
    if not isinstance(value, (bool, str, bytes)):  # (numpy numbers, Decimal, Fraction)
        try:
            seconds = float(value)
        except (TypeError, ValueError, OverflowError):
            pass
        else:
            if 0 < seconds <= _MAX_TIMEOUT:  # (false for nan)
                return seconds
    raise StoreURLError(f"{url}: {option}={value!r}; give a number of seconds above 0 "
                             f"and at most {_MAX_TIMEOUT:,.0f}, e.g. 30")
# S3's bucket naming rules: 3-63 lowercase letters, digits, dots and hyphens, a letter
# or digit at both ends, no "..", not an IP address. A name outside them can never
# exist, so say so at once instead of sending requests that fail.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_IP_ADDRESS = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


def _valid_bucket(name: str) -> bool:
    return bool(_BUCKET.match(name)) and ".." not in name and not _IP_ADDRESS.match(name)

_clients: dict[tuple[object, ...], Any] = {}
_clients_lock = threading.Lock()
# (client key, bucket) -> does the server enforce If-None-Match?
_conditional: dict[tuple[object, ...], bool] = {}
_conditional_lock = threading.Lock()
# Clients are per process: a forked child (a fitness pool inside the body) that used
# the parent's client would share its keep-alive sockets with its siblings and read
# their responses, and would inherit locks other threads held at the fork.
_fork_generation = 0


def _forget_clients_after_fork() -> None:
    global _clients_lock, _conditional_lock, _fork_generation
    _clients.clear()
    _clients_lock = threading.Lock()
    _conditional_lock = threading.Lock()
    _fork_generation += 1


os.register_at_fork(after_in_child=_forget_clients_after_fork)


def _env_fingerprint() -> str:
    # Secrets only enter a hash: the cache key may end up in reprs and logs.
    text = "\0".join(f"{k}={os.environ.get(k, '')}" for k in _ENV_KEYS)
    return hashlib.sha256(text.encode()).hexdigest()


def _get_client(
    endpoint_url: str | None,
    region: str | None,
    addressing_style: str | None,
    connect_timeout: float,
    read_timeout: float,
    pool: int,
    checksums: bool,
) -> tuple[Any, tuple[object, ...]]:
    key = (
        checksums,
        endpoint_url,
        region,
        addressing_style,
        connect_timeout,
        read_timeout,
        pool,
        _env_fingerprint(),
    )
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            config = botocore.config.Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_pool_connections=pool,
                s3=_s3_options(addressing_style, checksums),  # type: ignore[arg-type]
                # The store asks for upload checksums itself: a single PutObject carries
                # the CRC32C the format computed (no second pass), parts a CRC32.
                request_checksum_calculation="when_required",
                # Ranged GETs carry the whole object's checksum on some servers (rclone),
                # which botocore would check against the range; our own header checksum
                # covers the whole payload on load instead.
                response_checksum_validation="when_required",
                # Parts go up as memoryviews of the snapshot (no copy); botocore's
                # validator admits only bytes, bytearray or a reader as a Body, though
                # the HTTP layer sends any buffer. The store builds every request itself
                # and checks what comes from users (bucket names, URL options) first.
                parameter_validation=False,
            )
            # A session per client: sessions are not thread-safe, clients are.
            core = botocore.session.get_session()
            # Listings carry a LastModified per object, which botocore parses with
            # dateutil at ~0.3 ms each: most of the client's time listing 1,000 runs.
            core.get_component("response_parser_factory").set_parser_defaults(
                timestamp_parser=_parse_timestamp)
            try:
                session = boto3.session.Session(botocore_session=core)
                client = session.client(
                    "s3", endpoint_url=endpoint_url, region_name=region, config=config
                )
            except (botocore.exceptions.BotoCoreError, ValueError) as err:
                # The environment's AWS settings (a profile that does not exist, an
                # endpoint that is no URL, a region that is no name): a ConfigurationError
                # naming them, not botocore's exception (review 37). The store adds its URL.
                raise ConfigurationError(
                    f"the S3 client cannot be made ({type(err).__name__}: {err}); check "
                    "$AWS_PROFILE (and the AWS config files), the endpoint "
                    f"({endpoint_url or '$AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL'}) and the "
                    f"region ({region or '$AWS_REGION / $AWS_DEFAULT_REGION'})") from err
            client.meta.events.register_first("before-parse.s3.ListObjectsV2", _parse_listing)
            _no_second_parse_of_listings(client)
            _clients[key] = client
    return client, key


def _parse_timestamp(value: str) -> datetime:
    """S3's ISO 8601 times (``2026-12-01T07:04:45.000Z``) fast; anything else as botocore."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is not None:
            return parsed
    except (ValueError, AttributeError, TypeError):
        pass
    result: datetime = botocore.utils.parse_timestamp(value)
    return result


_EMPTY_LISTING = (b'<?xml version="1.0" encoding="UTF-8"?>'
                  b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>')


def _parse_listing(response_dict: dict[str, Any], customized_response_dict: dict[str, Any],
                   **_: Any) -> None:
    """Parse a ListObjectsV2 page ourselves instead of with botocore's generic parser.

    botocore walks its shape model for every element: about 25 ms per 1,000 objects here,
    most of `resumable ls` on a store of 1,000 runs. A page in the shape S3 servers send
    it is read with regular expressions (``_read_plain_listing``); any other page with
    ElementTree. The fields the store reads (Key, Size, LastModified, IsTruncated,
    NextContinuationToken) go into ``customized_response_dict``, which botocore merges
    into its result, and the body it then parses is an empty listing. Keys are
    URL-decoded only when the server says it encoded them (the store asks with
    EncodingType=url itself, so botocore does not decode them). A 200 this cannot read as
    a listing (empty, cut short, an HTML page from a gateway, an <Error>, an entry
    without a key) becomes a 500, retried: botocore would have made an empty listing of
    most of them, and keys it left encoded.
    """
    if response_dict.get("status_code") != 200:
        return
    body = response_dict["body"]
    parsed = _read_plain_listing(body) if isinstance(body, bytes) else None
    if parsed is None:
        try:
            parsed = _read_listing_tree(body)
        except Exception:  # ParseError, a bad number or time (botocore raises its own)
            response_dict["status_code"] = 500
            return
    customized_response_dict.update(parsed)
    response_dict["body"] = _EMPTY_LISTING


def _read_listing_tree(body: bytes) -> dict[str, Any]:
    """Any well-formed page, with ElementTree; raises on what is not a listing."""
    root = ElementTree.fromstring(body)
    if not root.tag.endswith("ListBucketResult"):
        raise ValueError(root.tag)
    ns = root.tag[: -len("ListBucketResult")]
    encoded = root.findtext(f"{ns}EncodingType") == "url"
    contents: list[dict[str, Any]] = []
    for item in root.iterfind(f"{ns}Contents"):
        key, size = item.findtext(f"{ns}Key"), item.findtext(f"{ns}Size")
        modified = item.findtext(f"{ns}LastModified")
        if key is None:
            raise ValueError("an entry without a Key")
        entry: dict[str, Any] = {"Key": unquote_plus(key) if encoded else key}
        if size is not None:
            entry["Size"] = int(size)
        if modified:
            entry["LastModified"] = _parse_timestamp(modified)
        contents.append(entry)
    parsed: dict[str, Any] = {"IsTruncated": root.findtext(f"{ns}IsTruncated") == "true"}
    if contents:
        parsed["Contents"] = contents
    token = root.findtext(f"{ns}NextContinuationToken")
    if token is not None:
        parsed["NextContinuationToken"] = token
    return parsed


# the XML declarations of a UTF-8 page (lower case, double quotes), or none
_PLAIN_DECLARATIONS = (b'<?xml version="1.0" encoding="utf-8"?>', b'<?xml version="1.0"?>')
_PLAIN_ROOTS = {b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">': 1,
                b"<ListBucketResult>": 0}  # -> how many xmlns the page may hold
_WS = rb"(?>[ \t\r\n]*)"  # (XML's whitespace)
# The expressions below never give back what an atomic group (?>...) took, so a match
# or a failure costs time linear in the page. (Atomic groups, not possessive
# quantifiers: CPython 3.11.0-3.11.4 never match a possessive repeat of a subpattern
# that can backtrack, gh-106052, and every page would go to ElementTree.)
# Elements holding text (Owner's ID and DisplayName), with whitespace around them: the
# content of an element that holds elements. (%d: a number for the group names.)
_LEAVES = rb"(?:%s<(?P<i%%d>\w+)>(?>[^<]*)</(?P=i%%d)>)+%s" % (_WS, _WS)
# The content of an element the reader skips: leaves, tried first, or else text.
_SKIPPED = rb"(?>%s|[^<]+)?" % _LEAVES


def _other_element(i: int) -> bytes:
    """An element of an entry that is not a field the store reads (ETag, StorageClass,
    Owner...), followed by whitespace."""
    return (rb"<(?!(?:Key|Size|LastModified|Contents)>)(?P<o%d>\w+)>" % i
            + _SKIPPED % (i, i) + rb"</(?P=o%d)>%s" % (i, _WS))


# One <Contents> as S3 servers write it: Key, LastModified and Size, once each and in
# that order (AWS's, rclone's, moto's, MinIO's), other elements anywhere between them,
# no attributes, no entity in the three fields read, whitespace after it. An entry in
# another order is declined (ElementTree reads it).
_ENTRY = re.compile(
    rb"(?P<entry><Contents>%s(?>(?:%s)*)<Key>(?P<key>(?>[^<&\r]*))</Key>%s(?>(?:%s)*)"
    rb"<LastModified>(?P<modified>(?>[^<&\r]*))</LastModified>%s(?>(?:%s)*)"
    rb"<Size>(?P<size>(?>[^<&]*))</Size>%s(?>(?:%s)*)</Contents>%s)"
    % (_WS, _other_element(0), _WS, _other_element(1), _WS, _other_element(2), _WS,
       _other_element(3), _WS))
_ENTRY_GROUPS = tuple(_ENTRY.groupindex[g] - 1 for g in ("entry", "key", "modified", "size"))
# A child of the root other than an entry (Name, Prefix, IsTruncated...), and its text
# when it holds no element.
_ROOT_CHILD = re.compile(
    rb"%s<(?!Contents>)(?P<name>\w+)>(?>%s|(?P<text>[^<]*))</(?P=name)>%s"
    % (_WS, _LEAVES % (0, 0), _WS))
_PAGE_FIELDS = (b"EncodingType", b"IsTruncated", b"NextContinuationToken")


def _root_fields(body: bytes, start: int, end: int, into: dict[bytes, bytes]) -> bool:
    """Read the root's children in ``body[start:end]`` into ``into`` (name -> text of the
    page fields); False unless they fill it exactly, each page field once."""
    at = start
    while at < end:
        m = _ROOT_CHILD.match(body, at, end)
        if m is None:
            return body[at:end].strip(b" \t\r\n") == b""
        name, text = m["name"], m["text"]
        if name in _PAGE_FIELDS:
            if name in into or text is None or b"&" in text or b"\r" in text:
                return False
            into[name] = text
        at = m.end()
    return True


def _read_plain_listing(body: bytes) -> dict[str, Any] | None:
    """A page as AWS, rclone, moto and MinIO send it, read with regular expressions; None
    for any page not exactly of that shape, which ElementTree then reads.

    Faster than ElementTree by more than its parse: a tree of ~8,000 elements per page
    sets off the garbage collector's full passes over the whole process (90 of the
    150 ms that 5 pages of 1,000 took in `ls` here), and faster than reading each entry
    with ``bytes.find`` (28 against 9 ms a page). The shape: the XML declaration or
    none, the S3 namespace as the only (default) one, no comments, CDATA, DOCTYPE or
    processing instructions, URL-encoded keys (``EncodingType=url``, which the store
    asks for: no entities or carriage returns in them), and in the root: its other
    children (``_ROOT_CHILD``, the page fields among them once each, with no entity),
    the entries one after another (``_ENTRY``), then more of its other children. The
    page must be well-formed: expat (ElementTree's own parser) checks it, with no
    handlers, so it builds nothing.
    """
    try:
        # (the declaration, if any, must be the very first bytes; whitespace may follow)
        head = body[: body.find(b"?>") + 2] if body.startswith(b"<?xml") else b""
        if head and head.lower().replace(b"'", b'"') not in _PLAIN_DECLARATIONS:
            return None
        start = body[len(head):].lstrip()
        root = next((r for r in _PLAIN_ROOTS if start.startswith(r)), None)
        if (root is None or b"<!" in body or body.find(b"<?", len(head)) >= 0
                or body.count(b"xmlns") != _PLAIN_ROOTS[root]
                or body.count(b"<ListBucketResult") != 1
                or not body.rstrip().endswith(b"</ListBucketResult>")):
            return None
        # Well-formed, as ElementTree would find it (the same expat, namespaces checked),
        # but with no handler: nothing is built, so no Python object per element.
        expat.ParserCreate(namespace_separator="}").Parse(body, True)
        inside = len(body) - len(start) + len(root)  # where the root's content begins
        close = body.rindex(b"</ListBucketResult>")
        n = body.count(b"<Contents")
        first = body.find(b"<Contents>", inside, close) if n else close
        if first < 0:
            return None
        end = body.rindex(b"</Contents>", first, close) + len(b"</Contents>") if n else close
        rows = _ENTRY.findall(body, first, end)  # (none when first == end == close)
        entry, key, modified, size = _ENTRY_GROUPS
        fields: dict[bytes, bytes] = {}
        # The root holds its other children, then the entries one after another (every
        # <Contents> starts one, and they fill the region from the first to the last),
        # then more of its other children: so each entry and each page field read is
        # a child of the root.
        if (len(rows) != n or sum(len(row[entry]) for row in rows) != end - first
                or not _root_fields(body, inside, first, fields)
                or not _root_fields(body, end, close, fields)
                or fields.get(b"EncodingType") != b"url"):
            return None
        contents = [{"Key": unquote_plus(k) if "%" in k or "+" in k else k,
                     "Size": int(row[size]),
                     "LastModified": _parse_timestamp(row[modified].decode())}
                    for row in rows for k in (row[key].decode(),)]
        parsed: dict[str, Any] = {"IsTruncated": fields.get(b"IsTruncated") == b"true"}
        if contents:
            parsed["Contents"] = contents
        if b"NextContinuationToken" in fields:
            parsed["NextContinuationToken"] = fields[b"NextContinuationToken"].decode()
        return parsed
    except Exception:  # (a time botocore cannot parse raises what it likes)
        return None


def _no_second_parse_of_listings(client: Any) -> None:
    """botocore parses every 200 S3 body once more, looking for an <Error> root (S3 may
    answer 200 and fail): for a listing page a full second parse. ``_parse_listing``
    already decides that for listings, so on our clients botocore's check skips them.
    It is botocore's private handler: if it is not there, both parses stay."""
    try:
        from botocore.handlers import _handle_200_error  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - another botocore
        return
    events = client.meta.events
    events.unregister("before-parse.s3.*", _handle_200_error)

    def handle_200_error(operation_model: Any, **kwargs: Any) -> None:
        if operation_model.name != "ListObjectsV2":
            _handle_200_error(operation_model=operation_model, **kwargs)

    events.register_first("before-parse.s3.*", handle_200_error)


def _s3_options(addressing_style: str | None, checksums: bool) -> dict[str, Any] | None:
    options: dict[str, Any] = {}
    if addressing_style:
        options["addressing_style"] = addressing_style
    if checksums:
        # SigV4 would hash every uploaded byte with SHA-256 on http endpoints; the
        # checksum header (itself signed) covers the body instead.
        options["payload_signing_enabled"] = False
    return options or None


# The most a request body hands to one sendall. urllib3 sends the body with the socket's
# timeout set to the *connect* timeout, and a sendall (or, on https, an SSL write) must
# finish as a whole within the socket's timeout, not per packet: a whole 60 MiB frame in
# one call needs 12 MiB/s for 5 s, or the request fails, and every retry with it. One
# MiB per call needs 200 KiB/s, and takes the GIL back 16 times per 16 MiB (urllib3's
# own blocks: 128 times).
_SEND_BLOCK = 1 * MiB


class _Buffers:
    """A request body of several buffers that goes out without being joined.

    botocore turns a ``bytes`` body of PutObject or UploadPart into a ``BytesIO``, which
    urllib3 sends 128 KiB at a time: a Python loop that takes the GIL back over a
    hundred times per 16 MiB, from the training loop's thread. Joining the frames
    first is a copy of the whole payload under the GIL (page faults included: 12 ms per
    16 MiB here), during which the loop cannot run Python at all. This body is a reader
    whose ``read`` hands out the buffers as they lie, in slices of up to
    ``_SEND_BLOCK`` however much was asked for: urllib3 and http.client pass each to
    one ``sendall``, which releases the GIL for all of it. Not a whole frame at once:
    the socket's timeout bounds each call, so a frame too large to cross the link
    within it would fail every attempt (see ``_SEND_BLOCK``). Its length is known
    (``len``), so the request has a Content-Length.

    Only for bodies whose checksum is given (ChecksumCRC32C): botocore computes a
    checksum by reading the body in blocks of its own size.
    """

    def __init__(self, views: list[memoryview]) -> None:
        self._views = [v for v in views if v.nbytes]
        self._size = sum(v.nbytes for v in self._views)
        self._next = 0  # the buffer being read
        self._offset = 0  # how far into it
        self._pos = 0

    def __len__(self) -> int:
        return self._size

    def read(self, size: int | None = -1) -> memoryview | bytes:
        if self._next >= len(self._views):
            return b""
        view = self._views[self._next]
        chunk = view[self._offset : self._offset + _SEND_BLOCK]
        self._offset += chunk.nbytes
        if self._offset >= view.nbytes:
            self._next, self._offset = self._next + 1, 0
        self._pos += chunk.nbytes
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        if (offset, whence) not in ((0, 0), (self._pos, 0), (0, 1)):
            raise OSError(f"this request body can only be rewound (seek({offset}, {whence}))")
        if (offset, whence) == (0, 0):
            self._next = self._offset = self._pos = 0
        return self._pos

    def tell(self) -> int:
        return self._pos

    def joined(self) -> bytes:
        return b"".join(self._views)


def _crc32c_header(crc: int) -> str:
    """S3's ChecksumCRC32C: the big-endian CRC, base64."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def _byte_views(data: Payload) -> list[memoryview]:
    views = []
    for buf in data:
        view = memoryview(buf)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if view.nbytes:
            views.append(view)
    return views


def _split_parts(views: list[memoryview], part_size: int) -> list[list[memoryview]]:
    """Cut the payload into parts of ``part_size`` bytes as lists of zero-copy slices."""
    parts: list[list[memoryview]] = []
    current: list[memoryview] = []
    room = part_size
    for view in views:
        offset = 0
        while offset < view.nbytes:
            n = min(room, view.nbytes - offset)
            current.append(view[offset : offset + n])
            offset += n
            room -= n
            if room == 0:
                parts.append(current)
                current, room = [], part_size
    if current:
        parts.append(current)
    return parts


_EMPTY = object()  # _get_prefix: the object exists and is empty


def _range_total(response: Any) -> int | None:
    """The object's total size from a ranged GET's ContentRange (``bytes 0-x/TOTAL``)."""
    content_range = response.get("ContentRange")
    if content_range and "/" in content_range:
        tail = content_range.rsplit("/", 1)[1]
        return int(tail) if tail.isdigit() else None
    return None


def _rejects_checksums(exc: botocore.exceptions.ClientError) -> bool:
    """A refusal of S3's flexible checksums, not of the request: 400 or 501 naming them
    (OVH: 400 InvalidArgument "x-amz-checksum-crc32c ..."), or 501 NotImplemented (the
    header "implies functionality that is not implemented")."""
    code, status = error_code(exc)
    return status in (400, 501) and ("checksum" in str(exc).lower() or code == "NotImplemented")


class _ObjectChanged(Exception):
    """The object was replaced while a ranged download was in progress."""


def _read_exactly(body: Any, target: memoryview, *, close: bool = True) -> None:
    """``target`` filled from ``body``, which is closed after (with ``close``)."""
    import http.client

    got = 0
    try:
        while got < target.nbytes:
            n = body.readinto(target[got:])
            if not n:
                break
            got += n
    finally:
        if close:
            body.close()
    if got != target.nbytes:
        # Retryable: the connection ended early.
        raise http.client.IncompleteRead(b"", target.nbytes - got)


class S3Store:
    """The byte-level store protocol on one bucket and key prefix."""

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        addressing_style: str | None = None,
        sse: str | None = None,
        sse_kms_key_id: str | None = None,
        storage_class: str | None = None,
        part_size: int = DEFAULT_PART_SIZE,
        multipart_threshold: int = DEFAULT_THRESHOLD,
        max_workers: int = DEFAULT_WORKERS,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        checksums: bool | str = True,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise StoreURLError(f"store URL {url!r} must look like s3://bucket/prefix")
        self.url = url
        self.bucket = parts.netloc
        if not _valid_bucket(self.bucket):
            raise StoreURLError(
                f"store URL {url!r}: {self.bucket!r} is not a valid bucket name; S3 bucket "
                "names are 3-63 lowercase letters, digits, dots and hyphens, starting and "
                "ending with a letter or digit, without '..', and not an IP address, e.g. "
                "s3://my-ga-runs/prefix"
            )
        prefix = parts.path.strip("/")
        self.root = f"{prefix}/" if prefix else ""
        if addressing_style not in (None, "path", "virtual", "auto"):
            raise StoreURLError(
                f"{url}: addressing_style={addressing_style!r}; use path, virtual or auto"
            )
        if sse is not None and sse not in _SSE:
            raise StoreURLError(f"{url}: sse={sse!r}; use one of {', '.join(_SSE)}")
        if sse_kms_key_id is not None and sse is None:
            sse = "aws:kms"
        if part_size < MIN_PART_SIZE:
            raise StoreURLError(f"{url}: part_size must be at least {MIN_PART_SIZE} bytes")
        if max_workers < 1:
            raise StoreURLError(f"{url}: max_workers must be at least 1")
        if multipart_threshold < 1:  # (it was made 1: every object went up in parts)
            raise StoreURLError(f"{url}: multipart_threshold must be at least 1 byte "
                                     f"(the default is {DEFAULT_THRESHOLD})")
        # (nan, inf or 1e10 passed, and every request then failed as a StoreError: one a
        # podFailurePolicy retries, blaming the credentials; reviews 115, 116)
        connect_timeout = _seconds(url, "connect_timeout", connect_timeout)
        read_timeout = _seconds(url, "read_timeout", read_timeout)
        if isinstance(checksums, str):
            if checksums.lower() not in ("on", "off", "true", "false", "1", "0"):
                raise StoreURLError(f"{url}: checksums={checksums!r}; use on or off")
            checksums = checksums.lower() in ("on", "true", "1")
        # S3 CRC32 checksums on uploads; `checksums=off` for servers that reject them.
        self.checksums = checksums
        self.part_size = part_size
        self.multipart_threshold = multipart_threshold
        self.max_workers = max_workers
        self._extra: dict[str, str] = {}
        if sse:
            self._extra["ServerSideEncryption"] = sse
        if sse_kms_key_id:
            self._extra["SSEKMSKeyId"] = sse_kms_key_id
        if storage_class:
            self._extra["StorageClass"] = storage_class
        self._client_args = (
            endpoint_url,
            region,
            addressing_style,
            connect_timeout,
            read_timeout,
            # Parallel parts of a put plus a concurrent get must not wait for a socket.
            max(2 * max_workers + 4, 10),
            checksums,
        )
        self._own_client, client_key = self._new_client()
        self._client_generation = _fork_generation
        self._conditional_key = (*client_key, self.bucket)

    def _new_client(self) -> tuple[Any, tuple[Any, ...]]:
        try:
            return _get_client(*self._client_args)
        except ConfigurationError as err:
            raise ConfigurationError(f"store {self.url}: {err}") from err.__cause__

    @property
    def _client(self) -> Any:
        """This process's boto3 client (a forked child makes its own on first use)."""
        if self._client_generation != _fork_generation:
            self._own_client = self._new_client()[0]
            self._client_generation = _fork_generation
        return self._own_client

    @classmethod
    def from_url(cls, url: str) -> S3Store:
        """Open ``s3://bucket/prefix[?option=value&...]``; options are the keyword args."""
        parts = urlsplit(url)
        kwargs: dict[str, Any] = {}
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            kind = _URL_OPTIONS.get(name)
            if kind is None:
                known = ", ".join(sorted(_URL_OPTIONS))
                raise StoreURLError(f"store URL {url!r}: unknown option {name!r}; use {known}")
            try:
                kwargs[name] = kind(value)
            except ValueError:
                raise StoreURLError(
                    f"store URL {url!r}: option {name}={value!r} is not a valid {kind.__name__}"
                ) from None
        return cls(url, **kwargs)

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    # -- helpers -------------------------------------------------------------------

    def _key(self, key: str) -> str:
        if not key or key.startswith("/"):
            raise ConfigurationError(f"{self.url}: invalid key {key!r}")
        return self.root + key

    def _call(self, op: str, key: str | None, fn: Callable[[], Any]) -> Any:
        try:
            return retrying(op, self.url, key, fn)
        except StoreError as err:
            cause = err.__cause__
            if (type(err) is StoreError and cause is not None
                    and error_code(cause)[0] == "NoSuchBucket"):
                # The store URL names a bucket that does not exist: a setting to fix, which
                # no retry (and no new pod) heals: exit 78 like a bad bucket name, not 74.
                raise StoreConfigurationError(str(err), url=err.url, key=err.key) from cause
            raise

    # -- writes --------------------------------------------------------------------

    def put(self, key: str, data: Payload) -> None:
        self._write(key, data, if_absent=False)

    def put_if_absent(self, key: str, data: Payload) -> bool:
        if not self.conditional_writes():
            # Best effort where the server ignores If-None-Match: catches a claim made
            # earlier, but not one racing this very request (documented weaker fencing).
            if self._exists(key):
                return False
            self._write(key, data, if_absent=False)
            return True
        return self._write(key, data, if_absent=True)

    def _write(self, key: str, data: Payload, *, if_absent: bool) -> bool:
        full = self._key(key)
        size = payload_size(data)
        if size < self.multipart_threshold:
            return self._put_single(key, full, data, if_absent)
        return self._put_multipart(key, full, data, size, if_absent)

    def _put_single(self, key: str, full: str, data: Payload, if_absent: bool) -> bool:
        crc = getattr(data, "crc32c", None) if self.checksums else None
        # With its CRC32C known, the payload goes out as it lies, buffer by buffer
        # (_Buffers); otherwise botocore computes a CRC32 from bytes it can read.
        body: bytes | _Buffers = (_Buffers(_byte_views(data)) if isinstance(crc, int)
                                  else b"".join(_byte_views(data)))
        ambiguous = False
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full, "Body": body, **self._extra}
        if self.checksums:
            # The object's CRC32C from its encoding (one pass over the bytes): S3 checks
            # the body against it, end to end. Payloads without one (signed objects, whose
            # digest is SHA-256) get a CRC32 that botocore computes.
            if isinstance(crc, int):
                kwargs["ChecksumCRC32C"] = _crc32c_header(crc)
            else:
                kwargs["ChecksumAlgorithm"] = "CRC32"
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        # The same request without checksum headers: once the server has refused them.
        bare = {k: v for k, v in kwargs.items()
                if k not in ("ChecksumCRC32C", "ChecksumAlgorithm")}

        def attempt() -> bool:
            nonlocal ambiguous
            if isinstance(body, _Buffers):
                body.seek(0)  # a retry sends it again from the start
            sent = kwargs if self.checksums else bare
            try:
                try:
                    self._client.put_object(**sent)
                except botocore.exceptions.ClientError as exc:
                    if sent is bare or not _rejects_checksums(exc):
                        raise
                    if isinstance(body, _Buffers):
                        body.seek(0)
                    self._retry_without_checksums(exc, lambda c: c.put_object(**bare))
            except botocore.exceptions.ClientError as exc:
                code, status = error_code(exc)
                if if_absent and (code == "PreconditionFailed" or status == 412):
                    # If an earlier attempt of ours may have landed before its response
                    # was lost, the object we collide with may be our own.
                    return ambiguous and self._same_content(full, body)
                ambiguous = True
                raise
            except Exception:
                ambiguous = True
                raise
            return True

        result: bool = self._call("put", key, attempt)
        return result

    def _same_content(self, full: str, body: bytes | _Buffers) -> bool:
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=full)
            expected = body.joined() if isinstance(body, _Buffers) else body
            return bool(response["Body"].read() == expected)
        except Exception:  # any doubt means "not ours"
            return False

    def _put_multipart(
        self, key: str, full: str, data: Payload, size: int, if_absent: bool
    ) -> bool:
        parts, crcs = self._plan_parts(data, size)
        algorithm = "CRC32C" if crcs else "CRC32"
        created = self._call("put (create multipart upload)", key,
                             lambda: self._create(full, algorithm))
        upload_id: str = created["UploadId"]
        if not self.checksums:  # the server rejected checksums
            crcs = None
        try:
            completed = self._upload_parts(key, full, upload_id, parts, crcs)
            done = self._complete(key, full, upload_id, completed, size, if_absent)
        except BaseException as exc:
            self._abort(key, full, upload_id)
            if isinstance(exc, StoreError):
                raise StoreError(
                    f"{exc} (the multipart upload was aborted; nothing was written)",
                    url=self.url,
                    key=key,
                ) from exc
            raise
        if not done:
            self._abort(key, full, upload_id)
        return done

    def _plan_parts(
        self, data: Payload, size: int
    ) -> tuple[list[list[memoryview]], list[int] | None]:
        """The parts as zero-copy slices, and each one's CRC32C when the payload has them.

        A payload from the format carries the CRC32C of each block of its bytes after
        the first buffer (the header), computed in its one pass; parts made of whole
        blocks (the header joins the first) get their CRC32C by combination, and S3
        verifies each part against it. Otherwise botocore computes a CRC32 per part.
        """
        part_size = max(self.part_size, -(-size // MAX_PARTS))
        blocks = getattr(data, "crc32c_blocks", None) if self.checksums else None
        block = getattr(data, "crc32c_block_size", 0)
        if not blocks or not isinstance(block, int) or block <= 0 or len(data) < 2:
            return _split_parts(_byte_views(data), part_size), None
        head = memoryview(data[0]).cast("B")
        body_len = size - head.nbytes
        if len(blocks) != -(-body_len // block) or body_len <= 0:
            return _split_parts(_byte_views(data), part_size), None
        part_size = -(-part_size // block) * block
        parts = _split_parts(_byte_views(data[1:]), part_size)
        parts[0].insert(0, head)
        per_part = part_size // block
        crcs = []
        for i in range(len(parts)):
            first = i * per_part
            crcs.append(_crc.join(
                (blocks[j], min(block, body_len - j * block))
                for j in range(first, min(first + per_part, len(blocks)))
            ))
        body0 = min(part_size, body_len)
        crcs[0] = _crc.combine(_crc.extend(0, head), crcs[0], body0)
        return parts, crcs

    def _create(self, full: str, algorithm: str) -> Any:
        if self.checksums:
            try:
                return self._client.create_multipart_upload(
                    Bucket=self.bucket, Key=full, ChecksumAlgorithm=algorithm, **self._extra
                )
            except botocore.exceptions.ClientError as exc:
                if not _rejects_checksums(exc):
                    raise
                return self._retry_without_checksums(
                    exc, lambda c: c.create_multipart_upload(
                        Bucket=self.bucket, Key=full, **self._extra))
        return self._client.create_multipart_upload(Bucket=self.bucket, Key=full, **self._extra)

    def _retry_without_checksums(self, exc: botocore.exceptions.ClientError,
                                 send: Callable[[Any], Any]) -> Any:
        """``exc`` refused a request that carried S3 checksum headers, perhaps for them: a
        501 NotImplemented ("a header you provided implies functionality that is not
        implemented") may be about any header, say ``?sse=aws:kms`` on a server without
        KMS. ``send(client)`` makes the request again without them, with the client that
        ``?checksums=off`` uses. Only if that works were the checksums the reason, and
        none go out from now on; if it fails, its error is the real one, and checksums
        stay on."""
        result = send(_get_client(*self._client_args[:-1], False)[0])
        code, status = error_code(exc)
        self._without_checksums(code or f"HTTP {status}")  # a bodyless refusal has no code
        return result

    def _without_checksums(self, code: str) -> None:
        """The server refused requests for their checksum headers: none from now on.

        Uploads then go out as with ``?checksums=off``: by the client made for that,
        which signs the payload (SHA-256) on http endpoints, so a body damaged in transit
        is still refused by the server; what is read back is verified against the
        format's own CRC32C (or signature) as always."""
        with _clients_lock:
            if not self.checksums:
                return
            self.checksums = False
            self._client_args = (*self._client_args[:-1], False)
        self._own_client = _get_client(*self._client_args)[0]  # takes _clients_lock
        log.warning("%s: the server rejects S3 checksums (%s); uploading without them "
                    "(reads are still verified; `?checksums=off` in the store URL skips "
                    "this first refused request)", self.url, code)

    def _upload_parts(
        self, key: str, full: str, upload_id: str, parts: list[list[memoryview]],
        crcs: list[int] | None,
    ) -> list[dict[str, Any]]:
        def upload(number: int, segments: list[memoryview]) -> dict[str, Any]:
            checksum: dict[str, str] = {}
            if crcs is not None:
                checksum["ChecksumCRC32C"] = _crc32c_header(crcs[number - 1])
            elif self.checksums:
                checksum["ChecksumAlgorithm"] = "CRC32"
            # With its CRC32C known, a part goes out from the frames it lies in, in
            # sendalls of up to a MiB (_Buffers); without, botocore reads bytes to
            # compute a CRC32, so the part is joined (a part's size per worker).
            body: Any = _Buffers(segments) if crcs is not None else b"".join(segments)

            def send(client: Any, sent: dict[str, str]) -> Any:
                return client.upload_part(Bucket=self.bucket, Key=full, UploadId=upload_id,
                                          PartNumber=number, Body=body, **sent)

            def attempt() -> dict[str, Any]:
                if isinstance(body, _Buffers):
                    body.seek(0)  # a retry sends it again from the start
                # None once the server has refused them (this part or another).
                sent = checksum if self.checksums else {}
                try:
                    response = send(self._client, sent)
                except botocore.exceptions.ClientError as exc:
                    if not (sent and _rejects_checksums(exc)):
                        raise
                    # A server that took CreateMultipartUpload's checksum algorithm (or
                    # ignored it) may still refuse a part's checksum header.
                    sent = {}
                    if isinstance(body, _Buffers):
                        body.seek(0)
                    response = self._retry_without_checksums(exc, lambda c: send(c, {}))
                entry = {"PartNumber": number, "ETag": response["ETag"]}
                if "ChecksumCRC32C" in sent:
                    entry["ChecksumCRC32C"] = sent["ChecksumCRC32C"]
                elif response.get("ChecksumCRC32"):
                    entry["ChecksumCRC32"] = response["ChecksumCRC32"]
                return entry

            result: dict[str, Any] = self._call(f"put (part {number})", key, attempt)
            return result

        workers = min(self.max_workers, len(parts))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="resumable-s3-put")
        try:
            futures: list[Future[dict[str, Any]]] = [
                pool.submit(upload, number, segments)
                for number, segments in enumerate(parts, start=1)
            ]
            _done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                if future.done() and future.exception() is not None:
                    for other in pending:
                        other.cancel()
                    raise future.exception()  # type: ignore[misc]
            return [future.result() for future in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _complete(
        self,
        key: str,
        full: str,
        upload_id: str,
        completed: list[dict[str, Any]],
        size: int,
        if_absent: bool,
    ) -> bool:
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": full,
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": completed},
        }
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        attempts = 0

        def attempt() -> bool:
            nonlocal attempts
            attempts += 1
            try:
                self._client.complete_multipart_upload(**kwargs)
            except botocore.exceptions.ClientError as exc:
                code, status = error_code(exc)
                if if_absent and (code == "PreconditionFailed" or status == 412):
                    return False
                if code == "NoSuchUpload" and attempts > 1:
                    # An earlier attempt completed it but its response was lost.
                    return self._size_of(full) == size
                raise
            return True

        result: bool = self._call("put (complete multipart upload)", key, attempt)
        return result

    def _abort(self, key: str, full: str, upload_id: str) -> None:
        def attempt() -> None:
            try:
                self._client.abort_multipart_upload(
                    Bucket=self.bucket, Key=full, UploadId=upload_id
                )
            except botocore.exceptions.ClientError as exc:
                if error_code(exc)[0] != "NoSuchUpload":
                    raise

        try:
            self._call("abort multipart upload", key, attempt)
        except StoreError as exc:
            log.error("%s; add a lifecycle rule that aborts incomplete multipart uploads", exc)

    def _size_of(self, full: str) -> int | None:
        try:
            response = self._client.head_object(Bucket=self.bucket, Key=full)
        except botocore.exceptions.ClientError as exc:
            if error_code(exc)[1] == 404:
                return None
            raise
        return int(response["ContentLength"])

    def _exists(self, key: str) -> bool:
        full = self._key(key)
        return self._call("head", key, lambda: self._size_of(full)) is not None

    # -- reads ---------------------------------------------------------------------

    def get(self, key: str) -> bytes | bytearray | memoryview | None:
        return self.get_screened(key, None, 0)

    def get_screened(self, key: str, screen: Screen | None,
                     n: int) -> bytes | bytearray | memoryview | None:
        full = self._key(key)
        for _ in range(5):
            try:
                return self._get_once(key, full, screen, n)
            except _ObjectChanged:
                continue  # replaced mid-download: read the new version from the start
        raise StoreError(
            f"get {self.url} key {key!r} failed: the object kept changing during the download; "
            "make sure only one process writes it",
            url=self.url,
            key=key,
        )

    def _get_prefix(self, full: str, n: int) -> Any:
        """GetObject of bytes 0..n-1: the response, None for a missing key, or _EMPTY."""
        try:
            return self._client.get_object(Bucket=self.bucket, Key=full, Range=f"bytes=0-{n - 1}")
        except botocore.exceptions.ClientError as exc:
            code, status = error_code(exc)
            if code in ("NoSuchKey", "NotFound"):
                return None
            if status == 404 and code in (None, "", "404"):
                # S3 names the code of a GET's error; none means the error body was cut
                # off in transit, or a gateway in between sends bare 404s. A HEAD settles
                # it (its answer has no body to lose): missing, or ask again.
                if self._size_of(full) is None:
                    return None
                raise http.client.IncompleteRead(b"") from exc
            if code == "InvalidRange" or status == 416:
                return _EMPTY  # ranges are invalid on empty objects only
            raise

    def _get_once(self, key: str, full: str, screen: Screen | None,
                  n: int) -> memoryview | None:
        first = self.part_size

        def head_chunk() -> tuple[memoryview, int, int, str | None] | None:
            """(buffer for the whole object, bytes in it so far, total size, ETag)."""
            response = self._get_prefix(full, first)
            if response is None:
                return None
            if response is _EMPTY:
                response = self._client.get_object(Bucket=self.bucket, Key=full)
            length = int(response["ContentLength"])
            # No ContentRange: the server sent the whole object (an empty one, or a
            # server that ignored the Range header).
            total = _range_total(response) if response.get("ContentRange") else length
            if total is None or total < length:
                total = length
            screened = bytearray()
            if screen is not None and total > n:
                screened = bytearray(min(n, length))
                try:
                    _read_exactly(response["Body"], memoryview(screened), close=False)
                    screen(memoryview(screened), total)
                except BaseException:
                    response["Body"].close()
                    raise
            # The whole object goes into one 64-byte aligned buffer (see _aligned), so
            # the frames the format aligns in the object are aligned in memory as well.
            buffer = aligned_buffer(total)
            buffer[:len(screened)] = screened
            _read_exactly(response["Body"], buffer[len(screened):length])
            return buffer, length, total, response.get("ETag")

        found: tuple[memoryview, int, int, str | None] | None = self._call("get", key, head_chunk)
        if found is None:
            return None
        view, got, total, etag = found
        if total <= got:
            return view
        ranges = [
            (start, min(start + self.part_size, total))
            for start in range(got, total, self.part_size)
        ]

        def fetch(start: int, stop: int) -> None:
            def attempt() -> None:
                extra = {"IfMatch": etag} if etag else {}
                try:
                    response = self._client.get_object(
                        Bucket=self.bucket, Key=full, Range=f"bytes={start}-{stop - 1}", **extra
                    )
                except botocore.exceptions.ClientError as exc:
                    code, status = error_code(exc)
                    if code in ("PreconditionFailed", "NoSuchKey") or status in (404, 412):
                        raise _ObjectChanged from exc
                    raise
                if etag and response.get("ETag") not in (None, etag):
                    response["Body"].close()
                    raise _ObjectChanged  # servers that ignore If-Match (rclone)
                _read_exactly(response["Body"], view[start:stop])

            self._call(f"get (bytes {start}-{stop - 1})", key, attempt)

        workers = min(self.max_workers, len(ranges))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="resumable-s3-get") as pool:
            futures = [pool.submit(fetch, start, stop) for start, stop in ranges]
            wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                if future.done() and future.exception() is not None:
                    for other in futures:
                        other.cancel()
                    raise future.exception()  # type: ignore[misc]
            for future in futures:
                future.result()
        return view

    def head(self, key: str, n: int) -> tuple[bytes, int] | None:
        """The first ``n`` bytes and the total size in one ranged GET (the CLI's headers)."""
        full = self._key(key)

        def size_only() -> tuple[bytes, int] | None:
            size = self._size_of(full)
            return None if size is None else (b"", size)

        def attempt() -> tuple[bytes, int] | None:
            if n < 1:
                return size_only()  # no valid Range asks for nothing
            response = self._get_prefix(full, n)
            if response is None:
                return None
            if response is _EMPTY:
                found = size_only()
                if found is not None and found[1] > 0:
                    # Replaced by a non-empty object in between: ask again.
                    raise http.client.IncompleteRead(b"")
                return found
            length = int(response["ContentLength"])
            # No ContentRange: the server sent the whole object.
            total = _range_total(response) if response.get("ContentRange") else length
            # Read no more than asked for, even from a server that ignored the Range.
            chunk = bytearray(min(length, n))
            _read_exactly(response["Body"], memoryview(chunk))
            if total is None:  # "bytes 0-x/*": the size is unknown to this response
                found = size_only()
                if found is None:
                    return None
                total = found[1]
            return bytes(chunk), total

        result: tuple[bytes, int] | None = self._call("head", key, attempt)
        return result

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        return [item.key for item in self._listing(prefix, start_after)]

    def list_info(self, prefix: str) -> builtins.list[Listed]:
        """``list`` with each object's size and LastModified, from the same requests."""
        return self._listing(prefix, None)

    def _listing(self, prefix: str, start_after: str | None) -> builtins.list[Listed]:
        keys: builtins.list[Listed] = []
        token: str | None = None
        full_prefix = self.root + prefix
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full_prefix,
                                      "EncodingType": "url"}  # decoded by _parse_listing
            if token:
                kwargs["ContinuationToken"] = token
            elif start_after is not None:
                kwargs["StartAfter"] = self.root + start_after
            page: dict[str, Any] = self._call("list", prefix or None, self._lister(kwargs))
            for item in page.get("Contents", ()):
                name: str = item["Key"]
                if name.startswith(self.root):
                    modified = item.get("LastModified")
                    keys.append(Listed(name[len(self.root) :], int(item.get("Size", 0)),
                                       modified.timestamp() if modified else 0.0))
            if not page.get("IsTruncated"):
                break
            token = page.get("NextContinuationToken")
            if not token:  # a listing cut short is not a short listing
                raise StoreError(
                    f"{self.url}: listing {prefix!r} returned a truncated page without a "
                    "NextContinuationToken, so the rest cannot be listed; the server does "
                    "not implement ListObjectsV2 correctly (check its S3 compatibility)")
        keys.sort()  # S3 lists in byte order already; some compatible servers do not
        if start_after is not None:
            keys = [k for k in keys if k.key > start_after]
        return keys

    def _lister(self, kwargs: dict[str, Any]) -> Callable[[], Any]:
        return lambda: self._client.list_objects_v2(**kwargs)

    def remove_temp_files(self, prefix: str, older_than: float | None = None) -> int:
        """Abort the incomplete multipart uploads under ``prefix`` (a run's folder).

        A pod killed in the middle of a large save leaves its parts in the bucket,
        invisible and billed. Called when a new attempt has claimed the run (older
        attempts are fenced) and by ``resumable rm``. Best effort: a server without
        ListMultipartUploads, or a failure here, leaves them to a lifecycle rule.
        With ``older_than`` only uploads initiated before it, less a minute for clock
        skew between us and the server: a newer attempt's save in flight stays.
        Returns how many uploads were aborted.
        """
        full_prefix = self.root + prefix
        aborted = 0
        try:
            pages = self._client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=full_prefix)
            for page in pages:
                for upload in page.get("Uploads", ()):
                    key = upload["Key"]
                    if "/" in key[len(full_prefix):]:
                        continue  # another run's, in a store nested below (review 38)
                    initiated = upload.get("Initiated")
                    if older_than is not None and (
                            initiated is None
                            or initiated.timestamp() >= older_than - CLOCK_SKEW_MARGIN):
                        continue
                    self._abort(key[len(self.root):], key, upload["UploadId"])
                    aborted += 1
        except Exception as exc:  # cleanup must never fail a run
            log.debug("%s: not aborting leftover uploads under %r: %s", self.url, prefix, exc)
        return aborted

    def delete_command(self, key: str) -> str:
        """A shell command that deletes the object by hand (named in error messages), at
        this store's endpoint and region when its URL set them."""
        endpoint, region = self._client_args[:2]
        return "`aws s3 rm " + " ".join(
            [shlex.quote(f"s3://{self.bucket}/{self._key(key)}")]
            + ([f"--endpoint-url {shlex.quote(endpoint)}"] if endpoint else [])
            + ([f"--region {shlex.quote(region)}"] if region else [])) + "`"

    def delete(self, key: str) -> None:
        full = self._key(key)

        def attempt() -> None:
            try:
                self._client.delete_object(Bucket=self.bucket, Key=full)
            except botocore.exceptions.ClientError as exc:
                if error_code(exc)[0] not in ("NoSuchKey", "NotFound"):
                    raise

        self._call("delete", key, attempt)

    # -- capabilities ----------------------------------------------------------------

    def conditional_writes(self) -> bool:
        with _conditional_lock:
            known = _conditional.get(self._conditional_key)
            if known is None:
                known = self._probe_conditional()
                _conditional[self._conditional_key] = known
        return known

    def _probe_conditional(self) -> bool:
        probe = f".resumable-probe-{uuid.uuid4().hex}"
        full = self._key(probe)

        def put() -> bool:
            try:
                self._client.put_object(Bucket=self.bucket, Key=full, Body=b"", IfNoneMatch="*")
            except botocore.exceptions.ClientError as exc:
                code, status = error_code(exc)
                if code == "PreconditionFailed" or status == 412:
                    return False
                if status in (400, 501) or code == "NotImplemented":
                    # The server rejects the header outright: treat as unsupported.
                    return True
                raise
            return True

        try:
            self._call("put (conditional-write probe)", probe, put)
            enforced = not self._call("put (conditional-write probe)", probe, put)
        finally:
            self.delete(probe)
        if not enforced:
            log.warning(
                "%s: the server ignores conditional writes (If-None-Match); fencing of "
                "concurrent attempts of a run is weaker (best-effort existence checks)",
                self.url,
            )
        return enforced


__all__ = ["S3Store"]
