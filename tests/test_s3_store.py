"""The S3 store against real servers (moto and `rclone serve s3`) over loopback HTTP."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from typing import Any

import pytest

from resumable._errors import ConfigurationError, StoreError
from resumable._retry import is_transient
from resumable.stores import open_store
from resumable.stores._s3 import _SEND_BLOCK, S3Store
from tests.faultproxy import FaultProxy, SlowLink
from tests.s3servers import BAD_CREDENTIALS, S3Server

pytestmark = pytest.mark.s3

MiB = 1024 * 1024


def _payload(sizes: list[int], seed: int) -> list[Any]:
    rng = random.Random(seed)
    out: list[Any] = []
    for i, size in enumerate(sizes):
        data = rng.randbytes(size)
        # Mix buffer kinds the serializer hands over (bytes, bytearray, memoryviews).
        out.append([data, bytearray(data), memoryview(data)][i % 3])
    return out


def _joined(payload: list[Any]) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in payload)


def test_put_get_list_delete(s3_store_url: str) -> None:
    store = open_store(s3_store_url)
    assert isinstance(store, S3Store)
    assert store.get("run/missing") is None
    assert store.list("run/") == []
    store.put("run/ckpt-0001", [b"one"])
    store.put("run/ckpt-0002", [b"tw", memoryview(b"o")])
    store.put("run/result", [])
    store.put("other/ckpt-0001", [b"x"])
    assert bytes(store.get("run/ckpt-0002") or b"") == b"two"
    assert store.get("run/result") == b""
    assert store.list("run/") == ["run/ckpt-0001", "run/ckpt-0002", "run/result"]
    assert store.list("run/ckpt-") == ["run/ckpt-0001", "run/ckpt-0002"]
    assert store.list("run/", start_after="run/ckpt-0001") == ["run/ckpt-0002", "run/result"]
    assert store.list("") == [
        "other/ckpt-0001",
        "run/ckpt-0001",
        "run/ckpt-0002",
        "run/result",
    ]
    store.put("run/ckpt-0001", [b"replaced"])
    assert bytes(store.get("run/ckpt-0001") or b"") == b"replaced"
    store.delete("run/ckpt-0001")
    store.delete("run/ckpt-0001")  # idempotent
    assert store.get("run/ckpt-0001") is None
    assert store.list("run/ckpt-") == ["run/ckpt-0002"]


def test_stores_with_other_prefixes_do_not_see_each_other(
    s3_server: S3Server, s3_env: Callable[..., Any]
) -> None:
    s3_env(s3_server)
    bucket = s3_server.make_bucket()
    a, b = open_store(f"s3://{bucket}/a"), open_store(f"s3://{bucket}/ab")
    a.put("k", [b"a"])
    b.put("k", [b"b"])
    assert a.list("") == ["k"] and b.list("") == ["k"]
    assert bytes(a.get("k") or b"") == b"a"


def test_put_if_absent_and_conditional_writes(s3_server: S3Server, s3_store_url: str) -> None:
    store = open_store(s3_store_url)
    enforced = store.conditional_writes()
    # moto enforces If-None-Match; rclone serve s3 ignores it (checked by writing twice).
    assert enforced is (s3_server.name == "moto")
    assert store.conditional_writes() is enforced  # cached
    assert store.put_if_absent("run/epoch-1", [b"first"]) is True
    # Where the server ignores the header the store still refuses a key that exists.
    assert store.put_if_absent("run/epoch-1", [b"second"]) is False
    assert bytes(store.get("run/epoch-1") or b"") == b"first"
    assert store.list("") == ["run/epoch-1"]  # the probe object was removed


def test_multipart_put_if_absent(s3_server: S3Server, s3_store_url: str) -> None:
    store = S3Store.from_url(s3_store_url + "?part_size=5242880&multipart_threshold=5242880")
    payload = _payload([6 * MiB, 5 * MiB + 7], seed=3)
    assert store.put_if_absent("run/big", payload) is True
    assert store.put_if_absent("run/big", _payload([6 * MiB], seed=4)) is False
    assert bytes(store.get("run/big") or b"") == _joined(payload)
    if s3_server.name == "moto":
        bucket = s3_store_url.split("/")[2]
        assert not s3_server.client().list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_multipart_roundtrip_64mib_bit_exact(s3_store_url: str) -> None:
    numpy = pytest.importorskip("numpy")
    array = numpy.random.default_rng(7).standard_normal(3 * MiB // 8 * 5)  # 15 MiB float64
    # Several buffers of odd sizes so parts span buffer boundaries; one is a typed view.
    payload = [*_payload([1234, 30 * MiB + 5, 3, 19 * MiB + 1], seed=5), memoryview(array)]
    expected = _joined(payload)
    assert len(expected) >= 64 * MiB
    store = open_store(s3_store_url)
    store.put("run/ckpt-big", payload)
    got = store.get("run/ckpt-big")
    assert got is not None
    assert len(got) == len(expected)
    assert bytes(got) == expected


def test_operations_through_faulty_network(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "30")
    url = s3_server.new_store_url()
    proxy = fault_proxy(s3_server, rate=0.3, seed=11, delay=0.2)
    s3_env(s3_server, endpoint=proxy.endpoint)
    small, big = _payload([1000, 20], seed=1), _payload([7 * MiB, 4 * MiB + 3], seed=2)
    random.seed(1234)
    before = random.getstate()
    with caplog.at_level(logging.WARNING, logger="resumable"):
        store = S3Store.from_url(url + "?part_size=5242880&multipart_threshold=5242880")
        for i in range(8):
            store.put(f"run/ckpt-{i:04d}", small)
        store.put("run/ckpt-big", big)
        assert store.put_if_absent("run/epoch-1", [b"mine"]) is True
        assert store.put_if_absent("run/epoch-1", [b"theirs"]) is False
        assert bytes(store.get("run/ckpt-0003") or b"") == _joined(small)
        assert bytes(store.get("run/ckpt-big") or b"") == _joined(big)
        assert store.list("run/ckpt-", start_after="run/ckpt-0005") == [
            "run/ckpt-0006",
            "run/ckpt-0007",
            "run/ckpt-big",
        ]
        for i in range(6):
            store.delete(f"run/ckpt-{i:04d}")
        assert store.list("run/ckpt-0") == ["run/ckpt-0006", "run/ckpt-0007"]
    # Retries must not draw from the global RNG that capture_rng saves and restores.
    assert random.getstate() == before
    assert proxy.fault_count > 0, proxy.faults
    assert proxy.requests > proxy.fault_count
    retries = [r for r in caplog.records if r.getMessage().startswith("retrying ")]
    assert retries, "each retry is logged"
    assert url in retries[0].getMessage()


def test_failed_multipart_upload_is_aborted(
    moto_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "0.5")
    url = moto_server.new_store_url()
    bucket = url.split("/")[2]
    # Part 2 always fails; everything else (including the abort) gets through.
    proxy = fault_proxy(moto_server, rate=1.0, kinds=["internal"], match=b"partNumber=2")
    s3_env(moto_server, endpoint=proxy.endpoint)
    store = S3Store.from_url(url + "?part_size=5242880&multipart_threshold=5242880")
    with pytest.raises(StoreError) as info:
        store.put("run/ckpt-big", _payload([12 * MiB], seed=9))
    message = str(info.value)
    assert "\n" not in message
    assert "run/ckpt-big" in message and "aborted" in message and "InternalError" in message
    assert proxy.faults["internal"] >= 1
    client = moto_server.client()
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert store.get("run/ckpt-big") is None


def _behind_a_listing_gateway(server: S3Server, s3_env: Callable[..., Any],
                              fault_proxy: Callable[..., FaultProxy], kind: str,
                              **options: Any) -> tuple[str, FaultProxy]:
    """A store holding run/ckpt-1, reached through a proxy that answers its listings
    with a 200 of ``kind``; the store URL and the proxy."""
    url = server.new_store_url()
    s3_env(server)
    open_store(url).put("run/ckpt-1", [b"x"])
    proxy = fault_proxy(server, rate=1.0, kinds=[kind], match=b"list-type=2", **options)
    s3_env(server, endpoint=proxy.endpoint)
    return url, proxy


@pytest.mark.parametrize("kind", ["empty_200", "html_200"])
def test_a_200_listing_that_is_not_a_listing_is_retried_not_taken_as_empty(
    moto_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    """A gateway that answers ListObjectsV2 with 200 and an empty body or an HTML page,
    twice: a transient failure, retried until the real listing comes back; never an
    empty listing (a resume would start the run over, `rm --completed` would see no
    runs). The deadline is long and the proxy stops faulting after two, so the retry
    happens however slow the machine is."""
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "30")
    url, proxy = _behind_a_listing_gateway(moto_server, s3_env, fault_proxy, kind, limit=2)
    assert open_store(url).list("run/") == ["run/ckpt-1"]
    assert proxy.faults[kind] == 2


@pytest.mark.parametrize("kind", ["empty_200", "html_200"])
def test_a_200_listing_that_is_never_a_listing_fails_instead_of_listing_nothing(
    moto_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    """The same gateway at every request: a StoreError at the retry deadline, never an
    empty listing. (How many attempts fit in the short deadline depends on the machine's
    speed, so only the test above counts retries.)"""
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "0.5")
    url, proxy = _behind_a_listing_gateway(moto_server, s3_env, fault_proxy, kind)
    store = open_store(url)
    with pytest.raises(StoreError, match="HTTP 500"):
        store.list("run/")
    assert proxy.faults[kind] >= 1
    with proxy.paused():
        assert store.list("run/") == ["run/ckpt-1"]


class _Retries(logging.Handler):
    """Collects the retry warnings logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("retrying"):
            self.messages.append(record.getMessage())


