"""Figures past the output cap go to the dataset's file store (issue 30): deduplicated, counted in its size,
shown by the viewer's data; what the model sees stays text."""

from __future__ import annotations

import base64
from pathlib import Path

import nbformat
import pytest

from themisto_env.build.builder import build_dataset
from themisto_env.build.figures import figures
from themisto_env.data.samples import target_text
from themisto_env.data.stats import dataset_info
from themisto_env.data.trajectory import FIGURE_FILES_KEY, read_trajectories
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.outputs import DROPPED_KEY, OVER_CAP_KEY, OutputCollector

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20).decode()


def _display(png: str) -> dict:
    return {"data": {"text/plain": "<Figure size 640x480 with 1 Axes>", "image/png": png}, "metadata": {}}


def test_the_collector_keeps_images_past_the_cap_within_the_image_budget() -> None:
    dropped = OutputCollector(1024)
    dropped.add("display_data", _display(PNG))
    (output,) = dropped.finish()
    assert "image/png" not in output["data"] and output["metadata"][DROPPED_KEY][0].startswith("image/png")

    kept = OutputCollector(1024, images_limit=len(PNG) + 10)
    kept.add("display_data", _display(PNG))
    kept.add("stream", {"name": "stdout", "text": "x" * 900})  # the image does not use the cap's room
    kept.add("display_data", _display(PNG))  # past the budget: dropped as before
    first, stream, second = kept.finish()
    assert first["data"]["image/png"] == PNG and first["metadata"] == {OVER_CAP_KEY: ["image/png"]}
    assert stream["text"] == "x" * 900 and not kept.omitted
    assert "image/png" not in second["data"] and second["metadata"][DROPPED_KEY]


@pytest.mark.slow
def test_a_build_keeps_figures_past_the_cap_in_its_files(tmp_path: Path) -> None:
    plot = (
        "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
        "import matplotlib.pyplot as plt\nplt.plot(range(50), [i * i for i in range(50)])\nplt.show()"
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(plot, execution_count=1), nbformat.v4.new_code_cell(plot, execution_count=2)]
    nbformat.write(nb, tmp_path / "plots.ipynb")
    limits = SandboxLimits(output_limit_bytes=2048)  # a figure's PNG is far larger
    build_dataset([tmp_path / "plots.ipynb"], tmp_path / "dataset", snapshots=False, progress=False, limits=limits)
    (trajectory,) = read_trajectories(tmp_path / "dataset")
    kept = [o["metadata"][FIGURE_FILES_KEY]["image/png"] for s in trajectory.steps for o in s.outputs if o.get("data")]
    assert len(kept) == 2 and kept[0] == kept[1]  # the same figure twice: kept once
    for step in trajectory.steps:
        assert all("image/png" not in o.get("data", {}) for o in step.outputs)
        assert target_text("output", step) == "<Figure size 640x480 with 1 Axes>"  # the model's target: text
        ((mime, data),) = figures(step.outputs, trajectory.files_store)
        assert mime == "image/png" and data.startswith(b"\x89PNG")
    info = dataset_info(tmp_path / "dataset")
    assert info["figures_kept"] == 1 and info["files_mb"] >= 0.0
    assert (tmp_path / "dataset" / "files" / "blobs" / kept[0][:2] / kept[0]).stat().st_size > 2048
