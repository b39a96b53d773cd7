"""Development trajectories as records: what a person ran, in order, and the samples drawn from it.

Owns reading JuNE event logs (``june``) and saved notebooks (``notebook``) into sessions (``sessions``),
recording a live session (``recorder``, an IPython extension), the trajectory records and the dataset
folder's files (``trajectory``), replay agreement (``agreement``), the sample rule (``samples``) and a
dataset's figures (``stats``). Nothing here runs a kernel: replaying sessions is :mod:`themisto_env.replay`.
Names are re-exported lazily: importing this package imports none of its modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from themisto_env._lazy import lazy_exports

if TYPE_CHECKING:
    from themisto_env.data.agreement import Agreement, AgreementKind, agreement
    from themisto_env.data.june import read_sessions
    from themisto_env.data.june_events import JuneEvent
    from themisto_env.data.june_files import read_events, write_events
    from themisto_env.data.notebook import read_notebook_session
    from themisto_env.data.recorder import Recorder
    from themisto_env.data.samples import (
        TASKS,
        Sample,
        SampleRule,
        TaskName,
        episode_starts,
        make_samples,
        samples_by_trajectory,
    )
    from themisto_env.data.sessions import RecordedExecution, Session
    from themisto_env.data.splits import SplitRule
    from themisto_env.data.stats import dataset_info
    from themisto_env.data.trajectory import Manifest, Step, Trajectory, iter_trajectories, read_trajectories

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "themisto_env.data.agreement": ("Agreement", "AgreementKind", "agreement"),
        "themisto_env.data.june": ("read_sessions",),
        "themisto_env.data.june_events": ("JuneEvent",),
        "themisto_env.data.june_files": ("read_events", "write_events"),
        "themisto_env.data.notebook": ("read_notebook_session",),
        "themisto_env.data.recorder": ("Recorder",),
        "themisto_env.data.samples": (
            "TASKS",
            "Sample",
            "SampleRule",
            "TaskName",
            "episode_starts",
            "make_samples",
            "samples_by_trajectory",
        ),
        "themisto_env.data.sessions": ("RecordedExecution", "Session"),
        "themisto_env.data.splits": ("SplitRule",),
        "themisto_env.data.stats": ("dataset_info",),
        "themisto_env.data.trajectory": ("Manifest", "Step", "Trajectory", "iter_trajectories", "read_trajectories"),
    },
)

__all__ = [
    "TASKS",
    "Agreement",
    "AgreementKind",
    "JuneEvent",
    "Manifest",
    "RecordedExecution",
    "Recorder",
    "Sample",
    "SampleRule",
    "Session",
    "SplitRule",
    "Step",
    "TaskName",
    "Trajectory",
    "agreement",
    "dataset_info",
    "episode_starts",
    "iter_trajectories",
    "make_samples",
    "read_events",
    "read_notebook_session",
    "read_sessions",
    "read_trajectories",
    "samples_by_trajectory",
    "write_events",
]
