"""The public names of [`themisto_env.data`][themisto_env.data], a line each (``__init__.py`` imports each on first
use)."""

from .agreement import agreement as agreement
from .june import read_sessions as read_sessions
from .recorder import Recorder as Recorder
from .samples import Sample as Sample
from .samples import SampleRule as SampleRule
from .samples import make_samples as make_samples
from .sessions import Session as Session
from .splits import SplitRule as SplitRule
from .trajectory import Step as Step
from .trajectory import Trajectory as Trajectory
from .trajectory import read_trajectories as read_trajectories
