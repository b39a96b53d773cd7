"""Browse every sample of one or more runs (``themisto view RUN_DIR...``): one self-contained HTML page.

The page embeds the runs' rows as JSON and renders them with a little vanilla JavaScript (no network):
the samples of all runs joined by ``sample_id``, filters, and the selected sample's agreement, target,
figures, each run's prediction and transcript (docs/agents.md, "Browsing a run"). Its state lives in the
URL's fragment, so a link reproduces a view. Everything from the runs is inserted as text, never as HTML,
and the JSON is escaped so that no ``</script>`` in a prediction can end the data block.
"""

from __future__ import annotations

import base64
import html
import json
from importlib import resources
from pathlib import Path
from typing import Any

from themisto_env.build.figures import figures
from themisto_env.data.trajectory import Step, read_trajectories
from themisto_env.errors import DataError, ThemistoError
from themisto_env.metrics import METRICS
from themisto_env.replay.resolve import bundled_dataset_dir
from themisto_env.run.compare import latest_rows, run_label
from themisto_env.run.results import CONFIG, ResultRow
from themisto_env.sandbox.store.workdir import FileStore

FIGURES_PER_SAMPLE = 4
"""At most this many figures of a sample's step are embedded in the page."""
FIGURE_BYTES = 2 * 2**20
"""A larger figure is not embedded."""
_SHOWN_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/svg+xml"})
ERROR_KINDS = ("infrastructure_error", "state_mismatch", "model_error", "prediction_failed")
"""A row's error kinds, in the order `error_kind` tries them (that of the summary's counts)."""


def error_kind(row: ResultRow) -> str:
    """The first of `ERROR_KINDS` the row has, or ``"none"``."""
    return next((kind for kind in ERROR_KINDS if getattr(row, kind)), "none")


