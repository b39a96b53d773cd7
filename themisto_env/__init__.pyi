"""The public names of [`themisto_env`][themisto_env], a line each (``__init__.py`` imports each on first use)."""

from ._version import __version__ as __version__
from .bridges.vf_taskset import ThemistoHarness as ThemistoHarness
from .bridges.vf_taskset import ThemistoTaskset as ThemistoTaskset
from .data.samples import Sample as Sample
from .data.samples import SampleRule as SampleRule
from .data.trajectory import Trajectory as Trajectory
from .env.actions import Prediction as Prediction
from .env.config import EnvConfig as EnvConfig
from .env.core import ThemistoEnv as ThemistoEnv
from .env.tools import ToolCall as ToolCall
from .errors import ActionError as ActionError
from .errors import BackendUnavailableError as BackendUnavailableError
from .errors import ConfigError as ConfigError
from .errors import DataError as DataError
from .errors import InfrastructureError as InfrastructureError
from .errors import KernelDiedError as KernelDiedError
from .errors import KernelStartError as KernelStartError
from .errors import KernelTimeoutError as KernelTimeoutError
from .errors import ProviderError as ProviderError
from .errors import SnapshotError as SnapshotError
from .errors import ThemistoError as ThemistoError
from .replay.dataset import Dataset as Dataset
