"""A folder of notebooks at scale: each notebook in the kernel environment its project asks for (a project
file next to it or above it, else its imports), one environment per package set, and a notebook that cannot
be built listed with its reason while the build goes on."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from typer.testing import CliRunner

from themisto_env.build.folder_build import REPORT, find_notebooks
from themisto_env.build.project_packages import notebook_imports, project_packages
from themisto_env.cli import app
from themisto_env.errors import DataError
from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.environments.environment_spec import make_spec


def write_notebook(path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src, execution_count=i + 1) for i, src in enumerate(cells)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


# -- which packages a notebook's project asks for ----------------------------------------------------------


def test_the_nearest_project_file_above_a_notebook_decides(tmp_path: Path) -> None:
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "requirements.txt").write_text("# pinned\nSix==1.16.0\n\ntabulate>=0.9\n")
    deep = write_notebook(tmp_path / "course" / "week1" / "intro.ipynb", ["import numpy"])
    found = project_packages(deep, tmp_path)
    assert found.requirements == ("six==1.16.0", "tabulate>=0.9") and found.origin.endswith("course/requirements.txt")
    conda = tmp_path / "conda"
    conda.mkdir()
    (conda / "environment.yml").write_text(
        "dependencies:\n  - python=3.11\n  - numpy=1.26\n  - conda-forge::pandas>=2.1\n"
        "  - pip\n  - pip:\n    - six==1.16.0\n"
    )
    assert project_packages(write_notebook(conda / "a.ipynb", []), tmp_path).requirements == (
        "numpy==1.26.*",
        "pandas>=2.1",
        "six==1.16.0",
    )
    pyproject = tmp_path / "pkg"
    pyproject.mkdir()
    (pyproject / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["termcolor==2.4.0"]\n')
    assert project_packages(write_notebook(pyproject / "b.ipynb", []), tmp_path).requirements == ("termcolor==2.4.0",)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "requirements.txt").write_text("-r other.txt\n")
    refused = project_packages(write_notebook(bad / "c.ipynb", []), tmp_path)
    assert refused.error is not None and "pip options" in refused.error and "\n" not in refused.error


def test_without_a_project_file_the_imports_name_the_distributions(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("X = 1\n")
    notebook = write_notebook(
        tmp_path / "analysis.ipynb",
        [
            "%matplotlib inline\nimport os, json\nimport numpy as np",
            "from sklearn.linear_model import LinearRegression\nimport cv2",
            "from PIL import Image\nimport yaml\nfrom bs4 import BeautifulSoup",
            "import helpers\nfrom . import sibling\nimport IPython",
            "!pip install something\nimport pandas.io.formats",
            "def broken(:\n    pass",
        ],
    )
    assert notebook_imports(notebook) == ["PIL", "bs4", "cv2", "numpy", "pandas", "sklearn", "yaml"]
    found = project_packages(notebook, tmp_path)
    assert found.origin == "imports"
    assert found.requirements == (
        "beautifulsoup4",
        "numpy",
        "opencv-python",
        "pandas",
        "pillow",
        "pyyaml",
        "scikit-learn",
    )
    assert "sklearn -> scikit-learn" in found.detail and "PIL -> pillow" in found.detail
    stdlib_only = write_notebook(tmp_path / "plain" / "p.ipynb", ["import math\nmath.pi"])
    assert project_packages(stdlib_only, tmp_path / "plain").requirements == ()


def test_notebooks_are_found_without_checkpoints(tmp_path: Path) -> None:
    write_notebook(tmp_path / "a" / "x.ipynb", [])
    write_notebook(tmp_path / "a" / ".ipynb_checkpoints" / "x-checkpoint.ipynb", [])
    write_notebook(tmp_path / "b.ipynb", [])
    assert [p.relative_to(tmp_path).as_posix() for p in find_notebooks(tmp_path)] == ["a/x.ipynb", "b.ipynb"]


# -- the build ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_folder_builds_each_notebook_in_its_projects_environment(tmp_path: Path, pinned_environments: None) -> None:
    """Two projects with different requirement files, a notebook above them with only the standard
    library, and a project whose package does not install: three environments, three notebooks built,
    the fourth listed with its reason."""
    tree = tmp_path / "course"
    (tree / "alpha").mkdir(parents=True)
    (tree / "alpha" / "requirements.txt").write_text("six==1.16.0\n")
    (tree / "alpha" / "data" / "words.txt").parent.mkdir()
    (tree / "alpha" / "data" / "words.txt").write_text("red green blue\n")
    write_notebook(
        tree / "alpha" / "lesson" / "one.ipynb",
        ["import six", "print(six.__version__)", "import os\nprint(sorted(os.listdir('.')))", "x = 2", "x * 21"],
    )
    write_notebook(
        tree / "alpha" / "two.ipynb",
        ["import six", "words = open('data/words.txt').read().split()", "print(len(words), six.__version__)"],
    )
    (tree / "beta").mkdir()
    (tree / "beta" / "pyproject.toml").write_text('[project]\nname = "beta"\ndependencies = ["tabulate==0.9.0"]\n')
    write_notebook(
        tree / "beta" / "table.ipynb",
        ["import tabulate", "print(tabulate.__version__)", "print(tabulate.tabulate([[1, 2]]))"],
    )
    write_notebook(tree / "plain.ipynb", ["import math", "print(math.factorial(5))"])
    write_notebook(tree / "dies.ipynb", ["x = 1", "import os\nos._exit(1)", "print(x)"])  # its kernel dies
    (tree / "gamma").mkdir()
    (tree / "gamma" / "requirements.txt").write_text("six==0.0.1\n")  # no such release: pip fails at once
    write_notebook(tree / "gamma" / "broken.ipynb", ["import six", "print(six.__version__)"])

    out = tmp_path / "built"
    done = CliRunner().invoke(app, ["data", "build", str(tree), "--out", str(out), "--project-envs"])
    assert done.exit_code == 0, done.output
    report = json.loads((out / REPORT).read_text())
    rows = {row["notebook"]: row for row in report["notebooks"]}
    assert sorted(rows) == [
        "alpha/lesson/one.ipynb",
        "alpha/two.ipynb",
        "beta/table.ipynb",
        "dies.ipynb",
        "gamma/broken.ipynb",
        "plain.ipynb",
    ]

    alpha, beta = f"env-{make_spec('six==1.16.0').id}", f"env-{make_spec('tabulate==0.9.0').id}"
    assert rows["alpha/lesson/one.ipynb"]["environment"] == rows["alpha/two.ipynb"]["environment"] == alpha
    assert rows["alpha/two.ipynb"]["packages_from"].endswith("alpha/requirements.txt")
    assert rows["beta/table.ipynb"]["environment"] == beta
    assert rows["plain.ipynb"]["environment"] == "default"
    assert rows["plain.ipynb"]["packages_from"] == "imports: none beyond the standard library"
    for name in ("alpha/lesson/one.ipynb", "alpha/two.ipynb", "beta/table.ipynb", "plain.ipynb"):
        assert rows[name]["status"] == "built" and rows[name]["reason"] is None, rows[name]
        assert rows[name]["executions"] > 0 and rows[name]["causes"]
    broken = rows["gamma/broken.ipynb"]
    assert broken["status"] == "failed" and "do not install" in broken["reason"] and "six==0.0.1" in broken["reason"]
    dies = rows["dies.ipynb"]
    assert dies["environment"] == "default" and dies["status"] != "built" and dies["reason"], dies
    assert "gamma/broken.ipynb" in done.output and "4 of 6 notebooks built" in done.output
    assert sorted(report["environments"]) == sorted([alpha, beta, "default", f"env-{make_spec('six==0.0.1').id}"])

    def printed(label: str) -> list[str]:
        trajectories = Dataset.open(out / label).trajectories.values()
        return [o.get("text", "") for t in trajectories for s in t.steps for o in s.outputs]

    alpha_out, beta_out = printed(alpha), printed(beta)
    assert "1.16.0\n" in alpha_out and "3 1.16.0\n" in alpha_out  # its own six, and its own folder's file
    assert any("'data'" in text for text in alpha_out) is False  # one.ipynb ran in lesson/, not in alpha/
    assert "0.9.0\n" in beta_out
    assert Dataset.open(out / alpha).manifest.environment.id == make_spec("six==1.16.0").id
    assert Dataset.open(out / "default").manifest.environment is None
    assert "120\n" in printed("default")
    with pytest.raises(DataError, match=f"a folder build .*{alpha}"):  # the output is a folder of datasets
        Dataset.open(out)
