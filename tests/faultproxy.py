"""A fault-injecting HTTP proxy on loopback, between boto3 and a real S3 server.

boto3 points its endpoint at the proxy; the proxy relays each request byte for byte
to the upstream server (the Host header and everything SigV4 signs stay unchanged,
so signatures still validate) and fails a fixed share of requests:

- ``slowdown``: 503 SlowDown XML error, request never reaches the server
- ``internal``: 500 InternalError XML error, request never reaches the server
- ``drop``: connection closed without any response, request never reaches the server
- ``drop_mid``: request reaches the server; the response is cut off half-way
  (the ambiguous case: the server did the work but the client cannot know)
- ``slow``: the request is forwarded after ``delay`` seconds
- ``bare_404``: 404 with an empty body (as some gateways send for GETs of missing keys),
  request never reaches the server; not in the default mix, since it makes an existing
  object look missing to a plain client
- ``empty_200`` / ``html_200``: 200 with an empty body / an HTML page (a misbehaving
  gateway), request never reaches the server; not in the default mix either

``match=b"partNumber=2"`` limits faults to requests whose request line contains it;
``limit=1`` to the first one (a request that fails once, then goes through).

``reject_checksums="400"`` (or ``"501"``) plays an S3-compatible server that does not
take S3's flexible checksums: every request carrying an ``x-amz-checksum-*`` or
``x-amz-sdk-checksum-algorithm`` header is answered ``400 InvalidArgument`` (as OVH
answers) or ``501 NotImplemented`` and never reaches the server; the others are relayed
(and faulted as usual). ``rejected`` counts them. ``reject_sse="501"`` answers every
request carrying ``x-amz-server-side-encryption`` with the same ``501 NotImplemented``
(a server without KMS, asked for ``sse=aws:kms``): a 501 that is not about checksums.
``heads`` keeps the head (request line and headers) of every request that was relayed.

The schedule is deterministic per request number (seeded private RNG). One request
per connection (``Connection: close``) keeps request framing trivial.

    with FaultProxy(server.endpoint, rate=0.2, seed=1) as proxy:
        ... boto3 with endpoint_url=proxy.endpoint ...
        assert sum(proxy.faults.values()) > 0
"""

from __future__ import annotations

import collections
import contextlib
import random
import socket
import socketserver
import threading
import time
from collections.abc import Iterator, Sequence
from urllib.parse import urlsplit

KINDS = ("slowdown", "internal", "drop", "drop_mid", "slow")
EXTRA_KINDS = ("bare_404", "empty_200", "html_200")

_ERROR_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
    "<Message>{message}</Message><RequestId>faultproxy</RequestId></Error>"
)


