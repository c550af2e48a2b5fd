"""The store URL parser under arbitrary input: a store or a ConfigurationError, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resumable import ConfigurationError
from resumable.stores import normalize_url, open_store

schemes = st.sampled_from(["s3", "file", "memory", "S3", "ftp", "s3:", "file:/", "", "http"])
tails = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)


@given(st.one_of(tails, st.builds(lambda s, t: f"{s}://{t}", schemes, tails)))
def test_any_text_gives_a_url_or_a_configuration_error(text: str) -> None:
    """normalize_url accepts or rejects with ConfigurationError; it never raises otherwise."""
    try:
        url = normalize_url(text)
    except ConfigurationError as err:
        assert str(err)
    else:
        assert "://" in url
        assert not any(ord(c) < 32 for c in url)


@given(st.builds(lambda t: f"memory://{t}", st.from_regex(r"[a-z0-9_-]{1,20}", fullmatch=True)))
def test_memory_urls_open(url: str) -> None:
    """Well-formed memory URLs open a store whose url is the canonical one."""
    assert open_store(url).url == url


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("s3:/bucket", "malformed"),
        ("file://host/x", "absolute path"),
        ("ftp://x/y", "unknown scheme ftp"),
        ("s3://bucket/\x07", "control characters"),
        ("S3://[", "malformed"),  # found by Hypothesis: urlsplit's IPv6 ValueError
        ("~no-such-user-4f1/ckpt", "cannot be used"),  # found by Hypothesis: ~user
    ],
)
def test_malformed_urls_name_the_problem(text: str, fragment: str) -> None:
    """Each malformed URL gets an error that says what is wrong with it."""
    with pytest.raises(ConfigurationError, match=fragment):
        normalize_url(text)


def test_s3_url_without_bucket_is_rejected() -> None:
    """s3:// with no bucket fails with a message showing the expected form."""
    with pytest.raises(ConfigurationError, match="s3://bucket/prefix"):
        open_store("s3://")


def test_plain_paths_become_absolute_file_urls(tmp_path: Path) -> None:
    """A relative path resolves against the working directory."""
    assert normalize_url("ckpt") == (Path.cwd() / "ckpt").as_uri()
    assert normalize_url(str(tmp_path)) == tmp_path.as_uri()


def test_s3_url_without_bucket_fails_at_decoration() -> None:
    """store='s3://' is caught when the function is decorated, not at the first call."""
    from typing import Any

    from resumable import checkpointed

    with pytest.raises(ConfigurationError, match="no bucket"):

        @checkpointed(store="s3://")
        def f(*, state: Any = None) -> Any:
            yield state
