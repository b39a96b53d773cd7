"""A kernel's working folder as part of its state: file trees, their digests, a store, and syncing.

A kernel runs in a private folder in its run directory (``RUN_DIR/work``); the files it sees are part of a
step's state, recorded and served like the variables. A `FileTree` maps each regular file's relative path to
its sha256 (no links, special files or `IGNORED` folders), `tree_digest` hashes a tree the same on any
machine, a `FileStore` keeps trees and contents content-addressed and checked on read, and `sync` makes a
folder hold exactly a tree's files without following a link the kernel may have planted. `scan` refuses a
folder over a size limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Collection, Iterator
from pathlib import Path

from themisto_env.errors import DataError
from themisto_env.sandbox.store.snapshot_store import write_atomic

#: Relative POSIX path -> sha256 (hex) of the file's content.
FileTree = dict[str, str]
#: Folder names left out of trees (caches and version control, not the notebook's data).
IGNORED = frozenset({"__pycache__", ".ipynb_checkpoints", ".git"})
#: ``(size, mtime_ns, ctime_ns, inode)`` -> digest: a file unchanged since the last scan is not read again.
ScanCache = dict[str, tuple[tuple[int, int, int, int], str]]
_CHUNK = 1 << 20


class FolderTooLargeError(DataError):
    """A working folder's files exceed the size limit."""


def tree_digest(tree: FileTree) -> str:
    """The content digest of a tree: sha256 over its sorted ``path NUL sha256 LF`` lines."""
    h = hashlib.sha256()
    for path in sorted(tree):
        h.update(f"{path}\0{tree[path]}\n".encode())
    return h.hexdigest()


EMPTY_TREE = tree_digest({})


def _entries(folder: Path, rel: str = "") -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Every entry under ``folder`` (depth first, parents before children), links never followed."""
    with os.scandir(folder / rel if rel else folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        path = f"{rel}/{entry.name}" if rel else entry.name
        yield path, entry
        if entry.is_dir(follow_symlinks=False) and entry.name not in IGNORED:
            yield from _entries(folder, path)


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _size(n: int) -> str:
    return f"{n / 2**20:.4g} MB" if n >= 2**20 else f"{n:,} bytes"


def scan(
    folder: str | Path, *, limit_bytes: int, cache: ScanCache | None = None, skip: Collection[str] = ()
) -> FileTree:
    """The tree of a folder's regular files (links and special files left out).

    Args:
        folder: The folder.
        limit_bytes: The most its files may hold in all.
        cache: Digests of an earlier scan of the same folder, reused for files whose size, times and
            inode did not change (updated in place).
        skip: Relative paths of folders left out (a dataset being written inside the folder).

    Raises:
        FolderTooLargeError: The files exceed ``limit_bytes`` (one line naming the folder).
        DataError: The folder does not exist or cannot be read.
    """
    root = Path(folder)
    if not root.is_dir():
        raise DataError("the working folder does not exist (or is not a folder)", path=root)
    tree: FileTree = {}
    total = 0
    seen: set[str] = set()
    try:
        for path, entry in _entries(root):
            if not entry.is_file(follow_symlinks=False) or any(part in IGNORED for part in path.split("/")):
                continue
            if any(path.startswith(f"{folder}/") for folder in skip):
                continue
            st = entry.stat(follow_symlinks=False)
            total += st.st_size
            if total > limit_bytes:
                raise FolderTooLargeError(
                    f"the working folder holds more than the limit of {_size(limit_bytes)}; give a smaller folder "
                    "with --workdir or raise the limit (--workdir-limit-mb)",
                    path=root,
                )
            key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            known = cache.get(path) if cache is not None else None
            digest = known[1] if known is not None and known[0] == key else _hash_file(root / path)
            if cache is not None:
                cache[path] = (key, digest)
            tree[path] = digest
            seen.add(path)
    except OSError as exc:
        raise DataError(f"could not read the working folder: {exc}", path=root) from None
    if cache is not None:
        for gone in cache.keys() - seen:
            del cache[gone]
    return tree


def diff_trees(expected: FileTree, actual: FileTree) -> list[str]:
    """What differs between two trees, one line per file (empty: the same)."""
    lines = [f"file {p}: missing" for p in sorted(expected.keys() - actual.keys())]
    lines += [f"file {p}: not recorded" for p in sorted(actual.keys() - expected.keys())]
    lines += [f"file {p}: content differs" for p in sorted(expected.keys() & actual.keys()) if expected[p] != actual[p]]
    return lines


class FileStore:
    """Content-addressed file trees and contents: ``ROOT/trees/<digest>.json`` and
    ``ROOT/blobs/<sha[:2]>/<sha>``. Written only by the host; every read is checked against its digest.

    Args:
        root: The store's folder (created when something is added).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def tree_path(self, digest: str) -> Path:
        """Where the tree with this digest is recorded."""
        return self.root / "trees" / f"{digest}.json"

    def blob_path(self, sha: str) -> Path:
        """Where the content with this sha256 is kept."""
        return self.root / "blobs" / sha[:2] / sha

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, str) and (digest == EMPTY_TREE or self.tree_path(digest).exists())

    def add(self, folder: str | Path, tree: FileTree) -> str:
        """Keep a folder's files (as scanned into ``tree``) and the tree; return the tree's digest.

        Contents already kept are not read again. A file that changed since the scan is refused.

        Raises:
            DataError: A file could not be read, or no longer matches the tree.
        """
        digest = tree_digest(tree)
        if digest in self:
            return digest
        root = Path(folder)
        for path, sha in sorted(tree.items()):
            target = self.blob_path(sha)
            if target.exists():
                continue
            try:
                fd = os.open(root / path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as f:
                    data = f.read()
            except OSError as exc:
                raise DataError(f"could not read {path}: {exc}", path=root) from None
            if hashlib.sha256(data).hexdigest() != sha:
                raise DataError(f"{path} changed while it was being recorded", path=root)
            _write_atomic(target, data)
        _write_atomic(self.tree_path(digest), json.dumps(tree, sort_keys=True, indent=0).encode())
        return digest

    def add_bytes(self, data: bytes) -> str:
        """Keep one content (a figure a build moved out of a step's outputs); return its sha256."""
        sha = hashlib.sha256(data).hexdigest()
        target = self.blob_path(sha)
        if not target.exists():
            _write_atomic(target, data)
        return sha

    def tree(self, digest: str) -> FileTree:
        """The tree recorded under ``digest``.

        Raises:
            DataError: It is missing, or its files do not hash to ``digest``.
        """
        if digest == EMPTY_TREE:
            return {}
        path = self.tree_path(digest)
        try:
            tree = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            problem = f"the working folder's record {digest[:12]} is missing or unreadable ({exc})"
            raise DataError(problem, path=path) from None
        if not isinstance(tree, dict) or tree_digest(tree) != digest:
            raise DataError(f"the working folder's record does not match its digest {digest[:12]}", path=path)
        return {str(k): str(v) for k, v in tree.items()}

    def read(self, sha: str, *, name: str) -> bytes:
        """The content with this sha256 (``name``: the file's path, for the error).

        Raises:
            DataError: It is missing or does not hash to ``sha`` (the working folder would differ from
                the recording).
        """
        path = self.blob_path(sha)
        try:
            data = path.read_bytes()
        except OSError:
            raise DataError(f"the working folder's file {name} is missing from the dataset", path=path) from None
        if hashlib.sha256(data).hexdigest() != sha:
            raise DataError(f"the working folder's file {name} does not match its digest {sha[:12]}", path=path)
        return data


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)


