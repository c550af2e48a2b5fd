"""Coverage-guided fuzzing (atheris) of the checkpoint reader and the store URL parser.

    pip install atheris
    python fuzz/fuzz_reader.py -max_total_time=60          # the reader
    python fuzz/fuzz_reader.py --urls -max_total_time=60   # the URL parser

The reader must answer every input with InvalidObject (or a verified object, which
random input never is); the URL parser with a URL or a ConfigurationError. Anything
else is a crash that atheris reports with the input that caused it. Not part of the
test suite: Hypothesis covers the same properties there (tests/test_format.py,
tests/test_urls.py).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from resumable import ConfigurationError
    from resumable._format import InvalidObject, decode, encode
    from resumable.stores import normalize_url

KEY = b"fuzzing-key-0123456789"
SEED = b"".join(
    bytes(p)
    for p in encode([b"rng", b"state", b"\x00" * 64], kind="ckpt", serializer="pickle",
                    step=3, epoch=1, created=0.0, name="run/ckpt-00000001-000000000003")
)
# A version-1 object (frames not padded, CRC32), which the reader still accepts.
SEED_V1 = (Path(__file__).resolve().parent.parent / "tests" / "data" / "v1-store" / "v1-run"
           / "ckpt-00000001-000000000001").read_bytes()


def fuzz_reader(data: bytes) -> None:
    # Most inputs start from a valid object, so mutations get past the magic check.
    seed = {b"\x01": SEED, b"\x02": SEED_V1}.get(data[:1])
    blob = seed[: len(data) % (len(seed) + 1)] + data if seed is not None else data
    for key in (None, KEY):
        with contextlib.suppress(InvalidObject):
            decode(blob, key=key, kind="ckpt", name="run/ckpt-00000001-000000000003")


def fuzz_urls(data: bytes) -> None:
    text = atheris.FuzzedDataProvider(data).ConsumeUnicodeNoSurrogates(200)
    with contextlib.suppress(ConfigurationError):
        normalize_url(text)


if __name__ == "__main__":
    argv = [a for a in sys.argv if a != "--urls"]
    atheris.Setup(argv, fuzz_urls if "--urls" in sys.argv else fuzz_reader)
    atheris.Fuzz()
