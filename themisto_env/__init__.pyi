"""The public names of [`themisto_env`][themisto_env], a line each (``__init__.py`` imports each on first use)."""

from ._version import __version__ as __version__
from .bridges.vf_taskset import ThemistoHarness as ThemistoHarness
from .bridges.vf_taskset import ThemistoTaskset as ThemistoTaskset
from .errors import ConfigError as ConfigError
from .errors import DataError as DataError
from .errors import InfrastructureError as InfrastructureError
from .errors import ThemistoError as ThemistoError
