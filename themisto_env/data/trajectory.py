"""Replayed trajectories with runtime state, and their on-disk format.

A [`Trajectory`][themisto_env.data.Trajectory] is a recorded [`Session`][themisto_env.data.Session] after replay in
a sandbox kernel: per execution, the replayed outputs beside the recorded ones, the time, the memory and
variable sizes after it, and the digest of a namespace snapshot. A dataset folder (format
``themisto-trajectories``, version `FORMAT_VERSION`) holds ``manifest.json``, ``trajectories.jsonl`` (one
trajectory per line, the pydantic models below) and ``files/`` (the working folders and kept figures,
content-addressed); snapshots live in the snapshot store. docs/data.md ("On-disk format") has the fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from themisto_env.data.agreement import NORMALIZATION_VERSION, UPSTREAM_SOURCES, ReplayContext, agreement
from themisto_env.data.cell_names import names_imported, names_read, names_written
from themisto_env.data.kind_and_size import RecordLevel, is_kind_and_size
from themisto_env.data.writes import append_line, write_text_atomic
from themisto_env.errors import DataError
from themisto_env.sandbox.store.workdir import FileStore

FORMAT_NAME = "themisto-trajectories"
FORMAT_VERSION = 5
"""The dataset format (5: steps say how much of their outputs the recording held, ``recorded_level``). Older
versions are read (their missing fields take defaults); a newer one is refused."""
MANIFEST = "manifest.json"
FIGURE_FILES_KEY = "themisto_files"
"""The metadata key of a step's output naming its figures kept in ``files/`` (mime type -> sha256; see
`themisto_env.build.figures`)."""
TRAJECTORIES = "trajectories.jsonl"
FILES = "files"


class Step(BaseModel):
    """One execution of a trajectory, as recorded and as replayed.

    Attributes:
        index: Position in the trajectory (0-based, in the order performed).
        cell_id: The cell's id, if recorded.
        source: The code executed.
        recorded_outputs: nbformat outputs recorded at the time.
        recorded_duration_s: Execution time recorded at the time, if known.
        restarted_before: The kernel was restarted just before this step (the namespace was empty).
        interrupted: The person interrupted this execution (the replay interrupts it at the recorded time).
        wedged: The replay did not stop when interrupted and the kernel was restarted (the state is gone).
        status: Status of the replay (``ok``, ``error``, ``timeout``).
        outputs: nbformat outputs of the replay (what the env's kernel reproduces).
        duration_s: Execution time of the replay.
        memory_bytes: Resident memory of the kernel after the step.
        variables: Size in bytes of each user variable after the step.
        snapshot: Digest of the namespace snapshot after the step (None if snapshots were off).
        snapshot_skipped: Names the snapshot could not hold, with the reason.
        fingerprint: The user namespace after the step, per name ``type|shape-or-length|content-hash``
            (see `themisto_env.state.kernel`); what a served state is checked against. None in datasets
            built before format version 2.
        agrees: Whether the replayed output equals the recorded one after normalisation.
        agreement_kind: Why not, as `themisto_env.data.agreement.agreement` classifies it (``ok``,
            ``missing-module``, ``upstream``, ``nondeterminism``, ...); None in datasets built before
            normalisation 2 (their steps are compared again when read).
        agreement_detail: A short explanation of a disagreement (the replay's error, the first
            differing lines, the step an input came from, the packages whose versions differ).
        recorded_level: How much of the outputs the recording held, the level the step was judged at:
            ``content``, ``kind-and-size`` (JuNE as published) or ``nothing``; None in datasets built
            before format 5 (set when they are compared again).
        limit_s: The per-cell limit the replay ran under (None in datasets built before format 4).
        replay_stable: Whether a second replay of the cell, from a copy of the state before it, showed
            the same outputs as the first (None: not replayed twice; only cells that disagree with the
            recording are).
        second_outputs: The outputs of that second replay, where they differ from the first.
        files: Content digest of the kernel's working folder after the step (its files are in the
            dataset's ``files/``); None where not recorded (older datasets, or the folder was larger
            than the limit).
    """

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    cell_id: str | None = None
    source: str
    recorded_outputs: list[dict[str, Any]] = Field(default_factory=list)
    recorded_duration_s: float | None = None
    restarted_before: bool = False
    interrupted: bool = False
    wedged: bool = False
    status: Literal["ok", "error", "timeout"]
    outputs: list[dict[str, Any]] = Field(default_factory=list)
    duration_s: float
    memory_bytes: int | None = None
    variables: dict[str, int] = Field(default_factory=dict)
    snapshot: str | None = None
    snapshot_skipped: dict[str, str] = Field(default_factory=dict)
    fingerprint: dict[str, str] | None = None
    agrees: bool
    agreement_kind: str | None = None
    agreement_detail: str | None = None
    recorded_level: RecordLevel | None = None
    files: str | None = None
    limit_s: float | None = None
    replay_stable: bool | None = None
    second_outputs: list[dict[str, Any]] | None = None


class Trajectory(BaseModel):
    """A replayed session.

    Attributes:
        id: Stable id (notebook name and session key).
        session_key: The session key (JuNE kernel_id).
        notebook_name: The notebook's name.
        user_id: Who worked in it, if known.
        origin: ``june`` or ``notebook``.
        source_path: The file it came from.
        source_digest: Digest of the recorded session, to notice when the source changed.
        backend: The sandbox backend it was replayed on.
        steps: The replayed executions.
        complete: Whether every execution was replayed.
        failure: Where and why the replay stopped, when it did not complete.
        fingerprint_version: Version of the namespace fingerprints of its steps (0: none recorded); see
            `themisto_env.sandbox.kernel.helper.FINGERPRINT_VERSION`.
        normalization: Version of the output normalisation its steps' agreement was measured with
            (`themisto_env.data.agreement.NORMALIZATION_VERSION`; 0: before versions). Trajectories
            of another version are compared again when read (their outputs are all stored).
        packages: Distributions the replayed cells imported, with their versions (what its snapshots
            may need to load).
        environment: The id of the kernel environment it was replayed in (``themisto kernel-env``); None: the
            tool's own Python. Its snapshots are restored only by kernels of that environment.
        workdir: The folder whose copy the replay ran in (the notebook's, or ``--workdir``), as given;
            None: an empty folder.
        workdir_digest: Content digest of the files the replay started with (see
            `themisto_env.sandbox.store.workdir.tree_digest`); None in datasets built before working
            folders were recorded (their kernels run in an empty folder, unchecked).
        package_drift: Packages whose version in the replay's kernel differs from the one the source
            recorded (a notebook's metadata, a requirements file beside it): name -> [recorded, replayed]
            (``absent`` where the kernel has none).
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    session_key: str
    notebook_name: str | None = None
    user_id: str | None = None
    origin: str = "june"
    source_path: str | None = None
    source_digest: str
    backend: str
    steps: list[Step] = Field(default_factory=list)
    complete: bool = True
    failure: str | None = None
    environment: str | None = None
    fingerprint_version: int = 0
    normalization: int = 0
    packages: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    workdir_digest: str | None = None
    package_drift: dict[str, list[str]] = Field(default_factory=dict)
    _files: FileStore | None = PrivateAttr(default=None)

    @property
    def files_store(self) -> FileStore | None:
        """Where the working folder's files of this trajectory are kept: its dataset's ``files/`` (set
        when read from a dataset folder; None otherwise)."""
        return self._files

    @property
    def agreement(self) -> float | None:
        """Share of steps whose replayed output agrees with the recorded one, over the steps with recorded
        outputs; None when there are none."""
        compared = [s for s in self.steps if s.agreement_kind != "unrecorded"]
        return sum(s.agrees for s in compared) / len(compared) if compared else None


class EnvironmentRef(BaseModel):
    """The kernel environment a dataset was replayed in (``themisto kernel-env create``): enough to make it again.

    Attributes:
        id: The environment's content id.
        name: Its name when the dataset was built (None: made from ``--requirements``).
        python: Its Python version (``X.Y``).
        requirements: Its normalised requirements, as a file's text (also written beside the manifest as
            ``environment-requirements.txt``).
        apt: Its Debian packages.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str | None = None
    python: str
    requirements: str = ""
    apt: list[str] = Field(default_factory=list)


class Manifest(BaseModel):
    """``manifest.json`` of a trajectory dataset."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["themisto-trajectories"] = FORMAT_NAME
    version: int = FORMAT_VERSION
    created: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    backend: str
    snapshots: bool
    sources: list[str]
    #: Version of the output normalisation replay agreement was measured with (0: before versions).
    normalization: int = 0
    packages: dict[str, str] = Field(default_factory=dict)
    #: The working folders replays started in (as given) -> the content digest of their files.
    workdirs: dict[str, str] = Field(default_factory=dict)
    trajectories: int = 0
    steps: int = 0
    #: The kernel environment the replays ran in; None: the tool's own Python.
    environment: EnvironmentRef | None = None


def read_manifest(folder: str | Path) -> Manifest:
    """Read and validate a dataset's manifest."""
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise DataError(f"not a trajectory dataset (no {MANIFEST}); build one with `themisto data build`", path=folder)
    try:
        manifest = Manifest.model_validate_json(path.read_text())
    except ValidationError as exc:
        err = exc.errors()[0]
        raise DataError(err["msg"], path=path, field=".".join(map(str, err["loc"]))) from None
    if manifest.version > FORMAT_VERSION:
        raise DataError(
            f"format version {manifest.version} is newer than this package reads ({FORMAT_VERSION})",
            path=path,
        )
    return manifest


def write_manifest(folder: str | Path, manifest: Manifest) -> None:
    """Write a dataset's manifest (atomically)."""
    write_text_atomic(Path(folder) / MANIFEST, manifest.model_dump_json(indent=2) + "\n")


def refresh_agreement(trajectory: Trajectory, *, force: bool = False) -> bool:
    """Compare a trajectory's steps (again) under the current normalisation, each with its cause.

    Both outputs of every step are stored, so this needs no replay: a trajectory read from a dataset
    built with another normalisation version is compared again (``force`` compares a current one too;
    the build does so once its replay is done). A step already ``unrecorded`` stays so. A trajectory
    none of whose steps has a recorded output, while its replay shows some, kept no outputs (a notebook
    saved with its outputs cleared, a log written without them): all its steps are ``unrecorded``.

    Each step is compared with what the trajectory knows around it (`ReplayContext`): its status and limit, its second
    replay, the package drift, and the earlier step that last wrote a name it reads (its writes: what its source binds,
    and the names whose fingerprint changed in it; without fingerprints, the names it may change in place). A kernel
    restart forgets the writes before it.

    Args:
        trajectory: The trajectory (changed in place).
        force: Compare even if it was measured with the current version.

    Returns:
        Whether it was compared.
    """
    if trajectory.normalization == NORMALIZATION_VERSION and not force:
        return False
    steps = trajectory.steps
    nothing_recorded = not any(s.recorded_outputs for s in steps) and any(s.outputs for s in steps)
    level: RecordLevel = (
        "kind-and-size" if any(is_kind_and_size(o) for s in steps for o in s.recorded_outputs) else "content"
    )
    drift = {name: (pair[0], pair[1]) for name, pair in trajectory.package_drift.items() if len(pair) == 2}
    writers: dict[str, Step] = {}  # name -> the step that last wrote it
    carried: dict[int, Step] = {}  # step index -> the disagreeing step its inputs came from (it agreed itself)
    uses: dict[str, list[bool]] = {}  # name -> since its last write, whether each use that showed something agreed
    previous: Step | None = None
    for step in steps:
        if step.restarted_before or step.wedged:
            writers.clear()
            uses.clear()
        cleared = {name for name, agreed in uses.items() if agreed and all(agreed)}
        source = _source_of(step, writers, carried, cleared)
        unrecorded = nothing_recorded or step.agreement_kind == "unrecorded"
        context = ReplayContext(
            status=step.status,
            interrupted=step.interrupted,
            limit_s=step.limit_s,
            stable=step.replay_stable,
            second=step.second_outputs,
            upstream=_phrase(*source) if source is not None else None,
            drift=drift,
            notebook=trajectory.origin == "notebook",
            level=level,
        )
        verdict = agreement(None if unrecorded else step.recorded_outputs, step.outputs, context=context)
        step.agrees, step.agreement_kind, step.agreement_detail = verdict.agrees, verdict.kind, verdict.detail or None
        step.recorded_level = "nothing" if verdict.kind == "unrecorded" else level
        if source is not None and not _disagrees(step):  # it agreed, but what it wrote carries the difference
            carried[step.index] = source[0]
        if verdict.kind != "unrecorded" and (step.recorded_outputs or step.outputs):
            for name in names_read(step.source) & writers.keys():
                if verdict.agrees or verdict.kind in _AGAINST:
                    uses.setdefault(name, []).append(verdict.agrees)
        for name in written_names(step, None if step.restarted_before else previous):
            writers[name] = step
            uses.pop(name, None)
        previous = step
    trajectory.normalization = NORMALIZATION_VERSION
    return True


_AGAINST = frozenset({"upstream", "error-vs-ok", "other"})
"""A use of a name that disagreed with one of these may owe it to the name; other causes are the cell's own."""
_NAME_ERROR_RE = re.compile(r"name '(\w+)' is not defined")


def _disagrees(step: Step) -> bool:
    """Whether a step's values can differ from the person's: it disagreed (not by a figure or a warning
    only), or a second replay found its values differ."""
    return step.agreement_kind in UPSTREAM_SOURCES or step.replay_stable is False


def _source_of(
    step: Step, writers: dict[str, Step], carried: dict[int, Step], cleared: set[str]
) -> tuple[Step, list[str], Step] | None:
    """Where a step's inputs differ from: (the disagreeing step, the names read, the step that wrote them);
    None if none. A ``NameError`` comes from the step that should have bound the missing name. Otherwise the
    latest writer of a name the step reads that disagreed, or agreed on inputs from one that did; a library an
    import bound, or a name whose later uses all showed what was recorded (``cleared``), carries nothing."""
    error = next((o for o in step.outputs if o.get("output_type") == "error" and o.get("ename") == "NameError"), None)
    missing = _NAME_ERROR_RE.search(str(error.get("evalue") or "")) if error is not None else None
    writer = writers.get(missing.group(1)) if missing is not None else None
    if missing is not None and writer is not None and (_disagrees(writer) or writer.index in carried):
        return (writer if _disagrees(writer) else carried[writer.index]), [missing.group(1)], writer
    found = []
    for name in names_read(step.source):
        writer = writers.get(name)
        if writer is None or name in cleared or _imported(writer, name):
            continue
        if _disagrees(writer) or writer.index in carried:
            found.append((writer.index, name, writer))
    if not found:
        return None
    index = max(i for i, _, _ in found)
    writer = next(w for i, _, w in found if i == index)
    root = writer if _disagrees(writer) else carried[writer.index]
    return root, sorted(name for i, name, _ in found if i == index), writer


#: Fingerprint types of what an import binds from a library: modules, classes and functions, not values.
_LIBRARY_TYPES = frozenset(
    {
        "module",
        "type",
        "abc.ABCMeta",
        "function",
        "builtin_function_or_method",
        "method",
        "functools.partial",
        "numpy.ufunc",
        "numpy._ArrayFunctionDispatcher",
    }
)


def _imported(writer: Step, name: str) -> bool:
    """Whether ``writer`` bound ``name`` to a library's module, class or function by an import that ran, in
    the replay and in the recording (no error in either): the name holds the environment's library, not a
    value a difference can be carried in. A later cell that differs because of that library differs on its
    own (its second replay says how). An import that failed (``missing-module``) still carries, since the
    name was never bound; so does a value imported (``from settings import ROWS``)."""
    if name not in names_imported(writer.source):
        return False
    if any(output.get("output_type") == "error" for output in writer.recorded_outputs):
        return False
    entry = (writer.fingerprint or {}).get(name)
    if entry is None:  # no fingerprint: only what ``import x`` binds is surely a module, if the cell ran
        return writer.status == "ok" and name in names_imported(writer.source, modules_only=True)
    kind = entry.split("|", 1)[0]
    return kind in _LIBRARY_TYPES or kind.endswith(("Meta", "Metaclass", "MetaClass"))


def _phrase(root: Step, names: list[str], writer: Step) -> str:
    why = root.agreement_kind if root.agreement_kind in UPSTREAM_SOURCES else "its values differ when replayed again"
    wrote = ", ".join(map(repr, names[:3]))
    if writer is root:
        return f"step {root.index} ({why}) wrote {wrote}"
    return f"step {root.index} ({why}), by way of step {writer.index}, which wrote {wrote}"


def written_names(step: Step, previous: Step | None) -> set[str]:
    """What a step wrote: the names its source binds, and those whose fingerprint it changed (without
    fingerprints on both sides, the names its source may change in place)."""
    if step.fingerprint is None or (previous is not None and previous.fingerprint is None):
        return set(names_written(step.source))
    before = previous.fingerprint if previous is not None and previous.fingerprint is not None else {}
    changed = {name for name, value in step.fingerprint.items() if before.get(name) != value}
    return set(names_written(step.source, in_place=False)) | changed


def iter_trajectories(folder: str | Path) -> Iterator[Trajectory]:
    """Read trajectories one by one; a malformed line raises DataError naming the row and field.

    When one trajectory id occurs more than once (a rebuilt session), the last line wins.
    """
    path = Path(folder) / TRAJECTORIES
    if not path.exists():
        return
    latest: dict[str, Trajectory] = {}
    with open(path, encoding="utf-8") as f:
        for row, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                trajectory = Trajectory.model_validate_json(line)
            except ValidationError as exc:
                err = exc.errors()[0]
                raise DataError(err["msg"], path=path, row=row, field=".".join(map(str, err["loc"]))) from None
            trajectory._files = FileStore(Path(folder) / FILES)
            refresh_agreement(trajectory)
            latest[trajectory.id] = trajectory
    yield from latest.values()


def read_trajectories(folder: str | Path) -> list[Trajectory]:
    """All trajectories of a dataset folder."""
    read_manifest(folder)
    return list(iter_trajectories(folder))


def append_trajectory(folder: str | Path, trajectory: Trajectory) -> None:
    """Append one trajectory to the dataset (flushed: a killed build keeps what it wrote)."""
    append_line(Path(folder) / TRAJECTORIES, trajectory.model_dump_json())  # whole or not at all


def dump_json(value: Any) -> str:
    """Compact, stable JSON (used for digests)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
