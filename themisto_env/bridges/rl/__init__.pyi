"""The public names of [`themisto_env.bridges.rl`][themisto_env.bridges.rl], a line each (``__init__.py`` imports each
on first use)."""

from .export import export_dataset as export_dataset
from .rewards import ExecutionReward as ExecutionReward
from .rewards import MetricReward as MetricReward
from .tool_env import SharedStates as SharedStates
from .tool_env import ThemistoToolEnv as ThemistoToolEnv
from .tool_env import tool_dataset as tool_dataset
