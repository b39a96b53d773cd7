"""The env over the Model Context Protocol (``themisto mcp``; ``/mcp`` on ``themisto serve``).

* `tools`: the tools as MCP lists them, from the env's one tool table, and the episode's own;
* `session`: one MCP session's episode (`EpisodeSession`): the env's `Episode` stepped by tool calls;
* `server`: the SDK's low-level server over the sessions: answers, tool errors, faults, the prompt;
* `transports`: stdio, streamable HTTP (alone, or mounted beside the OpenEnv routes), the token;
* `app`: the episode server ready to run;
* `attach`: attach mode, the read-only tools on a running Jupyter kernel (``--attach CONNECTION_FILE``);
* `inspect_source`: inspect_ai's MCP tool source for ``themisto mcp`` (`inspect_tools`).

The ``mcp`` SDK is imported on first use of a name here.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