def _assert_fast_one_line_error(fn: Callable[[], object], *needles: str,
                                transient: bool = False) -> str:
    # "Fast" is a behaviour, not a speed: a permanent error is never retried (a retried
    # one would also be slow, up to the deadline), whatever the machine's load.
    retries = _Retries()
    logger = logging.getLogger("resumable")
    logger.addHandler(retries)
    try:
        with pytest.raises(StoreError) as info:
            fn()
    finally:
        logger.removeHandler(retries)
    # A transient one is retried, until $RESUMABLE_RETRY_DEADLINE (set short by the test).
    assert bool(retries.messages) == transient, retries.messages
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def test_missing_bucket_fails_fast(s3_server: S3Server, s3_env: Callable[..., Any]) -> None:
    s3_env(s3_server)
    url = "s3://no-such-bucket-resumable/runs"
    store = open_store(url)
    message = _assert_fast_one_line_error(
        lambda: store.put("run/ckpt-1", [b"x"]), url, "run/ckpt-1", "NoSuchBucket", "aws s3 mb"
    )
    assert "no-such-bucket-resumable" in message
    _assert_fast_one_line_error(lambda: store.get("run/ckpt-1"), "NoSuchBucket")
    _assert_fast_one_line_error(lambda: store.list("run/"), "NoSuchBucket")