def _remove(path: Path) -> None:
    """Remove a file, link or folder without following links."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)  # the fd-based rmtree: never follows a link out of the folder
    else:
        os.unlink(path)


def sync(folder: str | Path, target: FileTree, store: FileStore, *, cache: ScanCache | None = None) -> None:
    """Make ``folder`` hold exactly ``target``'s files (and the folders they need), changing only what
    differs; ``__pycache__`` and the like stay. Written files are mode 0666 and folders 0777 (a
    container's kernel user must write them: the folder is the kernel's private copy).

    Raises:
        DataError: A file the tree needs is missing from ``store`` or does not match its digest (the
            folder is then left partly synced: serve it to no one).
    """
    root = Path(folder)
    needed_dirs = {"/".join(p.split("/")[:i]) for p in target for i in range(1, p.count("/") + 1)}
    for path, entry in reversed(list(_entries(root))):  # children before parents
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in IGNORED and path not in needed_dirs:
                _remove(root / path)
            continue
        if entry.is_file(follow_symlinks=False) and path in target:
            st = entry.stat(follow_symlinks=False)
            key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            known = cache.get(path) if cache is not None else None
            digest = known[1] if known is not None and known[0] == key else _hash_file(root / path)
            if digest == target[path]:
                continue
        _remove(root / path)  # a link, a special file, a file not in the tree, or one that differs
    for path in sorted(target):
        parent = root
        for part in path.split("/")[:-1]:
            parent = parent / part
            try:
                st = os.lstat(parent)
            except FileNotFoundError:
                os.mkdir(parent)
                os.chmod(parent, 0o777)
                continue
            if not stat.S_ISDIR(st.st_mode):  # a file where the tree needs a folder
                _remove(parent)
                os.mkdir(parent)
                os.chmod(parent, 0o777)
        if os.path.lexists(root / path):
            continue  # kept above: the same content
        data = store.read(target[path], name=path)
        fd = os.open(root / path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(root / path, 0o666)
