"""f.reset() and `resumable rm` delete the run's own objects only: not those of a run in a
store nested in its folder, of an islands experiment of the same name, or someone else's
file (review 37: reset listed the run's folder recursively and deleted them all, and the
temp-file cleanup walked the folders below, cutting another run's write under way)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from resumable import checkpointed
from resumable._run import object_kind
from resumable.islands import Archipelago
from resumable.stores import open_store
from resumable.stores._local import TMP_PREFIX

ROOT = Path(__file__).resolve().parents[1]


def _gen(n: int, *, state: Any = None) -> Any:
    state = state or {"g": 0}
    while state["g"] < n:
        state["g"] += 1
        yield state
    return state["g"] * 10


def _keys(url: str) -> set[str]:
    return set(open_store(url).list(""))


def test_reset_deletes_only_the_runs_own_objects(any_store_url: str) -> None:
    outer = checkpointed(store=any_store_url, run_id="exp")(_gen)
    inner = checkpointed(store=any_store_url + "/exp", run_id="island-0")(_gen)
    assert outer(2) == 20 and inner(3) == 30
    Archipelago(any_store_url, "exp", islands=2, every=1).publish(0, 1, [1.0])
    store = open_store(any_store_url)
    store.put("exp/notes.txt", [b"the user's own"])
    before = _keys(any_store_url)
    own = {k for k in before if k.startswith("exp/") and k.count("/") == 1
           and object_kind(k[len("exp/"):])}
    assert {"exp/result", "exp/identity"} <= own
    assert any(k.startswith("exp/island-0/") for k in before)  # the nested run's
    assert "exp/plan" in before and "exp/notes.txt" in before  # the experiment's, the user's

    outer.reset(2)

    assert _keys(any_store_url) == before - own
    assert inner(3) == 30  # its stored result, still there
    assert outer(2) == 20  # started afresh


def test_temp_files_of_a_run_below_are_not_removed(tmp_path: Path) -> None:
    store = tmp_path / "s"
    outer = checkpointed(store=str(store), run_id="exp")(_gen)
    inner = checkpointed(store=str(store / "exp"), run_id="island-0")(_gen)
    outer(2)
    inner(2)
    inflight = store / "exp" / "island-0" / f"{TMP_PREFIX}ckpt-00000001-000000000003-{'1' * 32}"
    own = store / "exp" / f"{TMP_PREFIX}ckpt-00000001-000000000003-{'2' * 32}"
    for path in (inflight, own):
        path.write_bytes(b"x")
    outer.reset(2)
    assert inflight.exists() and not own.exists()
    outer(2)
    own.write_bytes(b"x")
    done = subprocess.run([sys.executable, "-m", "resumable", "rm", str(store), "exp", "--yes"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert inflight.exists() and not own.exists()
    assert (store / "exp" / "island-0").is_dir()


def test_on_s3_a_nested_runs_upload_under_way_is_not_aborted(
        moto_server: Any, s3_env: Any) -> None:
    """The multipart-upload cleanup (after a claim, f.reset, `resumable rm`) matched every
    upload under '<run_id>/', so it aborted the save under way of a run in a store nested
    in the run's folder, as the local store's walk cut its temp files (review 38)."""
    s3_env(moto_server)
    url = moto_server.new_store_url()
    outer = checkpointed(store=url, run_id="exp")(_gen)
    checkpointed(store=url + "/exp", run_id="island-0")(_gen)(2)
    outer(2)
    store = open_store(url)
    client = moto_server.client()
    bucket, root = url[len("s3://"):].split("/", 1)
    nested = f"{root}/exp/island-0/ckpt-00000002-000000000003"
    own = f"{root}/exp/ckpt-00000002-000000000003"
    for key in (nested, own):
        client.create_multipart_upload(Bucket=bucket, Key=key)
    outer.reset(2)
    left = {u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])}
    assert left == {nested}, left
    assert store.list("exp/island-0/")  # (its objects too)


def test_rm_keeps_someone_elses_file_as_reset_does(tmp_path: Path) -> None:
    """f.reset keeps a file resumable never writes (1f659b9); `rm` and `rm --completed`
    deleted it, counted among the run's objects (review 38). Both keep it, and say so."""
    store = tmp_path / "s"
    f = checkpointed(store=str(store), run_id="exp")(_gen)
    for command in (["rm", str(store), "exp", "--yes"], ["rm", "--completed", str(store),
                                                         "--yes"]):
        f(2)
        (store / "exp" / "model.pt").write_bytes(b"weights")
        done = subprocess.run([sys.executable, "-m", "resumable", *command],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "keeping 1 file(s) resumable never writes: model.pt" in done.stdout
        assert sorted(p.name for p in (store / "exp").iterdir()) == ["model.pt"]