@pytest.mark.parametrize(("variable", "value", "code"), BAD_CREDENTIALS)
def test_bad_credentials_fail_fast(
    rclone_server: S3Server,
    s3_env: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    code: str,
) -> None:
    # moto does not check signatures, so only rclone can reject credentials.
    url = rclone_server.new_store_url()
    s3_env(rclone_server)
    monkeypatch.setenv(variable, value)
    store = open_store(url)
    bucket = url.split("/")[2]
    _assert_fast_one_line_error(lambda: store.get("run/ckpt-1"), bucket, code, variable)


def test_unreachable_endpoint_gives_up_after_deadline(
    s3_env: Callable[..., Any], moto_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_env(moto_server, endpoint="http://127.0.0.1:9")  # discard port: connection refused
    # (long enough that a stalled first attempt still leaves time for a retry, which the
    # check below expects: a refused connection fails at once, so this costs the deadline)
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "3")
    store = open_store("s3://bucket/runs")
    _assert_fast_one_line_error(
        lambda: store.get("k"), "s3://bucket/runs", "RESUMABLE_RETRY_DEADLINE", "attempts",
        transient=True,
    )


def test_url_options() -> None:
    store = S3Store.from_url(
        "s3://bucket/deep/prefix/?endpoint_url=http://127.0.0.1:1&addressing_style=path"
        "&sse=aws:kms&sse_kms_key_id=k1&storage_class=STANDARD_IA&part_size=6291456"
    )
    assert store.bucket == "bucket" and store.root == "deep/prefix/"
    assert store.part_size == 6 * MiB
    assert store._extra == {
        "ServerSideEncryption": "aws:kms",
        "SSEKMSKeyId": "k1",
        "StorageClass": "STANDARD_IA",
    }
    for bad in (
        "s3://bucket/p?colour=blue",
        "s3://bucket/p?part_size=big",
        "s3://bucket/p?part_size=1024",
        "s3://bucket/p?sse=rot13",
        "s3://bucket/p?addressing_style=sideways",
    ):
        with pytest.raises(ConfigurationError):
            S3Store.from_url(bad)