def _load_run(run_dir: str | Path) -> tuple[Path, dict[str, ResultRow]]:
    """A run folder and its latest row per sample id (`latest_rows`)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise DataError("no such run folder", path=path)
    return path, latest_rows(path)


def view_data(run_dirs: list[str | Path]) -> dict[str, Any]:
    """What the page shows: the runs (label, folder, counts) and the samples, each with a row per run.

    Raises:
        DataError: No run folder given, or a folder is missing or holds no results.
    """
    if not run_dirs:
        raise DataError("no run folder given: themisto view RUN_DIR...")
    loaded = [_load_run(d) for d in run_dirs]
    labels = [run_label(rows, path) for path, rows in loaded]
    runs = []
    for i, ((path, rows), label) in enumerate(zip(loaded, labels, strict=True)):
        if labels.count(label) > 1:  # two runs of one agent: tell them apart by folder
            label = f"{label} – {path.name}"
        kinds = [error_kind(r) for r in rows.values()]
        runs.append(
            {
                "tag": chr(ord("A") + i) if i < 26 else str(i + 1),
                "label": label,
                "path": str(path),
                "samples": len(rows),
                "scored": sum(1 for r in rows.values() if r.is_scored),
                "errors": {kind: kinds.count(kind) for kind in ERROR_KINDS},
            }
        )
    order: dict[str, int] = {}
    for _, rows in loaded:
        for sid in rows:
            order.setdefault(sid, len(order))
    samples = []
    for sid in order:
        cells = [rows.get(sid) for _, rows in loaded]
        first = next(r for r in cells if r is not None)
        samples.append(
            {
                "id": sid,
                "trajectory_id": first.trajectory_id,
                "step": first.step,
                "task": first.task,
                "target": first.target,
                "kinds": [error_kind(r) if r is not None else None for r in cells],
                "rows": [r.to_dict() if r is not None else None for r in cells],  # as results.jsonl holds them
            }
        )
    steps = dataset_steps([path for path, _ in loaded])
    for sample in samples:
        found = steps.get((sample["trajectory_id"], sample["step"]))
        sample["agreement"] = _agreement(found[0]) if found else None
        sample["figures"] = _figures(*found) if found else []
    extra = sorted({m for _, rows in loaded for r in rows.values() for m in r.scores} - set(METRICS))
    return {"runs": runs, "metrics": [*METRICS, *extra, "reward", "execution_score"], "samples": samples}


def dataset_steps(run_dirs: list[Path]) -> dict[tuple[str, int], tuple[Step, FileStore | None]]:
    """Each step of the datasets the runs used (their config's ``data``), with its dataset's file store;
    a dataset no longer there, or unreadable, adds nothing."""
    found: dict[tuple[str, int], tuple[Step, FileStore | None]] = {}
    for data in dict.fromkeys(run_dataset_folder(path) for path in run_dirs):
        if data is None:
            continue
        try:
            trajectories = read_trajectories(data)
        except (DataError, OSError):
            continue
        for t in trajectories:
            for s in t.steps:
                found.setdefault((t.id, s.index), (s, t.files_store))
    return found


def step_agreements(run_dirs: list[Path]) -> dict[tuple[str, int], dict[str, str]]:
    """Each step's replay agreement (``kind``, ``detail``) in the datasets the runs used."""
    return {key: _agreement(step) for key, (step, _) in dataset_steps(run_dirs).items()}


def _agreement(step: Step) -> dict[str, str]:
    return {"kind": step.agreement_kind or ("ok" if step.agrees else "other"), "detail": step.agreement_detail or ""}


def _figures(step: Step, store: FileStore | None) -> list[dict[str, str]]:
    """A step's figures for the page (at most `FIGURES_PER_SAMPLE`, each under `FIGURE_BYTES`)."""
    shown = []
    for mime, data in figures(step.outputs, store):
        if len(shown) < FIGURES_PER_SAMPLE and len(data) <= FIGURE_BYTES and mime in _SHOWN_IMAGES:
            shown.append({"mime": mime, "base64": base64.b64encode(data).decode("ascii")})
    return shown


def run_dataset_folder(run_dir: Path) -> str | None:
    """The dataset folder a run used: its config's ``data``, or the bundled data's (when built) for none."""
    try:
        config = json.loads((run_dir / CONFIG).read_text(encoding="utf-8"))
        data = config.get("data")
        if data:
            return str(data)
        bundled = bundled_dataset_dir(str(config.get("backend") or "local"))
    except (OSError, ValueError, AttributeError, ThemistoError):
        return None
    return str(bundled) if bundled.is_dir() else None


def _script_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` can close or open a tag."""
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, default=str)
    except ValueError:
        raise DataError("a result row holds NaN or infinity, which the page's JSON cannot carry") from None
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _asset(name: str) -> str:
    """A file of the page (``view_assets/page.html``, ``view.css``, ``view.js``: plain files an editor and a
    linter read as what they are), beside this module."""
    return resources.files("themisto_env.run").joinpath("view_assets", name).read_text(encoding="utf-8")


def render_view(run_dirs: list[str | Path]) -> str:
    """The view's self-contained HTML for the given run folders (see the module docstring): the page's
    skeleton with its CSS, its script and the runs' data inline."""
    data = view_data(run_dirs)
    title = "themisto view: " + ", ".join(r["label"] for r in data["runs"])
    return (
        _asset("page.html")
        .replace("__TITLE__", html.escape(title))
        .replace("__CSS__", "\n" + _asset("view.css"))
        .replace("__JS__", "\n" + _asset("view.js"))
        .replace("__DATA__", _script_json(data))
    )


def default_page(run_dirs: list[str | Path], name: str) -> Path:
    """Where a page of ``run_dirs`` goes without ``--out``: in the run folder for one run; for several, in a
    folder of their own beside the first (``runs/a`` and ``runs/b``: ``runs/a+b/NAME``), never inside one run.
    """
    first = Path(run_dirs[0])
    if len(run_dirs) == 1:
        return first / name
    joined = "+".join(Path(run).resolve().name for run in run_dirs)
    return first.parent / joined[:120] / name


def write_view(run_dirs: list[str | Path], out: str | Path | None = None) -> Path:
    """Write the view (default: `default_page`'s ``view.html``) and return its path.

    Raises:
        DataError: No run folder given, or a folder is missing or holds no results.
    """
    page = render_view(run_dirs)
    path = Path(out) if out is not None else default_page(run_dirs, "view.html")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
