"""Trajectories that exercise served states: generators a snapshot cannot hold, a restart, a cell that
can be made slow after the build, and unseeded randomness. Built by the real builder on real kernels."""

from __future__ import annotations

from pathlib import Path

from themisto_env.build.session_replay import replay_session
from themisto_env.data.sessions import RecordedExecution, Session
from themisto_env.data.trajectory import Manifest, append_trajectory, write_manifest
from themisto_env.sandbox.kernel.core import Kernel

#: Steps of the "faults" trajectory (index: source); ``{flag}`` is a file that, once it exists, makes
#: steps 6 and 10 sleep (they were fast when built).
FAULT_CELLS = [
    "import os, time\nimport numpy as np",
    "FLAG = {flag!r}\nscale = 3",
    "def numbers():\n    n = 0\n    while True:\n        n += 1\n        yield n",
    "g = numbers()",
    "rows = [next(g), next(g)]",
    "total = sum(rows) * scale\nprint(total)",
    "if os.path.exists(FLAG):\n    time.sleep(30)\nrows.append(next(g))",
    "rows.append(next(g))\nlen(rows)",
    "frame = np.arange(12).reshape(3, 4) * scale",
    "import os, time\nimport numpy as np\nx = np.ones(3)",  # recorded right after a kernel restart
    "if os.path.exists({flag!r}):\n    time.sleep(30)\ny = x * 2\ny",
    "print(y.sum())",
    "z = y + 1\nz",
    "import pandas as pd\nframe2 = pd.DataFrame({'day': pd.date_range('2024-01-01', periods=6),"
    " 'shop': ['a', 'b'] * 3, 'kind': pd.Categorical(list('xyxyxy')), 'units': range(6)})",
    "class Box:\n    pass\n\nboxes = pd.Series([Box(), Box()])\ntags = {'red', 'green', 'blue'}",
    "def make(k):\n    return lambda v: v * k\n\ntimes3 = make(3)",
    "summary = frame2.groupby('shop')['units'].sum()\nsummary",
    "pd.set_option('display.precision', 2)",  # module state: no snapshot holds it
    "frame2.describe()",
]
RESTART_STEP = 9

#: An unseeded random cell: replaying it can never give the recorded value.
RANDOM_CELLS = [
    "import random",
    "seed_free = random.random()",
    "doubled = seed_free * 2",
    "print(round(doubled, 3))",
    "halved = doubled / 4",
    "label = 'done'",
]


def _session(key: str, cells: list[str], restart_at: int | None = None) -> Session:
    return Session(
        key=key,
        notebook_name=f"{key}.ipynb",
        origin="notebook",
        executions=[
            RecordedExecution(index=i, source=src, restarted_before=i == restart_at) for i, src in enumerate(cells)
        ],
    )


def write_dataset(folder: Path, sessions: list[Session], snapshot_dir: Path, *, snapshots: bool = True) -> Path:
    """Replay sessions with the builder's replay into a dataset folder (as ``themisto data build`` does)."""
    folder.mkdir(parents=True, exist_ok=True)
    with Kernel("local", snapshot_dir=snapshot_dir) as kernel:
        manifest = Manifest(backend="local", snapshots=snapshots, sources=[])
        manifest.packages = kernel.introspect.package_versions(["ipykernel", "dill", "numpy"])
        for session in sessions:
            trajectory = replay_session(session, kernel, snapshots=snapshots)
            assert trajectory.complete, trajectory.failure
            append_trajectory(folder, trajectory)
            manifest.packages.update(trajectory.packages)
        manifest.trajectories = len(sessions)
        write_manifest(folder, manifest)
    return folder


def fault_session(flag: Path) -> Session:
    """The "faults" session; ``flag`` must not exist while it is built."""
    return _session("faults", [c.replace("{flag!r}", repr(str(flag))) for c in FAULT_CELLS], RESTART_STEP)


def random_session() -> Session:
    return _session("unseeded", RANDOM_CELLS)