def test_error_classification() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    def client_error(code: str, status: int) -> ClientError:
        return ClientError(
            {
                "Error": {"Code": code, "Message": "m"},
                "ResponseMetadata": {"HTTPStatusCode": status},
            },
            "PutObject",
        )

    for code, status in [("SlowDown", 503), ("InternalError", 500), ("RequestTimeout", 400)]:
        assert is_transient(client_error(code, status))
    assert is_transient(client_error("Whatever", 502))
    assert is_transient(EndpointConnectionError(endpoint_url="http://x"))
    assert is_transient(ConnectionResetError())
    for code, status in [("AccessDenied", 403), ("NoSuchBucket", 404), ("InvalidArgument", 400)]:
        assert not is_transient(client_error(code, status))


def test_retry_deadline_env_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    from resumable._retry import retrying

    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "soon")
    with pytest.raises(ConfigurationError, match="RESUMABLE_RETRY_DEADLINE"):
        retrying("get", "s3://b/p", "k", lambda: None)
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "5")
    assert retrying("get", "s3://b/p", "k", lambda: 42) == 42
    assert os.environ["RESUMABLE_RETRY_DEADLINE"] == "5"


def test_checksums_can_be_turned_off(s3_store_url: str) -> None:
    store = S3Store.from_url(
        s3_store_url + "?checksums=off&part_size=5242880&multipart_threshold=5242880"
    )
    assert store.checksums is False
    payload = _payload([5 * MiB, 3], seed=12)
    store.put("run/big", payload)
    assert bytes(store.get("run/big") or b"") == _joined(payload)


_NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


def _listing_page(keys: list[str], *, encoded: bool = False, truncated: bool = False,
                  token: str | None = None) -> bytes:
    items = "".join(f"<Contents><Key>{k}</Key><LastModified>2026-01-01T00:00:00.000Z"
                    f"</LastModified><Size>3</Size></Contents>" for k in keys)
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult {_NS}><Name>b</Name>'
            f'<Prefix>r/</Prefix>{"<EncodingType>url</EncodingType>" if encoded else ""}'
            f'<KeyCount>{len(keys)}</KeyCount><MaxKeys>1000</MaxKeys>'
            f'<IsTruncated>{"true" if truncated else "false"}</IsTruncated>'
            + (f"<NextContinuationToken>{token}</NextContinuationToken>" if token else "")
            + f"{items}</ListBucketResult>").encode()


