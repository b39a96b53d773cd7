"""The in-kernel helper's process state and generators (issue 39): what a second replay of a cell needs to
start where its first replay started, beyond the namespace a snapshot holds."""

from __future__ import annotations

import pytest

from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.rendering import render_outputs

ALREADY = "The autoreload extension is already loaded"


def _text(kernel: Kernel, code: str) -> str:
    result = kernel.execute(code)
    assert result.status == "ok", result.outputs
    return render_outputs(result.outputs).rstrip("\n")


@pytest.fixture
def project(local_kernel: Kernel) -> Kernel:
    (local_kernel.snapshots.workdir / "loud.py").write_text("print('loud imported')\n")
    (local_kernel.snapshots.workdir / "stamp.py").write_text(
        "def load_ipython_extension(ipython):\n"
        "    ipython.register_magic_function(lambda line: print('stamped', line), 'line', 'stamp')\n"
        "    ipython.events.register('post_run_cell', lambda result: None)\n"
        "    print('stamp loaded')\n"
    )
    return local_kernel


def test_put_back_undoes_what_a_cell_loaded_and_keeps_what_was_there(project: Kernel) -> None:
    kernel = project
    assert _text(kernel, "%load_ext autoreload") == ""  # loaded before: must stay loaded
    callbacks = _text(kernel, "print(len(get_ipython().events.callbacks['post_run_cell']))")
    filters = _text(kernel, "import warnings\nprint(warnings.filters)")
    assert kernel.call("keep_process_state") is True
    (kernel.snapshots.workdir / "data").mkdir()
    cell = "%load_ext stamp\nimport loud, json, warnings\nwarnings.simplefilter('ignore')\n%cd -q data\n%stamp once"
    assert _text(kernel, cell) == "stamp loaded\nloud imported\nstamped once"
    undone = kernel.call("put_back_process_state")
    assert undone == {"extensions": ["stamp"], "modules": ["loud", "stamp"]}  # json is installed: not imported twice
    assert "UsageError" in render_outputs(kernel.execute("%stamp twice").outputs)
    assert _text(kernel, "print(len(get_ipython().events.callbacks['post_run_cell']))") == callbacks
    assert _text(kernel, "print(warnings.filters)") == filters
    assert _text(kernel, "import os\nprint(os.getcwd())") == str(kernel.snapshots.workdir)
    # the cell run again shows what its first run showed; what was loaded before it still is
    assert _text(kernel, cell) == "stamp loaded\nloud imported\nstamped once"
    assert _text(kernel, "%load_ext autoreload").startswith(ALREADY)
    assert _text(kernel, "import sys\nprint('json' in sys.modules, 'loud' in sys.modules)") == "True True"


def test_put_back_with_nothing_kept_changes_nothing(project: Kernel) -> None:
    kernel = project
    assert _text(kernel, "%load_ext stamp\nimport loud") == "stamp loaded\nloud imported"
    assert kernel.call("put_back_process_state") == {"extensions": [], "modules": []}
    assert _text(kernel, "import loud\n%stamp kept") == "stamped kept"


def test_generators_made_with_no_seed_are_reseeded_and_seeded_ones_kept(local_kernel: Kernel) -> None:
    kernel = local_kernel
    made = (
        "import numpy as np\n"
        "class Model:\n    def __init__(self):\n        self.rng = np.random.default_rng()\n"
        "rng, legacy, model = np.random.default_rng(), np.random.RandomState(), Model()\n"
        "gens = {'a': np.random.default_rng(np.random.SeedSequence())}\n"
        "pool = [np.random.default_rng()]\n"
        "seeded, legacy_seeded = np.random.default_rng(42), np.random.RandomState(7)\n"
        "big_seed = np.random.default_rng(2**63)\n"
        "np.random.seed(1)\nglobal_seeded = np.random.mtrand._rand\n"
        "def states():\n"
        "    names = ['rng', 'legacy', 'model.rng', \"gens['a']\", 'pool[0]', 'seeded', 'legacy_seeded',"
        " 'big_seed', 'global_seeded']\n"
        "    return {n: str(eval(n).bit_generator.state if hasattr(eval(n), 'bit_generator')"
        " else eval(n).get_state()[1][:4]) for n in names}\n"
    )
    _text(kernel, made)
    _text(kernel, "before = states()")
    reseeded = kernel.call("reseed_generators")
    assert sorted(reseeded) == sorted(["rng", "legacy", "model.rng", "gens['a']", "pool[0]"])
    changed = _text(kernel, "after = states()\nprint(sorted(n for n in before if before[n] != after[n]))")
    assert changed == str(sorted(reseeded))
    assert kernel.call("reseed_generators") == reseeded  # still made with no seed: reseeded each time


def test_what_an_installed_package_set_up_stays(local_kernel: Kernel) -> None:
    """pyplot's first import sets up the hook that shows a cell's figures: it is not imported again, so the
    hook must stay for the cell run again to show its figure too."""
    kernel = local_kernel
    kernel.call("keep_process_state")
    cell = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nprint('drawn')"
    first = kernel.execute(cell).outputs
    assert kernel.call("put_back_process_state") == {"extensions": [], "modules": []}
    second = kernel.execute(cell).outputs
    kinds = [o["output_type"] for o in first]
    assert "display_data" in kinds and [o["output_type"] for o in second] == kinds
