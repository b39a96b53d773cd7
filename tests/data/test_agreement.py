"""Replay agreement: the normalisation rules, the kinds of disagreement, and old datasets compared again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from themisto_env.data.agreement import (
    DISAGREEMENTS,
    NORMALIZATION_VERSION,
    TOLERATED,
    ReplayContext,
    agreement,
    normalize_output,
)
from themisto_env.data.stats import dataset_info
from themisto_env.data.trajectory import (
    FORMAT_VERSION,
    Manifest,
    Step,
    Trajectory,
    read_trajectories,
    refresh_agreement,
)
from themisto_env.errors import DataError


def _out(text: str) -> list[dict[str, Any]]:
    return [{"output_type": "stream", "name": "stdout", "text": text}]


def _result(text: str, **data: str) -> list[dict[str, Any]]:
    return [{"output_type": "execute_result", "data": {"text/plain": text, **data}, "metadata": {}}]


def _err(text: str) -> list[dict[str, Any]]:
    return [{"output_type": "stream", "name": "stderr", "text": text}]


def _error(ename: str, evalue: str) -> list[dict[str, Any]]:
    return [{"output_type": "error", "ename": ename, "evalue": evalue, "traceback": ["..."]}]


@pytest.mark.parametrize(
    ("recorded", "replayed"),
    [
        ("<Figure size 432x288 with 1 Axes>", "<Figure size 640x480 with 1 Axes>"),
        ("Figure(432x288)", "Figure(640x480)"),
        ("<function f at 0x7f3a1c2b4d50>", "<function f at 0x55d0c0ffee00>"),
        ("  File <ipython-input-12-3f2a9c0b1d4e>, line 1", "  File /tmp/ipykernel_4711/2519893127.py, line 1"),
        ("invalid syntax (<ipython-input-3-0a1b2c3d>, line 1)", "invalid syntax (2519893127.py, line 1)"),
        ("/tmp/ipykernel_4711/2519893127.py:3: UserWarning: x", "/tmp/ipykernel/2519893127.py:3: UserWarning: x"),
        ("saved to /tmp/tmpa1b2c3/model.pkl", "saved to /var/folders/xy/T/tmpzz/model.pkl"),
        ("a   \nb\t\n\n", "a\nb"),
        ("Wall time: 1.2 s", "Wall time: 830 ms"),
    ],
)
def test_what_legitimately_varies_is_normalised(recorded: str, replayed: str) -> None:
    assert normalize_output(recorded) == normalize_output(replayed)
    verdict = agreement(_out(recorded), _out(replayed))
    assert verdict.agrees and verdict.kind == "ok" and verdict.detail == ""
    assert not agreement(_out(recorded), _out(replayed), raw=True).agrees  # the raw comparison sees it


@pytest.mark.parametrize(
    ("recorded", "replayed"),
    [
        ("<Figure size 640x480 with 1 Axes>", "<Figure size 640x480 with 2 Axes>"),  # axes are content
        ("hex(255) = 0xff", "hex(255) = 0xfe"),
        ("read /data/x.csv", "read /data/y.csv"),
    ],
)
def test_content_is_not_normalised_away(recorded: str, replayed: str) -> None:
    assert not agreement(_out(recorded), _out(replayed)).agrees


def test_the_normalised_figure_keeps_its_axes() -> None:
    assert normalize_output("<Figure size 432x288 with 1 Axes>  \n") == "<Figure size <SIZE> with 1 Axes>"


@pytest.mark.parametrize(
    ("recorded", "replayed", "kind", "detail"),
    [
        (_out("ok\n"), _error("ModuleNotFoundError", "No module named 'seaborn'"), "missing-module", "seaborn"),
        (_result("1"), _error("ImportError", "No module named 'foo.bar'"), "missing-module", "foo.bar"),
        (
            _result("df"),
            _error("AttributeError", "'DataFrame' object has no attribute 'append'"),
            "missing-attribute",
            "append",
        ),
        (_out(""), _error("ImportError", "cannot import name 'x' from 'y'"), "missing-attribute", "cannot import"),
        (
            _result("   a\n0  1"),
            _error("FileNotFoundError", "[Errno 2] No such file or directory: 'data/x.csv'"),
            "missing-file",
            "data/x.csv",
        ),
        (_result("3"), _error("NameError", "name 'df' is not defined"), "error-vs-ok", "NameError"),
        (_error("ZeroDivisionError", "division by zero"), _result("3"), "error-vs-ok", "ZeroDivisionError"),
        (_error("KeyError", "'a'"), _error("KeyError", "'b'"), "error-vs-ok", "KeyError: 'b'"),
        (_result("0.8312"), _result("0.8297"), "other", "recorded '0.8312', replayed '0.8297' (numbers only)"),
        (_out("took 12 iterations\n"), _out("took 15 iterations\n"), "other", "not replayed twice"),
        (_out("took 0.53 for 10 rows\n"), _out("took 0.61 for 10 rows\n"), "timing", "0.53"),
        (_out("elapsed: 1.2 min\n"), _out("elapsed: 1.5 min\n"), "timing", "1.2"),
        (_out("ok\n"), _out("ok\n") + _err("/x.py:3: FutureWarning: will change\n"), "warning", "FutureWarning"),
        (_out("ok\n"), _out("python3: can't open file 'prep.py': [Errno 2] No such file\n"), "missing-file", "prep.py"),
        (_result("'1.5.3'"), _result("'2.2.1'"), "other", "1.5.3"),  # a version is not a random number
        (_result("[3, 1, 2]"), _result("[3, 1]"), "other", "[3, 1]"),
        (_out("x\n"), _out("x\n") + _out("warning!\n"), "other", "only replayed"),
    ],
)
def test_disagreements_are_classified(
    recorded: list[dict[str, Any]], replayed: list[dict[str, Any]], kind: str, detail: str
) -> None:
    verdict = agreement(recorded, replayed)
    assert (verdict.agrees, verdict.kind) == (False, kind)
    assert detail in verdict.detail and len(verdict.detail) <= 120


@pytest.mark.parametrize(
    ("context", "kind", "detail"),
    [
        (ReplayContext(stable=False, second=_result("0.8001")), "nondeterminism", "a second replay differs"),
        (ReplayContext(stable=True), "environment", "the same on a second replay"),
        (ReplayContext(stable=True, drift={"numpy": ("1.21.6", "2.4.6")}), "environment", "numpy 1.21.6 -> 2.4.6"),
        (ReplayContext(stable=True, upstream="step 3 (missing-file) wrote 'df'"), "upstream", "step 3 (missing-file)"),
        (ReplayContext(status="timeout", limit_s=60.0), "timeout", "--cell-timeout 600"),
        (ReplayContext(status="timeout", limit_s=60.0, interrupted=True), "other", "not replayed twice"),
    ],
)
def test_what_the_build_knows_decides_the_cause(context: ReplayContext, kind: str, detail: str) -> None:
    verdict = agreement(_result("0.8312"), _result("0.8297"), context=context)
    assert (verdict.agrees, verdict.kind) == (False, kind)
    assert detail in verdict.detail


def test_an_error_downstream_of_a_disagreement_is_upstream_but_a_missing_module_is_its_own() -> None:
    upstream = ReplayContext(upstream="step 4 (missing-module) wrote 'sns'")
    name_error = agreement(_out(""), _error("NameError", "name 'sns' is not defined"), context=upstream)
    assert name_error.kind == "upstream" and "step 4" in name_error.detail
    missing = agreement(_out(""), _error("ModuleNotFoundError", "No module named 'x'"), context=upstream)
    assert missing.kind == "missing-module"
    warned = agreement(_out("a\n"), _out("a\n") + _err("UserWarning: careful\n"), context=upstream)
    assert warned.kind == "warning"  # what the cell itself shows comes first
    assert "timing" in TOLERATED and "warning" in TOLERATED and "upstream" in DISAGREEMENTS


def test_display_only_differences() -> None:
    figure = {
        "output_type": "display_data",
        "data": {"text/plain": "<Figure size 640x480 with 1 Axes>", "image/png": "..."},
        "metadata": {},
    }
    html = {"output_type": "display_data", "data": {"text/plain": "<IPython.core.display.HTML object>"}, "metadata": {}}
    assert agreement([*_out("done\n"), figure], _out("done\n")).kind == "display"
    assert agreement([html, *_out("done\n")], [*_out("done\n"), figure]).kind == "display"
    # images alone never count: both render as text/plain
    other_image = {**figure, "data": {**figure["data"], "image/png": "different"}}
    assert agreement([figure], [other_image]).agrees


def test_the_same_error_agrees_and_nothing_recorded_is_not_a_disagreement() -> None:
    error = _error("NameError", "name 'x' is not defined")
    assert agreement(error, error).agrees
    verdict = agreement(None, _out("anything\n"))
    assert (verdict.agrees, verdict.kind) == (False, "unrecorded")


def test_a_trajectory_measured_by_an_older_normalisation_is_compared_again() -> None:
    step = Step(
        index=0,
        source="plt.plot([1])",
        recorded_outputs=_result("<Figure size 432x288 with 1 Axes>"),
        outputs=_result("<Figure size 640x480 with 1 Axes>"),
        status="ok",
        duration_s=0.1,
        agrees=False,
    )
    trajectory = Trajectory(id="t", session_key="k", source_digest="d", backend="local", steps=[step])
    assert trajectory.normalization == 0 and trajectory.steps[0].agreement_kind is None
    assert refresh_agreement(trajectory)
    assert trajectory.normalization == NORMALIZATION_VERSION
    assert trajectory.steps[0].agrees and trajectory.steps[0].agreement_kind == "ok"
    assert not refresh_agreement(trajectory)  # current: left alone


def test_a_trajectory_with_nothing_compared_has_no_agreement() -> None:
    trajectory = Trajectory(id="t", session_key="k", source_digest="d", backend="local")
    assert trajectory.agreement is None


def test_a_dataset_written_before_kinds_loads_and_is_compared_again(tmp_path: Path) -> None:
    step = Step(
        index=0,
        source="plt.figure()",
        recorded_outputs=_result("<Figure size 432x288 with 0 Axes>"),
        outputs=_result("<Figure size 640x480 with 0 Axes>"),
        status="ok",
        duration_s=0.1,
        agrees=False,
    )
    trajectory = Trajectory(id="t", session_key="k", source_digest="d", backend="local", steps=[step] * 5)
    old_step = {k: v for k, v in step.model_dump().items() if not k.startswith("agreement_")}
    old = {k: v for k, v in trajectory.model_dump().items() if k != "normalization"} | {"steps": [old_step] * 5}
    (tmp_path / "trajectories.jsonl").write_text(json.dumps(old) + "\n")
    manifest = Manifest(backend="local", snapshots=False, sources=[]).model_dump()
    del manifest["normalization"]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    (read,) = read_trajectories(tmp_path)
    assert read.normalization == NORMALIZATION_VERSION and all(s.agreement_kind == "ok" for s in read.steps)
    info = dataset_info(tmp_path)
    assert info["agreement"] == 1.0 and info["built_with_normalization"] == 0


def test_a_version_3_dataset_still_reads_and_its_steps_get_causes(tmp_path: Path) -> None:
    """Format 4 added the per-cell limit, the second replay and the package drift; a version 3 file has none."""
    steps = [
        {"index": 0, "source": "import seaborn as sns", "status": "error", "duration_s": 0.1, "agrees": False,
         "outputs": _error("ModuleNotFoundError", "No module named 'seaborn'"), "agreement_kind": "missing-module"},
        {"index": 1, "source": "sns.set()", "status": "error", "duration_s": 0.1, "agrees": False,
         "outputs": _error("NameError", "name 'sns' is not defined"), "agreement_kind": "error-vs-ok",
         "recorded_outputs": _out("themed\n")},
    ]  # fmt: skip
    old = {"id": "t", "session_key": "k", "source_digest": "d", "backend": "local", "normalization": 2, "steps": steps}
    (tmp_path / "trajectories.jsonl").write_text(json.dumps(old) + "\n")
    manifest = Manifest(backend="local", snapshots=False, sources=[], version=3, normalization=2)
    (tmp_path / "manifest.json").write_text(manifest.model_dump_json())
    (read,) = read_trajectories(tmp_path)
    assert [s.agreement_kind for s in read.steps] == ["missing-module", "upstream"]
    assert read.steps[1].agreement_detail == "inputs from step 0 (missing-module) wrote 'sns'"
    assert read.steps[0].limit_s is None and read.steps[0].replay_stable is None and read.package_drift == {}
    newer = Manifest(backend="local", snapshots=False, sources=[], version=FORMAT_VERSION + 1)
    (tmp_path / "manifest.json").write_text(newer.model_dump_json())
    with pytest.raises(DataError, match="newer than this package reads"):
        read_trajectories(tmp_path)


def test_a_notebook_cell_saved_without_outputs_is_unrecorded_where_its_replay_shows_something() -> None:
    notebook = ReplayContext(notebook=True)
    assert agreement([], _result("42"), context=notebook).kind == "unrecorded"
    assert agreement([], _out("saved\n"), context=notebook).kind == "unrecorded"
    assert agreement([], _err("UserWarning: careful\n"), context=notebook).kind == "warning"  # stderr only
    missing = agreement([], _error("ModuleNotFoundError", "No module named 'x'"), context=notebook)
    assert missing.kind == "missing-module"
    assert agreement([], _result("42")).kind == "other"  # a log records what was shown: an empty one is empty


def test_a_difference_is_followed_through_steps_that_agreed() -> None:
    """A random split shows nothing, the model fitted on it shows nothing: the score printed after is
    upstream of the split, by way of the fit."""

    def step(index: int, source: str, recorded: str, replayed: str, **fields: Any) -> Step:
        return Step(
            index=index, source=source, recorded_outputs=_out(recorded) if recorded else [],
            outputs=_out(replayed) if replayed else [], status="ok", duration_s=0.1, agrees=False, **fields,
        )  # fmt: skip

    steps = [
        step(0, "X_tr, X_te = split(X)", "", "", replay_stable=False),
        step(1, "model = fit(X_tr)", "", ""),
        step(2, "print(model.score(X_te))", "0.81\n", "0.77\n", replay_stable=True),
        step(3, "print(len(X))", "3\n", "4\n", replay_stable=True),
    ]
    trajectory = Trajectory(id="t", session_key="k", source_digest="d", backend="local", steps=steps)
    refresh_agreement(trajectory, force=True)
    assert [s.agreement_kind for s in trajectory.steps] == ["ok", "ok", "upstream", "environment"]
    assert trajectory.steps[2].agreement_detail == (
        "inputs from step 0 (its values differ when replayed again), by way of step 1, which wrote 'model'"
    )


def test_an_import_that_ran_carries_no_difference_but_a_value_or_a_failed_import_does() -> None:
    """Issue 39: a cell that prints a library's version (or a repr the library changed) differs on its own,
    not because an earlier cell that imported the library disagreed; a value imported, a failed import, and a
    name whose fingerprint is not known to hold a module carry as before."""

    def step(index: int, source: str, recorded: list, replayed: list, **fields: Any) -> Step:
        return Step(
            index=index, source=source, recorded_outputs=recorded, outputs=replayed, duration_s=0.1,
            agrees=False, replay_stable=True, **{"status": "ok", **fields},
        )  # fmt: skip

    cache = _err("Matplotlib is building the font cache; this may take a moment.\n")
    module, klass, value = "module||abc", "abc.ABCMeta||", "int||1f"
    steps = [
        step(0, "import numpy as np\nfrom sklearn.linear_model import LinearRegression as LR", cache, [],
             fingerprint={"np": module, "LR": klass}),
        step(1, "print(np.__version__)", _out("1.21.6\n"), _out("2.4.6\n"), fingerprint={"np": module, "LR": klass}),
        step(2, "LR()", _result("LinearRegression(n_jobs=None)"), _result("LinearRegression()")),
        step(3, "from settings import ROWS", cache, [], fingerprint={"ROWS": value}),
        step(4, "print(ROWS)", _out("120\n"), _out("0\n")),
        step(5, "import seaborn as sns", [], _error("ModuleNotFoundError", "No module named 'seaborn'"),
             status="error"),
        step(6, "sns.set_theme()", [], _error("NameError", "name 'sns' is not defined"), status="error"),
        step(7, "from matplotlib import pyplot as plt", cache, []),  # no fingerprint: maybe a value
        step(8, "print(plt.get_backend())", _out("agg\n"), _out("inline\n")),
        step(9, "import matplotlib as mpl", cache, []),  # no fingerprint, but `import x` binds a module
        step(10, "print(mpl.__version__)", _out("3.3.4\n"), _out("3.11.2\n")),
    ]  # fmt: skip
    trajectory = Trajectory(id="t", session_key="k", source_digest="d", backend="local", steps=steps)
    refresh_agreement(trajectory, force=True)
    kinds = [s.agreement_kind for s in trajectory.steps]
    assert kinds == ["environment", "environment", "environment", "environment", "upstream", "missing-module",
                     "upstream", "environment", "upstream", "environment", "environment"]  # fmt: skip
    assert trajectory.steps[4].agreement_detail == "inputs from step 3 (environment) wrote 'ROWS'"