@pytest.fixture
def crafted_listings(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A loopback HTTP endpoint answering every GET with the next of ``pages``: listings
    no conforming server sends (moto, rclone and the fault proxy cannot make them)."""
    import http.server
    import threading

    pages: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = pages.pop(0) if len(pages) > 1 else pages[0]
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for name, value in {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                        "AWS_DEFAULT_REGION": "us-east-1", "RESUMABLE_RETRY_DEADLINE": "1",
                        "AWS_CONFIG_FILE": "/nonexistent",
                        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.server_port}"}.items():
        monkeypatch.setenv(name, value)
    yield pages
    server.shutdown()
    thread.join()


def test_a_truncated_listing_page_without_a_token_is_an_error(crafted_listings: Any) -> None:
    """IsTruncated=true without NextContinuationToken: the listing cannot go on, and
    stopping there returned the first page as if it were all (a resume would miss the
    newest checkpoints). A well-formed second page is followed."""
    crafted_listings[:] = [_listing_page(["r/a"], truncated=True, token="t1"),
                           _listing_page(["r/b"])]
    assert open_store("s3://bucket/").list("r/") == ["r/a", "r/b"]
    crafted_listings[:] = [_listing_page(["r/a"], truncated=True), _listing_page(["r/b"])]
    with pytest.raises(StoreError, match=r"s3://bucket.*truncated page without a Next"):
        open_store("s3://bucket/").list("r/")


def test_keys_the_server_url_encoded_are_decoded_once(crafted_listings: Any) -> None:
    """A server that honours EncodingType=url (AWS): keys come back decoded, once."""
    crafted_listings[:] = [_listing_page(["r/a+b", "r/a%2Bb", "r/%C3%BC", "r/x%26y%3Cz%3E"],
                                         encoded=True)]
    assert open_store("s3://bucket/").list("r/") == sorted(["r/a b", "r/a+b", "r/ü", "r/x&y<z>"])


@pytest.mark.parametrize("kind", ["drop", "drop_mid", "internal"])
def test_parts_sent_from_the_snapshot_are_resent_intact_after_a_fault(
    moto_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    """An encoded payload carries per-block CRC32Cs, so its parts that lie in one frame go
    up as memoryviews of the snapshot (no copy). A part that fails (connection dropped
    before or after the server read it, a 500) is sent again whole: the object is
    bit-exact and S3 accepted each part against its CRC32C."""
    from resumable import _format

    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "30")
    url = moto_server.new_store_url()
    # part 2 fails on its first try only
    proxy = fault_proxy(moto_server, rate=1.0, kinds=[kind], match=b"partNumber=2", limit=1)
    s3_env(moto_server, endpoint=proxy.endpoint)
    frames = [b"pickle stream", bytearray(random.Random(3).randbytes(16 * MiB + 7))]
    payload = _format.encode(frames, kind="ckpt", serializer="pickle", step=1, created=0.0)
    assert payload.crc32c_blocks
    store = S3Store.from_url(url + "?part_size=5242880&multipart_threshold=5242880")
    parts, crcs = store._plan_parts(payload, sum(memoryview(b).nbytes for b in payload))
    assert crcs is not None and len(parts[1]) == 1  # part 2: a view of the big frame
    store.put("run/ckpt-big", payload)
    assert store.checksums  # the server took the CRC32Cs: the views were sent as they are
    assert proxy.faults[kind] >= 1
    assert bytes(store.get("run/ckpt-big") or b"") == _joined(payload)


def test_a_listing_entry_without_a_key_is_an_error(crafted_listings: Any) -> None:
    """A page the store cannot read as a listing is retried and then a StoreError
    naming the store, not handed to botocore (which left URL-encoded keys encoded, and
    the store then failed with a bare KeyError on the entry)."""
    page = _listing_page(["r/a"]).replace(b"<Key>r/a</Key>", b"")
    crafted_listings[:] = [page]
    with pytest.raises(StoreError, match=r"s3://bucket"):
        open_store("s3://bucket/").list("r/")


@pytest.mark.parametrize("kind", ["drop", "drop_mid", "internal"])
def test_a_payload_goes_out_in_mib_slices_and_is_resent_intact_after_a_fault(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    """A checkpoint below the multipart threshold goes up in one PutObject whose body is
    the payload's frames as they lie: the 16 MiB frame in 16 ``sendall`` calls of a MiB
    (each releases the GIL for all of it), not joined first and not read out 128 KiB at
    a time (botocore turns a bytes body into a BytesIO that urllib3 sends in 128 KiB
    blocks, each taking the GIL back from the training loop), and not in one call either
    (see the slow-link test). A PUT that fails is sent again from the start, and the
    object is bit-exact."""
    import socket
    import threading

    from resumable import _format

    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "30")
    url = s3_server.new_store_url()
    # the PUT fails on its first try only
    proxy = fault_proxy(s3_server, rate=1.0, kinds=[kind], match=b"ckpt-one", limit=1)
    s3_env(s3_server, endpoint=proxy.endpoint)
    big = 16 * MiB + 7
    frames = [b"pickle stream", bytearray(random.Random(5).randbytes(big))]
    payload = _format.encode(frames, kind="ckpt", serializer="pickle", step=1, created=0.0)
    assert isinstance(payload.crc32c, int)
    store = S3Store.from_url(url)
    assert sum(memoryview(b).nbytes for b in payload) < store.multipart_threshold
    sent: list[int] = []  # sizes of this thread's sendall calls (not the proxy's)
    real_sendall = socket.socket.sendall
    me = threading.get_ident()

    def counting_sendall(sock: socket.socket, data: Any, *args: Any) -> None:
        if threading.get_ident() == me:
            sent.append(memoryview(data).nbytes)
        real_sendall(sock, data, *args)

    monkeypatch.setattr(socket.socket, "sendall", counting_sendall)
    store.put("run/ckpt-one", payload)
    monkeypatch.undo()
    assert proxy.faults[kind] == 1
    assert store.checksums  # the server took the CRC32C: the frames went out as they are
    # Once or twice: a 500 or a dropped connection before "100 Continue" stops the first
    # try before its body; a connection cut mid-response comes after it.
    # Only whole MiB slices of the frame and small pieces (head, header, padding, the
    # frame's last 7 bytes): no join, no 128 KiB blocks.
    assert all(n == _SEND_BLOCK or n < 4096 for n in sent), sorted(set(sent))[-5:]
    assert sent.count(_SEND_BLOCK) in (big // _SEND_BLOCK, 2 * (big // _SEND_BLOCK)), sent
    assert bytes(store.get("run/ckpt-one") or b"") == _joined(payload)


@pytest.mark.parametrize("layout", ["single", "multipart"])
def test_a_large_frame_crosses_a_slow_link(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
) -> None:
    """A slow uplink that the old 128 KiB blocks crossed must not fail a save for good.

    urllib3 sends a request body under the socket's *connect* timeout, and a socket's
    ``sendall`` (an SSL write on https) must finish as a whole within the timeout. A
    16 MiB frame handed to one ``sendall`` needs 16 MiB per ``connect_timeout``: through
    a 4 MiB/s link with ``connect_timeout=1`` it timed out on every attempt, until the
    retry deadline. The body hands out a MiB at a time, which crosses in a quarter of
    it. Both a single PutObject and parts of one frame (16 MiB parts)."""
    from resumable import _format

    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "5")
    url = s3_server.new_store_url() + "?connect_timeout=1"
    big = 16 * MiB if layout == "single" else 32 * MiB
    if layout == "multipart":
        url += f"&multipart_threshold={20 * MiB}&part_size={16 * MiB}&max_workers=2"
    frames = [b"pickle stream", bytearray(random.Random(9).randbytes(big))]
    payload = _format.encode(frames, kind="ckpt", serializer="pickle", step=1, created=0.0)
    with SlowLink(s3_server.endpoint, rate=4 * MiB) as link:
        s3_env(s3_server, endpoint=link.endpoint)
        store = S3Store.from_url(url)
        size = sum(memoryview(b).nbytes for b in payload)
        assert (size < store.multipart_threshold) == (layout == "single")
        store.put("run/ckpt-far", payload)
    assert store.checksums
    s3_env(s3_server)
    assert bytes(S3Store.from_url(url).get("run/ckpt-far") or b"") == _joined(payload)


@pytest.mark.parametrize("answer", ["400", "501"])
def test_a_server_that_rejects_checksums_still_gets_every_save(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    answer: str,
) -> None:
    """Some S3-compatible services refuse S3's flexible checksums: OVH answers a
    PutObject carrying ``x-amz-checksum-crc32c`` with 400 InvalidArgument, others with
    501 NotImplemented. A run on one must still save, claim and finish: its single
    PutObjects (attempt records, small checkpoints, the result) and its multipart
    uploads go out without the checksum headers, after one warning, and everything
    reads back verified (the format's own CRC32C)."""
    from resumable import checkpointed

    monkeypatch.setenv("RESUMABLE_SYNC", "1")  # every yield saved: two of each kind
    url = s3_server.new_store_url() + f"?multipart_threshold={5 * MiB}&part_size={5 * MiB}"
    proxy = fault_proxy(s3_server, rate=0.0, reject_checksums=answer)
    s3_env(s3_server, endpoint=proxy.endpoint)
    big = random.Random(3).randbytes(6 * MiB)

    def body(state: Any = None) -> Any:
        state = state or {"n": 0, "blob": b""}
        while state["n"] < 4:
            # Steps 2 and 4 go up in parts, 1 and 3 in one PutObject.
            state = {"n": state["n"] + 1, "blob": big if state["n"] % 2 else b"small"}
            yield state
        return state["n"]

    with caplog.at_level(logging.WARNING, logger="resumable"):
        result = checkpointed(every="generation", store=url, run_id="picky", keep=None)(body)()
    assert result == 4
    assert proxy.rejected >= 1  # the first request with a checksum header was refused
    warned = [r for r in caplog.records if "rejects S3 checksums" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    # Straight to the server: every object is there and verifies.
    s3_env(s3_server)
    store = S3Store.from_url(url)
    names = [k.rsplit("/", 1)[1] for k in store.list("picky/")]
    assert sum(n.startswith("ckpt") for n in names) == 4, names
    again = checkpointed(every="generation", store=url, run_id="picky", keep=None)(body)()
    assert again == 4  # read back from the stored, verified result


class _RefusesPartChecksums(FaultProxy):
    """A server that takes CreateMultipartUpload's checksum algorithm (or ignores it)
    but refuses the checksum header of each UploadPart."""

    def _rejects(self, client: Any, head: bytes, early: bytearray) -> bool:
        if b"partNumber=" not in head.split(b"\r\n", 1)[0]:
            return False
        return super()._rejects(client, head, early)


@pytest.mark.parametrize("answer", ["400", "501"])
def test_a_server_that_rejects_only_part_checksums_still_gets_multipart_saves(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
    answer: str,
) -> None:
    """The refusal may come at UploadPart, after CreateMultipartUpload went through with
    its ChecksumAlgorithm: the parts then go again without checksum headers (one
    warning), as a refused single PutObject does, instead of every large save failing."""
    url = s3_server.new_store_url() + f"?multipart_threshold={5 * MiB}&part_size={5 * MiB}"
    proxy = _RefusesPartChecksums(s3_server.endpoint, rate=0.0, reject_checksums=answer).start()
    try:
        s3_env(s3_server, endpoint=proxy.endpoint)
        store = S3Store.from_url(url)
        data = random.Random(5).randbytes(11 * MiB)  # three parts
        with caplog.at_level(logging.WARNING, logger="resumable"):
            store.put("run/ckpt-big", [data])
            store.put("run/ckpt-big2", [data])
        assert proxy.rejected >= 1
        warned = [r for r in caplog.records if "rejects S3 checksums" in r.getMessage()]
        assert len(warned) == 1, [r.getMessage() for r in caplog.records]
        s3_env(s3_server)
        direct = S3Store.from_url(url)
        assert bytes(direct.get("run/ckpt-big") or b"") == data
        assert bytes(direct.get("run/ckpt-big2") or b"") == data
    finally:
        proxy.stop()


def test_a_501_about_another_header_keeps_checksums_on(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """501 NotImplemented ("a header you provided implies functionality that is not
    implemented") may be about any header: here ``sse=aws:kms`` on a server without KMS.
    The put fails with that error, naming it; checksums stay on and nothing says the
    server rejects them (before: checksums were turned off for good, with that warning)."""
    from resumable import _format

    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "2")
    proxy = fault_proxy(s3_server, rate=0.0, reject_sse="501")
    s3_env(s3_server, endpoint=proxy.endpoint)
    store = S3Store.from_url(s3_server.new_store_url() + "?sse=aws:kms")
    payload = _format.encode([b"pickle stream", b"x" * 1000], kind="ckpt",
                             serializer="pickle", step=1, created=0.0)
    with caplog.at_level(logging.WARNING, logger="resumable"), \
            pytest.raises(StoreError, match="NotImplemented"):
        store.put("run/ckpt-kms", payload)
    assert store.checksums
    assert not [r for r in caplog.records if "rejects S3 checksums" in r.getMessage()]


def test_after_a_checksum_refusal_uploads_are_signed(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
) -> None:
    """With S3 checksums the payload goes unsigned (the signed checksum header covers
    it). Once the server has refused checksums, uploads go out as with checksums=off:
    on an http endpoint the payload is signed (x-amz-content-sha256 is its SHA-256), so
    a body damaged in transit is still refused by the server, not stored."""
    import hashlib

    from resumable import _format

    proxy = fault_proxy(s3_server, rate=0.0, reject_checksums="400")
    s3_env(s3_server, endpoint=proxy.endpoint)
    store = S3Store.from_url(s3_server.new_store_url())
    for step in (1, 2):
        payload = _format.encode([b"pickle stream", bytes([step]) * 5000], kind="ckpt",
                                 serializer="pickle", step=step, created=0.0)
        store.put(f"run/ckpt-{step}", payload)
        puts = [h for h in proxy.heads if h.startswith(b"PUT ") and
                f"ckpt-{step} ".encode() in h.split(b"\r\n", 1)[0]]
        assert len(puts) == 1, puts
        sha = hashlib.sha256(_joined(payload)).hexdigest()
        assert f"x-amz-content-sha256: {sha}".encode() in puts[0].lower(), puts[0]
    assert proxy.rejected == 1 and not store.checksums
