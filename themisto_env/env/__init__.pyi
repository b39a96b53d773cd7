"""The public names of [`themisto_env.env`][themisto_env.env], a line each (``__init__.py`` imports each on first
use)."""

from .actions import Action as Action
from .actions import Prediction as Prediction
from .config import EnvConfig as EnvConfig
from .core import ThemistoEnv as ThemistoEnv
from .episode import Episode as Episode
from .record import EpisodeRecord as EpisodeRecord
