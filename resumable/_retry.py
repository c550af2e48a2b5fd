"""Retries around single store operations (tenacity, private jitter, bounded total time).

Only transient failures are retried: throttling, 5xx, timeouts, dropped connections.
Permanent ones (access denied, missing bucket, bad credentials, any other 4xx) become
a ``StoreError`` at once, with a one-line message naming the store URL, the key, the
S3 error code and what to do about it.

The jitter comes from a private ``random.Random``: ``capture_rng`` saves and restores
the global ``random`` state with every checkpoint, so drawing from it here would make
a run through a flaky network diverge from an uninterrupted one. For the same reason
botocore's own retries must be off (its jitter draws from the global generator).
"""

from __future__ import annotations

import http.client
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import parse_qsl, urlsplit

import tenacity

from . import _settings, _signals
from ._errors import EXIT_CONFIG, ConfigurationError, StoreError

log = logging.getLogger("resumable")

T = TypeVar("T")

DEFAULT_DEADLINE = _settings.RETRY_DEADLINE.default  # seconds of retrying, then StoreError
BACKOFF_START = 0.05
BACKOFF_CAP = 2.0
DEADLINE_ENV = _settings.RETRY_DEADLINE.name

# Seeded from os.urandom; never touches the global generator's state.
_jitter_rng = random.Random()

TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "ProvisionedThroughputExceededException",
        "EC2ThrottledException",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "IDPCommunicationError",
        # A concurrent conditional write raced ours; AWS documents retrying it, and the
        # retry then either succeeds or gets a definite 412.
        "ConditionalRequestConflict",
        "OperationAborted",
    }
)
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})

_HINTS = {
    "NoSuchBucket": "bucket {bucket!r} does not exist: create it (`aws s3 mb s3://{bucket}`) "
    "or fix the bucket name in the store URL",
    "AccessDenied": "the credentials may not use bucket {bucket!r}: check AWS_PROFILE / "
    "AWS_ACCESS_KEY_ID and that the policy allows s3:GetObject, s3:PutObject, "
    "s3:ListBucket and s3:DeleteObject on it",
    "AllAccessDisabled": "all access to bucket {bucket!r} is disabled; use another bucket",
    "InvalidAccessKeyId": "the access key is unknown to this endpoint: check "
    "AWS_ACCESS_KEY_ID / AWS_PROFILE and {endpoint_setting}",
    "SignatureDoesNotMatch": "the secret key does not match the access key: check "
    "AWS_SECRET_ACCESS_KEY (and the region, AWS_DEFAULT_REGION)",
    "ExpiredToken": "the session token has expired: refresh the credentials (AWS_SESSION_TOKEN, "
    "the profile's SSO login, or the pod's service account)",
    "InvalidToken": "the session token is malformed: check AWS_SESSION_TOKEN",
    "AuthorizationHeaderMalformed": "the region does not match bucket {bucket!r}: set "
    "AWS_DEFAULT_REGION to the bucket's region",
    "PermanentRedirect": "bucket {bucket!r} lives in another region or needs another endpoint: "
    "set AWS_DEFAULT_REGION / {endpoint_setting}",
    "InvalidBucketName": "{bucket!r} is not a valid bucket name; fix the store URL",
    "EntityTooLarge": "the object is larger than the server accepts in one request",
    "KMS.NotFoundException": "the SSE-KMS key does not exist: fix sse_kms_key_id",
    "KMSAccessDenied": "the credentials may not use the SSE-KMS key: fix the key policy",
}
_DEFAULT_HINT = "see the S3 error code; check the store URL, credentials and endpoint"
_STATUS_HINTS = {
    403: _HINTS["AccessDenied"],
    404: _HINTS["NoSuchBucket"],
    301: _HINTS["PermanentRedirect"],
    400: "the server rejected the request; check the endpoint, region and store options",
}


class StoreConfigurationError(StoreError, ConfigurationError):
    """A store operation that cannot succeed until the configuration changes (exit 78):
    an invalid bucket name, TLS spoken to a plain-HTTP endpoint, an untrusted certificate.
    Never retried. Both a ``StoreError`` (storage failed for good) and a
    ``ConfigurationError`` (what to fix is a setting)."""

    exit_code = EXIT_CONFIG


# TLS failures that no retry heals: the endpoint speaks plain HTTP (or another
# protocol), or its certificate is not trusted here.
_TLS_PERMANENT = ("WRONG_VERSION_NUMBER", "CERTIFICATE_VERIFY_FAILED", "UNKNOWN_PROTOCOL",
                  "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST")


