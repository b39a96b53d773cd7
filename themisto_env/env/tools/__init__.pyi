"""The public names of `themisto_env.env.tools`, a line each (``__init__.py`` imports each on first use)."""

from ._functions import tool_function as tool_function
from ._functions import tool_method as tool_method
from ._langchain import langchain_tools as langchain_tools
from ._models import HistoryItem as HistoryItem
from ._models import ObservationTool as ObservationTool
from ._models import ToolCall as ToolCall
from ._models import ToolContext as ToolContext
from ._models import ToolResult as ToolResult
from ._models import ToolSpec as ToolSpec
from ._observations import SUBMIT as SUBMIT
from ._observations import TOOL_NAMES as TOOL_NAMES
from ._observations import TOOLS as TOOLS
from ._observations import TRY_CELL as TRY_CELL
from ._observations import task_tools as task_tools
from ._run import run_tool as run_tool