def _error_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = _ERROR_BODY.format(code=code, message=message).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _read_head(sock: socket.socket, buffer: bytearray) -> bytes | None:
    """Read up to the end of an HTTP head; ``buffer`` keeps bytes read past it."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:end])
    del buffer[:end]
    return head


def _headers(head: bytes) -> dict[str, str]:
    out = {}
    for line in head.split(b"\r\n")[1:]:
        if b":" in line:
            name, value = line.split(b":", 1)
            out[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return out


def _with_connection_close(head: bytes) -> bytes:
    lines = [
        line
        for line in head[:-4].split(b"\r\n")
        if not line.lower().startswith((b"connection:", b"keep-alive:"))
    ]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n"


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.2,
        kinds: Sequence[str] = KINDS,
        seed: int = 0,
        delay: float = 0.3,
        port: int = 0,
        match: bytes | None = None,
        limit: int | None = None,
        reject_checksums: str | None = None,
        reject_sse: str | None = None,
    ) -> None:
        unknown = set(kinds) - set(KINDS) - set(EXTRA_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; use {KINDS}")
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rate = rate
        self.kinds = tuple(kinds)
        self.delay = delay
        self.match = match  # only requests whose request line contains this get faults
        self.limit = limit  # at most this many faults in all, then everything is relayed
        if reject_checksums not in (None, "400", "501"):
            raise ValueError(f"reject_checksums={reject_checksums!r}; use '400' or '501'")
        if reject_sse not in (None, "501"):
            raise ValueError(f"reject_sse={reject_sse!r}; use '501'")
        self.reject_checksums = reject_checksums
        self.reject_sse = reject_sse
        self.rejected = 0
        self.heads: list[bytes] = []
        self.enabled = True
        self.requests = 0
        self.faults: collections.Counter[str] = collections.Counter()
        self._rng = random.Random(seed)  # private: the tests check global random is untouched
        self._lock = threading.Lock()
        self._port = port
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None
        self.endpoint = ""

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 128

        self._server = Server(("127.0.0.1", self._port), Handler)
        port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Relay without faults inside the block (set-up and inspection)."""
        was, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = was

    @property
    def fault_count(self) -> int:
        return sum(self.faults.values())

    # -- per connection --------------------------------------------------------------

    def _decide(self, request_line: bytes) -> str | None:
        with self._lock:
            self.requests += 1
            # Draw both numbers every time so the schedule depends only on the request
            # number, not on which earlier requests happened to be faulted.
            roll, pick = self._rng.random(), self._rng.randrange(len(self.kinds))
            matched = self.match is None or self.match in request_line
            if not self.enabled or not matched or roll >= self.rate:
                return None
            if self.limit is not None and self.fault_count >= self.limit:
                return None
            kind = self.kinds[pick]
            self.faults[kind] += 1
            return kind

    def _handle(self, client: socket.socket) -> None:
        client.settimeout(60)
        buffer = bytearray()
        try:
            head = _read_head(client, buffer)
            if head is None:
                return
            if (self.reject_checksums or self.reject_sse) and self._rejects(client, head,
                                                                             buffer):
                return
            fault = self._decide(head.split(b"\r\n", 1)[0])
            if fault == "slowdown":
                client.sendall(
                    _error_response(
                        503, "Slow Down", "SlowDown", "Please reduce your request rate."
                    )
                )
                return
            if fault == "internal":
                client.sendall(
                    _error_response(
                        500, "Internal Server Error", "InternalError", "We encountered an error."
                    )
                )
                return
            if fault == "drop":
                return
            if fault == "bare_404":
                client.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                               b"Connection: close\r\n\r\n")
                return
            if fault in ("empty_200", "html_200"):
                body = b"" if fault == "empty_200" else b"<html><body>gateway</body></html>"
                client.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                               b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                               % (len(body), body))
                return
            if fault == "slow":
                time.sleep(self.delay)
            self._relay(client, head, buffer, cut=fault == "drop_mid")
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            client.close()

    def _rejects(self, client: socket.socket, head: bytes, early: bytearray) -> bool:
        """Answer a request with checksum headers as a server without them does."""
        headers = _headers(head)
        checksums = self.reject_checksums and any(
            h.startswith("x-amz-checksum-") or h == "x-amz-sdk-checksum-algorithm"
            for h in headers)
        sse = self.reject_sse and "x-amz-server-side-encryption" in headers
        if not (checksums or sse):
            return False
        if headers.get("expect", "").lower() != "100-continue":
            # The body is on its way: take it all, or closing would reset the connection
            # before the client reads the answer.
            remaining = int(headers.get("content-length", "0") or 0) - len(early)
            while remaining > 0:
                chunk = client.recv(min(remaining, 1 << 20))
                if not chunk:
                    break
                remaining -= len(chunk)
        with self._lock:
            self.rejected += 1
        if sse or self.reject_checksums == "501":
            client.sendall(_error_response(
                501, "Not Implemented", "NotImplemented",
                "A header you provided implies functionality that is not implemented"))
        else:
            client.sendall(_error_response(
                400, "Bad Request", "InvalidArgument",
                "x-amz-checksum-crc32c: checksum algorithm not supported"))
        return True

    def _relay(self, client: socket.socket, head: bytes, early: bytearray, *, cut: bool) -> None:
        with self._lock:
            self.heads.append(head)
        length = int(_headers(head).get("content-length", "0") or 0)
        with socket.create_connection(self.upstream, timeout=60) as upstream:
            upstream.sendall(_with_connection_close(head))

            def pump_body() -> None:
                # Concurrent with the response pump: with `Expect: 100-continue` the
                # client sends the body only after the server's interim response.
                remaining = length
                try:
                    if early:
                        upstream.sendall(early[:remaining])
                        remaining -= min(len(early), remaining)
                    while remaining > 0:
                        chunk = client.recv(min(remaining, 1 << 20))
                        if not chunk:
                            break
                        upstream.sendall(chunk)
                        remaining -= len(chunk)
                except OSError:
                    pass

            body_thread = threading.Thread(target=pump_body, daemon=True)
            body_thread.start()
            rest = bytearray()
            while True:
                response_head = _read_head(upstream, rest)
                if response_head is None:
                    return
                status = response_head.split(b" ", 2)[1] if b" " in response_head else b""
                if status == b"100":
                    client.sendall(response_head)
                    continue
                break
            response_length = int(_headers(response_head).get("content-length", "0") or 0)
            if cut and response_length == 0:
                return  # the server acted, the client hears nothing
            client.sendall(_with_connection_close(response_head))
            budget = response_length // 2 if cut else None
            pending = bytes(rest)
            while True:
                if pending:
                    if budget is not None:
                        pending = pending[:budget]
                        budget -= len(pending)
                    client.sendall(pending)
                    if budget is not None and budget <= 0:
                        return
                chunk = upstream.recv(1 << 20)
                if not chunk:
                    break
                pending = chunk
            body_thread.join(timeout=5)


class SlowLink:
    """A TCP relay on loopback whose client-to-server direction carries ``rate`` bytes/s.

    A slow uplink (a pod far from its bucket, a shared NIC): requests reach the server
    at that pace, responses come back at once. It relays bytes, not HTTP, so keep-alive
    connections, ``Expect: 100-continue`` and TLS pass through unchanged. Its receive
    buffer is small, so the client's writes wait on the pace instead of filling loopback
    buffers of many MiB.

        with SlowLink(server.endpoint, rate=4 * MiB) as link:
            ... boto3 with endpoint_url=link.endpoint ...
    """

    def __init__(self, upstream: str, *, rate: int) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rate = rate
        self._sock: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self.endpoint = ""

    def start(self) -> SlowLink:
        sock = socket.socket()
        # Set before listen: accepted sockets inherit it (and lose autotuning).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.bind(("127.0.0.1", 0))
        sock.listen(32)
        self._sock = sock
        self.endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._open.clear()

    def __enter__(self) -> SlowLink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                upstream = socket.create_connection(self.upstream, timeout=60)
            except OSError:
                return
            upstream.settimeout(None)
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, paced: bool) -> None:
        due = 0.0  # when the bytes relayed so far have crossed the link
        try:
            while True:
                chunk = src.recv(64 * 1024)
                if not chunk:
                    break
                dst.sendall(chunk)
                if paced:  # the link's pace, not a wait for anything; no credit when idle
                    due = max(due, time.monotonic()) + len(chunk) / self.rate
                    pause = due - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
