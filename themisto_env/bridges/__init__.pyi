"""The public names of [`themisto_env.bridges`][themisto_env.bridges], a line each (``__init__.py`` imports each on
first use)."""

from .inspect_sandbox import ThemistoSandbox as ThemistoSandbox
from .inspect_task import themisto as themisto
