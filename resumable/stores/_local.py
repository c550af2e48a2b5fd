"""A folder on a local or mounted file system. Writes are atomic: temp file, fsync, rename."""

from __future__ import annotations

import builtins
import contextlib
import errno
import logging
import os
import re
import shlex
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .._aligned import aligned_buffer
from .._errors import StoreError, StoreURLError
from . import Listed
from ._base import Payload, Screen

log = logging.getLogger("resumable")
TMP_PREFIX = ".tmp-"
# The temp files this store writes: TMP_PREFIX, the object's name, "-", 32 hex digits. A
# file of the user's that merely starts with ".tmp-" is theirs: listed, and never removed
# as a leftover (review 100: a `.tmp-notes.txt` went at the next claim and at `rm`).
_TEMP_NAME = re.compile(re.escape(TMP_PREFIX) + r".+-[0-9a-f]{32}\Z", re.DOTALL)


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is one of this store's temp files (an unfinished write)."""
    return _TEMP_NAME.match(name) is not None


def _check_folder(root: Path, url: str) -> None:
    """The store's folder, or the nearest of its parents that exists, must be a folder.

    A regular file there would fail every write with NotADirectoryError, and every
    listing would say "no runs"; it is a wrong setting, not a storage fault.
    """
    for path in (root, *root.parents):
        try:
            # One stat: "not a folder" then "exists" in two calls would call a folder
            # another process (an island of the same store) made in between a file.
            mode = os.stat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):  # missing, or below a file
            continue
        except OSError:  # unreadable parent: let the first real access report it
            return
        if stat.S_ISDIR(mode):
            return
        raise StoreURLError(
            f"store {url}: {path} is a file, not a folder; point the store at a "
            "folder (it is created when missing), e.g. RESUMABLE_STORE=./checkpoints"
        )


class LocalStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.url = self.root.as_uri()
        _check_folder(self.root, self.url)

    @classmethod
    def from_url(cls, url: str) -> LocalStore:
        return cls(unquote(urlsplit(url).path))

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def _fail(self, action: str, key: str, err: OSError) -> StoreError:
        hint = {
            errno.ENOSPC: "the disk is full; free space or point RESUMABLE_STORE elsewhere",
            errno.EDQUOT: "the disk quota is exhausted; free space",
            errno.EACCES: "permission denied; check the folder's owner and mode",
            errno.EROFS: "the file system is read-only; mount it writable",
            errno.ENOTDIR: "a part of that path is a file, not a folder: move it away",
            errno.EEXIST: "a part of that path is a file, not a folder: move it away",
            errno.EISDIR: "a folder is where the object should be, not a file: move it away",
            errno.ELOOP: "a symbolic link loop is at that name: remove it",
        }.get(err.errno or 0, "check that the folder exists and is writable")
        return StoreError(
            f"{action} {key!r} in {self.url} failed: {err.strerror or err}; {hint}",
            url=self.url,
            key=key,
        )

    def _write_temp(self, key: str, data: Payload) -> Path:
        path = self._path(key)
        tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{uuid.uuid4().hex}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                for buf in data:
                    f.write(buf)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            _discard(tmp)
            raise self._fail("writing", key, err) from err
        return tmp

    def _sync_dir(self, path: Path) -> None:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # Another process's cleanup of stale temp files (remove_temp_files: a claim, `rm`)
    # may take ours between its write and the rename; the write is then done again.
    _TEMP_RETRIES = 3

    def put(self, key: str, data: Payload) -> None:
        path = self._path(key)
        for attempt in range(self._TEMP_RETRIES):
            tmp = self._write_temp(key, data)
            try:
                os.replace(tmp, path)
                self._sync_dir(path)
                return
            except FileNotFoundError as err:
                if tmp.exists() or not path.parent.is_dir() or attempt + 1 == self._TEMP_RETRIES:
                    raise self._fail("writing", key, err) from err
            except OSError as err:
                _discard(tmp)
                raise self._fail("writing", key, err) from err
        raise AssertionError("unreachable")

    def put_if_absent(self, key: str, data: Payload) -> bool:
        path = self._path(key)
        for attempt in range(self._TEMP_RETRIES):
            tmp = self._write_temp(key, data)
            try:
                os.link(tmp, path)  # atomic create-only: fails if the name exists
                self._sync_dir(path)
                return True
            except FileExistsError as err:
                if path.is_dir():  # a folder of other keys, not an object: this one cannot
                    # be created beside it here (on S3 it could), nor was it written
                    raise self._fail("writing", key, IsADirectoryError(
                        errno.EISDIR, os.strerror(errno.EISDIR), str(path))) from err
                return False
            except FileNotFoundError as err:
                if tmp.exists() or not path.parent.is_dir() or attempt + 1 == self._TEMP_RETRIES:
                    raise self._fail("writing", key, err) from err
            except OSError as err:
                raise self._fail("writing", key, err) from err
            finally:
                _discard(tmp)
        raise AssertionError("unreachable")

    def _open(self, key: str) -> Any:
        """The object's file, opened for reading; a FIFO, socket or device at its name is
        damage (opening a FIFO would wait for a writer for ever). A folder there is a
        "folder" of other keys (IsADirectoryError): no object, as on S3."""
        fd = os.open(self._path(key), os.O_RDONLY | os.O_NONBLOCK)
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):  # a "folder" of other keys: no object, as on S3
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), key)
            if not stat.S_ISREG(mode):
                raise StoreError(
                    f"reading {key!r} in {self.url} failed: not a regular file is at that "
                    "name, where the object should be; move it away", url=self.url, key=key)
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb", buffering=0)
        except BaseException:
            os.close(fd)
            raise

    def get(self, key: str) -> memoryview | None:
        return self.get_screened(key, None, 0)

    def get_screened(self, key: str, screen: Screen | None, n: int) -> memoryview | None:
        # Read once, straight into 64-byte aligned memory (see _aligned): the frames are
        # then aligned where they lie and are unpickled without another copy.
        try:
            with self._open(key) as f:
                size = os.fstat(f.fileno()).st_size
                if screen is not None and size > n:
                    screen(memoryview(_read_up_to(f, n)), size)
                    f.seek(0)
                buf = aligned_buffer(size)
                got = 0
                while got < size:
                    n = f.readinto(buf[got:])
                    if not n:
                        break
                    got += n
                return buf if got == size else buf[:got]
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as err:
            raise self._fail("reading", key, err) from err

    def head(self, key: str, n: int) -> tuple[bytes, int] | None:
        try:
            with self._open(key) as f:
                size = os.fstat(f.fileno()).st_size
                return _read_up_to(f, min(max(0, n), size)), size
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as err:
            raise self._fail("reading", key, err) from err

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        folder = prefix.rpartition("/")[0]
        found: list[str] = []
        top = self._path(folder) if folder else self.root
        unread: list[OSError] = []

        def failed(err: OSError) -> None:
            # A missing folder lists as empty (a run with no objects, or one deleted
            # during the walk); any other error was silently a folder left out (review
            # 100: a run folder of mode 000 was missing from `ls`, and "no run" to `show`)
            if not isinstance(err, FileNotFoundError | NotADirectoryError):
                unread.append(err)

        for dirpath, dirnames, filenames in os.walk(top, onerror=failed):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            # (only the folders whose keys can begin with the prefix: one function's runs
            # are not all the store's)
            dirnames[:] = [d for d in dirnames if _may_hold(d if rel == "." else f"{rel}/{d}",
                                                            prefix)]
            files = [(name, name) for name in filenames]
            if rel == ".":
                files += self._linked_runs(dirpath, dirnames, failed)
            for name, path in files:
                key = path if rel == "." else f"{rel}/{path}"
                if (
                    key.startswith(prefix)
                    and not is_temp_name(name)
                    and (start_after is None or key > start_after)
                ):
                    found.append(key)
        for err in unread:
            where = Path(err.filename) if err.filename else top
            if where == top:  # the folder asked for: nothing of it could be listed
                raise self._fail("listing", prefix, err) from err
            # A folder below it (another run's, or someone's lost+found at a volume's
            # root): the rest is listed, and the one left out is named
            rel = where.relative_to(self.root).as_posix() if where.is_relative_to(
                self.root) else str(where)
            log.warning("could not list the folder %r in %s: %s; what is in it is left "
                        "out (check the folder's owner and mode)", rel, self.url,
                        err.strerror or err)
        return sorted(found)

    @staticmethod
    def _linked_runs(dirpath: str, dirnames: builtins.list[str],
                     failed: Callable[[OSError], None]) -> builtins.list[tuple[str, str]]:
        """The files of the store's folders that are symbolic links (a run folder moved
        to another disk and linked back, which the library resumes through the link): as
        (name, key) pairs, one level deep. os.walk does not follow them; following them
        all the way could walk a dataset linked into the store, or loop (review 100)."""
        found = []
        for folder in dirnames:
            path = os.path.join(dirpath, folder)
            if not os.path.islink(path):
                continue
            try:
                with os.scandir(path) as entries:
                    found += [(e.name, f"{folder}/{e.name}") for e in entries
                              if not e.is_dir()]
            except OSError as err:
                failed(err)
        return found

    def list_info(self, prefix: str) -> builtins.list[Listed]:
        """``list`` with each file's size and modification time (one stat each)."""
        out = []
        for key in self.list(prefix):
            try:
                st = os.stat(self._path(key))
            except FileNotFoundError:  # deleted since the walk (retention)
                continue
            except OSError as err:
                if err.errno != errno.ELOOP:
                    raise self._fail("listing", key, err) from err
                # A symbolic link loop at one name: listed, so that reading it names it
                # (and its run), instead of the whole store's listing failing
                out.append(Listed(key, 0, 0.0))
                continue
            out.append(Listed(key, st.st_size, st.st_mtime))
        return out

    def delete_command(self, key: str) -> str:
        """A shell command that deletes the object by hand (named in error messages)."""
        return f"`rm {shlex.quote(str(self._path(key)))}`"

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
        except OSError as err:
            raise self._fail("deleting", key, err) from err
        with contextlib.suppress(OSError):  # drop the run's folder once it is empty
            path.parent.rmdir()

    def remove_temp_files(self, prefix: str, older_than: float | None = None) -> int:
        """Delete the temp files of unfinished writes under ``prefix`` (a run's folder).

        A save killed between creating its temp file and the rename (SIGKILL, OOM) leaves
        the file behind, invisible to ``list``. Call this only when no live writer of
        those keys remains: after claiming the run (older attempts are fenced), or when
        deleting it. With ``older_than`` only files last written before that time go:
        a newer attempt that claimed after us may be saving. Returns how many were removed.
        """
        folder = self._path(prefix.rpartition("/")[0]) if "/" in prefix else self.root
        removed = 0
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        except OSError as err:
            raise self._fail("listing temp files in", prefix, err) from err
        # Only the folder's own: a folder below it is another run's (a store nested in
        # it), whose write under way this would cut (review 37).
        for name in names:
            if not is_temp_name(name):
                continue
            path = os.path.join(folder, name)
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                if older_than is not None and os.stat(path).st_mtime >= older_than:
                    continue
                os.unlink(path)
                removed += 1
        with contextlib.suppress(OSError):  # the run's folder, once nothing is left in it
            if folder != self.root:
                folder.rmdir()
        return removed

    def conditional_writes(self) -> bool:
        return True


def _read_up_to(f: Any, n: int) -> bytes:
    """The next ``n`` bytes of ``f``, fewer at its end."""
    chunks = []
    while n > 0:  # (unbuffered: a read may return less, on FUSE say)
        chunk = f.read(n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _may_hold(folder: str, prefix: str) -> bool:
    """Whether keys under ``folder`` (a key's folder part) can begin with ``prefix``."""
    inside = folder + "/"
    return inside.startswith(prefix) or prefix.startswith(inside)


def _discard(tmp: Path) -> None:
    """Remove a temp file after a failed write; failing to (its folder is a file, the
    disk went away) must not hide the write's own error."""
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)
