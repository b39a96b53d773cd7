"""Where trajectories come from: a built dataset folder, or the bundled data (built on first use); and the kernel
environment a dataset's kernels run in."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import sys
from pathlib import Path

from themisto_env.data.bundled import bundled_log_path
from themisto_env.data.trajectory import MANIFEST, TRAJECTORIES, EnvironmentRef, read_manifest
from themisto_env.errors import BackendUnavailableError, DataError
from themisto_env.sandbox.environments import environment_registry
from themisto_env.sandbox.environments.docker_image import ready
from themisto_env.sandbox.environments.environment_spec import REQUIREMENTS_FILE
from themisto_env.sandbox.store.snapshot_store import DEFAULT_ENVIRONMENT, default_cache_dir

Stamp = tuple[tuple[int, int] | None, ...]
"""What a dataset folder's files looked like (modification time and size of each; None: absent)."""


def bundled_dataset_dir(backend: str = "local") -> Path:
    """The cache folder of the bundled dataset built on a backend (content-addressed by the log, and by the
    kernel's package set: its snapshots load only under the versions that wrote them, so another Python on
    the machine, with other versions, gets a folder of its own)."""
    from themisto_env.sandbox.image.spec import package_set_digest

    digest = hashlib.sha256(bundled_log_path().read_bytes()).hexdigest()[:12]
    return default_cache_dir() / "datasets" / f"bundled-{digest}-{backend}-{package_set_digest()}"


def resolve_dataset(dataset: str | Path | None = None, *, backend: str = "local", progress: bool = True) -> Path:
    """A dataset folder ready to use: ``dataset`` as given, or the bundled data, replayed if needed.

    The bundled dataset is replayed into the cache the first time it is used on a backend (with
    ``progress``: a line saying so, then a bar on stderr, or a line every few seconds when stderr is not a
    terminal); later calls find it built, and only rebuild what is missing (e.g. snapshots removed
    from the cache).
    """
    if dataset is not None:
        read_manifest(dataset)
        return Path(dataset)
    from themisto_env.build.builder import build_dataset

    folder = bundled_dataset_dir(backend)
    stamp = folder_stamp(folder)
    if stamp[0] is not None and _CHECKED.get(folder) == stamp:  # this process checked it, and it is unchanged
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:  # parallel workers build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / MANIFEST).exists() and (differ := _packages_differ(folder)):
            if progress:
                print(f"the bundled data in {folder} was written with other versions of {', '.join(differ)}: "
                      "building it again", file=sys.stderr, flush=True)  # fmt: skip
            _clear(folder)
        if not (folder / MANIFEST).exists() or not _complete(folder, backend):
            if progress:
                print(
                    f"building the bundled data on the {backend} backend (first use; a few minutes, once) "
                    f"into {folder}",
                    file=sys.stderr,
                    flush=True,
                )
            build_dataset([bundled_log_path()], folder, backend=backend, progress=progress)
        _CHECKED[folder] = folder_stamp(folder)
    return folder


_CHECKED: dict[Path, Stamp] = {}
"""Bundled dataset folders this process found complete, with their stamp then (every new env
would otherwise read the whole log again to check it)."""


def folder_stamp(folder: Path) -> Stamp:
    """The stamp of a dataset folder's ``manifest.json`` and ``trajectories.jsonl``: a changed file is read anew."""
    stamps: list[tuple[int, int] | None] = []
    for name in (MANIFEST, TRAJECTORIES):
        try:
            stat = (folder / name).stat()
        except OSError:
            stamps.append(None)
        else:
            stamps.append((stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


def _packages_differ(folder: Path) -> list[str]:
    """The packages the dataset's snapshots were written with that this Python has at another version, or
    not at all (a dataset of the same kernel package set written by a Python with other versions beside)."""
    from importlib import metadata

    try:
        packages = read_manifest(folder).packages
    except DataError:  # not a manifest this version reads: the build check decides
        return []
    differ = []
    for name, version in sorted(packages.items()):
        try:
            here = metadata.version(name)
        except metadata.PackageNotFoundError:
            here = None
        if here != version:
            differ.append(name)
    return differ


def _clear(folder: Path) -> None:
    """Remove what a build wrote into ``folder`` (its lock file stays: the caller holds it)."""
    for path in folder.iterdir():
        if path.name == ".lock":
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _complete(folder: Path, backend: str) -> bool:
    from themisto_env.build.builder import is_built
    from themisto_env.build.session_replay import trajectory_id
    from themisto_env.data.june import read_sessions
    from themisto_env.data.trajectory import iter_trajectories
    from themisto_env.sandbox.store.snapshot_store import SnapshotStore

    built = {t.id: t for t in iter_trajectories(folder)}
    store = SnapshotStore()
    return all(
        (t := built.get(trajectory_id(session))) is not None and is_built(t, session, backend, store, snapshots=True)
        for session in read_sessions(bundled_log_path())
    )


def create_command(ref: EnvironmentRef, folder: str | Path) -> str:
    """The command that makes a dataset's environment again (from ``environment-requirements.txt``)."""
    parts = [
        "themisto kernel-env create",
        ref.name or f"env-{ref.id}",
        "--requirements",
        str(Path(folder) / REQUIREMENTS_FILE),
    ]
    parts += [f"--apt {package}" for package in ref.apt]
    parts.append(f"--python {ref.python}")
    return " ".join(parts)


def dataset_kernel_environment(folder: str | Path, choice: str | None = None, *, backend: str = "local") -> str | None:
    """The environment a dataset's kernels run in: ``choice`` (a name or id; ``default``: the tool's own
    Python), else the one its manifest records.

    Raises:
        BackendUnavailableError: The dataset's environment is not on this machine (the message is the
            command that makes it again), or its docker image cannot be built.
        ConfigError: ``choice`` names no environment here.
    """
    if choice == DEFAULT_ENVIRONMENT:
        return None
    if choice is not None:
        return ready(environment_registry.resolve(choice), backend).id
    ref = read_manifest(folder).environment
    if ref is None:
        return None
    record = environment_registry.read_record(ref.id)
    if record is None:
        raise BackendUnavailableError(
            f"{folder} was replayed in kernel environment {ref.id}, which is not on this machine: make it with "
            f"`{create_command(ref, folder)}`"
        )
    return ready(record, backend).id