def _tls_problem(exc: BaseException) -> str | None:
    """The OpenSSL reason when ``exc`` is a TLS failure that retrying cannot fix."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        for reason in _TLS_PERMANENT:
            if reason in text:
                return reason
        current = current.__cause__ or current.__context__
    return None


def _endpoint_of(exc: BaseException) -> str | None:
    """scheme://host:port of the request that failed, when botocore says."""
    url = (getattr(exc, "kwargs", None) or {}).get("endpoint_url")
    if not isinstance(url, str):
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else None


def _botocore() -> tuple[tuple[type[BaseException], ...], type[BaseException] | None]:
    """(transient connection errors, ClientError) if botocore is importable."""
    try:
        import botocore.exceptions as be
        from urllib3.exceptions import ProtocolError
    except ImportError:  # the local store works without boto3 installed
        return (), None
    transient: tuple[type[BaseException], ...] = (
        be.EndpointConnectionError,
        be.ConnectionClosedError,
        be.ReadTimeoutError,
        be.ConnectTimeoutError,
        be.ConnectionError,
        be.IncompleteReadError,
        be.ResponseStreamingError,
        ProtocolError,
    )
    return transient, be.ClientError


_BOTO_TRANSIENT, _CLIENT_ERROR = _botocore()
_OS_TRANSIENT: tuple[type[BaseException], ...] = (
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
    http.client.IncompleteRead,
    http.client.RemoteDisconnected,
    socket.timeout,
)


def error_code(exc: BaseException) -> tuple[str | None, int | None]:
    """The S3 error code and HTTP status of a botocore ClientError, else (None, None)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None, None
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return (str(code) if code is not None else None), (
        int(status) if isinstance(status, int) else None
    )


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: throttling, 5xx, timeouts, dropped connections."""
    if _CLIENT_ERROR is not None and isinstance(exc, _CLIENT_ERROR):
        code, status = error_code(exc)
        return code in TRANSIENT_CODES or status in TRANSIENT_STATUS
    if _tls_problem(exc) is not None:
        return False
    return isinstance(exc, _BOTO_TRANSIENT + _OS_TRANSIENT)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # botocore's order


def endpoint_setting(url: str) -> str:
    """Where the S3 endpoint in use is set, for a message that says what to check: the
    store URL's ``endpoint_url=``, else the first of AWS_ENDPOINT_URL_S3 and
    AWS_ENDPOINT_URL that is set and not empty, as botocore picks them. Messages said
    "check AWS_ENDPOINT_URL" when AWS_ENDPOINT_URL_S3 was the one set (user pass)."""
    if any(name == "endpoint_url" for name, _ in parse_qsl(urlsplit(url).query)):
        return "endpoint_url= in the store URL"
    variables = " or ".join(ENDPOINT_VARIABLES)
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return (f"endpoint_url= in the store URL ({variables} and the profile's endpoint_url "
                "are ignored: AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true)")
    for name in ENDPOINT_VARIABLES:
        if os.environ.get(name):
            return name
    # (botocore also reads endpoint_url from the AWS profile: review 55)
    return f"{variables} (neither is set), or endpoint_url in the AWS profile's config"


def _where(op: str, url: str, key: str | None) -> str:
    """``get s3://b/p key 'run/result'``; no key part for an operation without one."""
    return f"{op} {url}" + (f" key {key!r}" if key is not None else "")


def _bucket(url: str) -> str | None:
    parts = urlsplit(url)
    return parts.netloc or None if parts.scheme == "s3" else None


def describe_permanent(op: str, url: str, key: str | None, exc: BaseException) -> StoreError:
    """A one-line StoreError naming the URL, key, error code and a fix."""
    where = _where(op, url, key)
    bucket = _bucket(url) or url
    code, status = error_code(exc)
    if code is not None or status is not None:
        template = _HINTS.get(code or "") or _STATUS_HINTS.get(status or 0, _DEFAULT_HINT)
        if code in (None, "", str(status)) and status == 404:
            code = "NotFound"  # HEAD responses carry no error body
        message = _one_line(getattr(exc, "response", {}).get("Error", {}).get("Message", ""))
        detail = f"S3 {code} (HTTP {status})" + (f": {message}" if message else "")
        hint = template.format(bucket=bucket, endpoint_setting=endpoint_setting(url))
        return StoreError(f"{where} failed: {detail}; {hint}", url=url, key=key)
    name = type(exc).__name__
    tls = _tls_problem(exc)
    if tls is not None:
        endpoint = _endpoint_of(exc) or "the endpoint"
        if tls in ("CERTIFICATE_VERIFY_FAILED",):
            fix = (f"{endpoint}'s TLS certificate is not trusted here: set AWS_CA_BUNDLE to "
                   "its CA certificate")
        else:
            plain = endpoint.replace("https://", "http://", 1)
            fix = (f"{endpoint} does not speak TLS (SSL {tls}): if the server is plain HTTP, "
                   f"use {plain} in {endpoint_setting(url)}")
        return StoreConfigurationError(f"{where} failed: {fix}", url=url, key=key)
    if name == "ParamValidationError":
        return StoreConfigurationError(
            f"{where} failed: botocore rejects the request's parameters "
            f"({_one_line(exc).split(':', 1)[-1].strip()[:160]}); check the store URL",
            url=url, key=key)
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        hint = (
            "no usable AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, or the pod's IRSA service account"
        )
    elif name == "NoRegionError":
        hint = "no AWS region configured: set AWS_DEFAULT_REGION"
    else:
        hint = f"check the store URL, endpoint ({endpoint_setting(url)}) and credentials"
    return StoreError(f"{where} failed: {name}: {_one_line(exc)}; {hint}", url=url, key=key)


