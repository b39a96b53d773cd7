"""The public names of [`themisto_env.data`][themisto_env.data], a line each (``__init__.py`` imports each on first
use)."""

from .agreement import Agreement as Agreement
from .agreement import AgreementKind as AgreementKind
from .agreement import agreement as agreement
from .june import read_sessions as read_sessions
from .june_events import JuneEvent as JuneEvent
from .june_files import read_events as read_events
from .june_files import write_events as write_events
from .notebook import read_notebook_session as read_notebook_session
from .recorder import Recorder as Recorder
from .samples import TASKS as TASKS
from .samples import Sample as Sample
from .samples import SampleRule as SampleRule
from .samples import TaskName as TaskName
from .samples import episode_starts as episode_starts
from .samples import make_samples as make_samples
from .samples import samples_by_trajectory as samples_by_trajectory
from .sessions import RecordedExecution as RecordedExecution
from .sessions import Session as Session
from .splits import SplitRule as SplitRule
from .stats import dataset_info as dataset_info
from .trajectory import Manifest as Manifest
from .trajectory import Step as Step
from .trajectory import Trajectory as Trajectory
from .trajectory import iter_trajectories as iter_trajectories
from .trajectory import read_trajectories as read_trajectories