def _is_store_failure(exc: BaseException) -> bool:
    """Errors that mean 'storage failed' (wrapped as StoreError) rather than a bug of ours."""
    if _CLIENT_ERROR is not None and isinstance(exc, _CLIENT_ERROR):
        return True
    module = type(exc).__module__
    return module.startswith(("botocore", "urllib3", "s3transfer")) or isinstance(exc, OSError)


def deadline() -> float:
    """Total seconds an operation may spend retrying ($RESUMABLE_RETRY_DEADLINE, else 60)."""
    return _settings.RETRY_DEADLINE.read()


class _CtrlCHeld(tenacity.stop.stop_base):
    """Stop retrying: a Ctrl-C is held in the main thread (see _signals)."""

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return (_signals.sigint_held()
                and threading.current_thread() is threading.main_thread())


def _backoff(retry_state: tenacity.RetryCallState) -> float:
    # Full jitter (AWS architecture blog): spreads retries of parallel parts apart.
    ceiling = min(BACKOFF_CAP, BACKOFF_START * 2 ** (retry_state.attempt_number - 1))
    return _jitter_rng.uniform(ceiling / 4, ceiling)


def retrying(
    op: str,
    url: str,
    key: str | None,
    fn: Callable[[], T],
    *,
    transient: Callable[[BaseException], bool] = is_transient,
    max_seconds: float | None = None,
) -> T:
    """Call ``fn()``, retrying transient failures; raise StoreError when it fails for good.

    ``fn`` must be safe to call again after a transient failure (every store
    operation is: a repeated PUT writes the same bytes, a repeated DELETE is a no-op).
    Exceptions that are neither transient nor storage failures (bugs, ``StoreError``
    raised by ``fn`` itself) propagate unchanged.
    """
    limit = deadline() if max_seconds is None else max_seconds

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "retrying %s (attempt %d failed after %.1fs, next in %.2fs): %s: %s",
            _where(op, url, key),
            state.attempt_number,
            state.seconds_since_start or 0.0,
            state.upcoming_sleep,
            type(exc).__name__,
            _one_line(exc),
        )

    retryer = tenacity.Retrying(
        # A Ctrl-C held in the main thread (see _signals) ends the retries there: the
        # call fails with this operation's error, and the call raises KeyboardInterrupt.
        stop=tenacity.stop_any(tenacity.stop_before_delay(limit), _CtrlCHeld()),
        wait=_backoff,
        retry=tenacity.retry_if_exception(transient),
        before_sleep=before_sleep,
        reraise=True,
    )
    started = time.monotonic()
    attempts = 0

    def counted() -> T:
        nonlocal attempts
        attempts += 1
        return fn()

    try:
        return retryer(counted)
    except StoreError:
        raise
    except Exception as exc:
        if transient(exc):
            where = _where(op, url, key)
            code, status = error_code(exc)
            what = f"S3 {code} (HTTP {status})" if code else type(exc).__name__
            raise StoreError(
                f"{where} failed after {attempts} attempts in "
                f"{time.monotonic() - started:.1f}s: {what}: {_one_line(exc)}; the endpoint "
                f"is unreachable or overloaded: check {endpoint_setting(url)} and the network, or "
                f"raise {DEADLINE_ENV} (now {limit:g}s)",
                url=url,
                key=key,
            ) from exc
        if _is_store_failure(exc):
            raise describe_permanent(op, url, key, exc) from exc
        raise


__all__ = [
    "DEADLINE_ENV",
    "StoreConfigurationError",
    "deadline",
    "describe_permanent",
    "error_code",
    "is_transient",
    "retrying",
]
