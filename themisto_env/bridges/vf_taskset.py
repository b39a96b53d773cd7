"""The verifiers 0.4 (``verifiers.v1``) side of `themisto_env.bridges.vf_env`: a taskset, its tool server,
its task and the harness that plays it. Imported only through `vf_env`, whose
module id ``vf-eval`` takes (``vf-eval themisto_env.bridges.vf_env``): importing this module imports verifiers.

How a rollout runs (verifiers' own machinery): the harness, verifiers' chat program, talks to the model
through verifiers' interception server and calls the tools of `ThemistoTools`, one MCP server
for the whole evaluation (a process of its own, ``python -m themisto_env.bridges.vf_taskset``), where each
rollout is a [`ThemistoToolEnv`][themisto_env.bridges.rl.ThemistoToolEnv] over shared kernel states,
exactly as in TRL. After each call the server writes the rollout's
[`get_reward`][themisto_env.bridges.rl.ThemistoToolEnv.get_reward] into the rollout's state, which
verifiers carries back to `ThemistoTask`'s reward. A rollout that called no tool at all is scored
here the same way (a rollout over the same states, nothing submitted).

The MCP server builds each tool's schema from its function's signature: `tool_function` makes those from
the tool table (types, defaults and descriptions as objects, never strings).
"""

import asyncio
import hashlib
import json
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, Literal

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.errors import SandboxError
from verifiers.v1.harnesses.null import NullHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE, launch_chat_program

from themisto_env.bridges.rl.tool_env import (
    ROLLOUT_TOOLS,
    SUBMIT_INSTRUCTION,
    SharedStates,
    ThemistoToolEnv,
    tool_dataset,
)
from themisto_env.env.tools import tool_function

__all__ = [
    "ThemistoData",
    "ThemistoHarness",
    "ThemistoState",
    "ThemistoTask",
    "ThemistoTaskset",
    "ThemistoTasksetConfig",
    "ThemistoTools",
    "ThemistoToolsConfig",
]

#: Rollouts the tool server keeps (the oldest are dropped: a rollout is done long before).
MAX_ROLLOUTS = 4096


class ThemistoTasksetConfig(vf.TasksetConfig):
    """The taskset's options (``--env.taskset.*`` on the ``vf-eval`` command line).

    Attributes:
        themisto_task: ``next-cell`` or ``output`` (``task`` is verifiers' own field: each task's config).
        limit: Use this many samples, spread over the trajectories (None: all).
        share: The rollouts of a sample share one kernel (False: one per rollout).
        options: [`EnvConfig`][themisto_env.env.EnvConfig] options as JSON values (``dataset`` a folder,
            ``backend``, ``tool_budget``, ``tool_cost``, ``history_length``, ``execution_score``, ``split``...).
    """

    themisto_task: Literal["next-cell", "output"] = "next-cell"
    limit: int | None = None
    share: bool = True
    options: dict[str, Any] = Field(default_factory=dict)

    def state_options(self) -> dict[str, Any]:
        """The [`SharedStates`][themisto_env.bridges.rl.SharedStates] arguments these options make."""
        return {"task": self.themisto_task, "share": self.share, **self.options}


class ThemistoToolsConfig(vf.SharedToolsetConfig):
    """The tool server's options: the states it serves (`ThemistoTasksetConfig.state_options`)."""

    states: dict[str, Any] = Field(default_factory=dict)


class ThemistoState(vf.State):
    """A rollout's state, shared by verifiers between the host and the tool server.

    Attributes:
        rollout: The rollout's id (its trace id): which [`ThemistoToolEnv`][themisto_env.bridges.rl.ThemistoToolEnv] of
            the server is its own.
        sample_id: The sample the rollout predicts.
        scored: The server has scored the rollout (after its first tool call).
        reward: ``get_reward()`` after the rollout's last call (None: the env cannot trust the rollout).
        untrusted: An infrastructure failure or a state mismatch touched the rollout.
        why: What made it untrusted (the rollout's faults and state mismatches), empty when trusted.
    """

    rollout: str = ""
    sample_id: str = ""
    scored: bool = False
    reward: float | None = None
    untrusted: bool = False
    why: str = ""


class ThemistoData(vf.TaskData):
    """A task's data: the prompt (the history and the tool invitation; no target) and the sample id."""

    sample_id: str


class ThemistoTask(vf.Task[ThemistoData, ThemistoState]):
    """One sample: its rollouts' state names it; its reward is the env's one score of the rollout."""

    def __init__(self, data: ThemistoData, config: Any = None, states: dict[str, Any] | None = None) -> None:
        super().__init__(data, config)
        self.states = states or {}  # the options of the states it is scored under (SharedStates arguments)

    async def setup(self, trace: vf.Trace, runtime: Any) -> None:
        trace.state.rollout = trace.id
        trace.state.sample_id = self.data.sample_id

    @vf.reward
    async def themisto_reward(self, trace: vf.Trace) -> float:
        """The env's one score of the rollout's last submission.

        Raises:
            SandboxError: The rollout cannot be trusted (an infrastructure fault, a served state that differs
                from the recording): verifiers records the error on the trace and gives it no reward, so that
                the machinery's failure is never scored as the model's.
        """
        state = await self._scored(trace)
        if state.reward is None:
            raise SandboxError(f"infrastructure fault, the rollout is not scored: {state.why or 'untrusted'}")
        return float(state.reward)

    @vf.metric
    async def untrusted(self, trace: vf.Trace) -> float:
        """1 when an infrastructure failure or a state mismatch touched the rollout (its reward is 0)."""
        state = await self._scored(trace)
        return 1.0 if state.untrusted else 0.0

    async def _scored(self, trace: vf.Trace) -> ThemistoState:
        state = trace.state
        if not state.scored:  # no tool call reached the server: score it here, as the server would have
            rollout = await asyncio.to_thread(_host_rollout, self.states, state.sample_id or self.data.sample_id)
            reward = await asyncio.to_thread(rollout.get_reward)
            state.reward, state.untrusted, state.scored = reward, bool(rollout.untrusted), True
            state.why = "; ".join(rollout.untrusted)
        return state


class ThemistoTools(vf.Toolset[ThemistoToolsConfig, ThemistoState]):
    """The rollout's tools (`ROLLOUT_TOOLS`: the observation tools and ``submit``, made from the tool table,
    so their names, arguments and descriptions are the table's), each call on the calling rollout's own
    `ThemistoToolEnv`."""

    TOOL_PREFIX = None  # the tools keep their own names (the table's)

    async def setup(self) -> None:
        # verifiers points TMPDIR at the runtime's folder, deep under ~/.cache: the sandbox puts the kernels'
        # IPC sockets in a short folder of its own then (themisto_env.sandbox.lifetime.run_root)
        self._states = SharedStates(**self.config.states)
        self._rollouts: OrderedDict[str, ThemistoToolEnv] = OrderedDict()
        self._lock = threading.Lock()

    def register(self, mcp: Any) -> None:
        """Add each tool of `ROLLOUT_TOOLS` to the MCP server (in place of verifiers' ``@vf.tool`` methods): a
        function whose signature (types, defaults, `Annotated` descriptions) and description are the table's."""
        for tool in ROLLOUT_TOOLS:
            mcp.add_tool(
                self._with_state(tool_function(tool, self._call)), name=tool.name, description=tool.description
            )

    async def _call(self, tool: str, args: dict[str, Any]) -> str:
        """Call ``tool`` on the calling rollout's env, then write its reward into the rollout's state."""
        state = self.state
        answer, reward, why = await asyncio.to_thread(self._run, state.rollout, state.sample_id, tool, args)
        state.scored, state.reward, state.untrusted, state.why = True, reward, bool(why), why
        return answer

    def _run(self, rollout_id: str, sample_id: str, tool: str, args: dict[str, Any]) -> tuple[str, float | None, str]:
        """The tool's answer on the rollout's env, the rollout's reward after it, and what makes the rollout
        untrusted (empty: trusted)."""
        with self._lock:
            rollout = self._rollouts.get(rollout_id)
            if rollout is None:
                rollout = ThemistoToolEnv(self._states)
                rollout.reset(sample_id=sample_id)
                self._rollouts[rollout_id] = rollout
                while len(self._rollouts) > MAX_ROLLOUTS:
                    self._rollouts.popitem(last=False)
        answer = str(getattr(rollout, tool)(**args))
        reward = rollout.get_reward()
        return answer, reward, "; ".join(rollout.untrusted)


class ThemistoTaskset(vf.Taskset[ThemistoTask, ThemistoTasksetConfig]):
    """The samples of a task as verifiers tasks, their tools served by `ThemistoTools`."""

    def load(self) -> Iterator[ThemistoTask]:
        config = self.config
        for row in tool_dataset(config.themisto_task, limit=config.limit, **config.options):
            prompt = [dict(message) for message in row["prompt"]]
            prompt[-1]["content"] = f"{prompt[-1]['content']}{SUBMIT_INSTRUCTION}"  # as TRL appends reset's
            data = ThemistoData(id=row["sample_id"], name=row["sample_id"], prompt=prompt, sample_id=row["sample_id"])
            yield ThemistoTask(data, config.task, states=config.state_options())

    @classmethod
    def toolsets(cls, config: ThemistoTasksetConfig) -> list[vf.Toolset]:
        return [ThemistoTools(ThemistoToolsConfig(states=config.state_options()))]


class ThemistoHarness(NullHarness):
    """verifiers' tool-calling chat loop (the ``null`` harness's program), run on the host by this Python
    rather than in an environment uv makes first: its packages (openai, mcp, httpx) are verifiers' own
    dependencies, installed here at the locked versions. In a container runtime it is the ``null`` harness."""

    async def setup(self, runtime: Any) -> None:
        if runtime.type != "subprocess":
            await super().setup(runtime)

    async def launch(
        self,
        ctx: Any,
        trace: vf.Trace,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        if runtime.type != "subprocess":
            return await super().launch(
                ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=tool_interception_url
            )
        system_prompt, prompt = self.resolve_prompt(data)
        return await launch_chat_program(
            CHAT_PROGRAM_SOURCE,
            self.config,
            ctx,
            trace,
            _ThisPython(runtime),
            endpoint,
            secret,
            mcp_urls,
            system_prompt,
            prompt,
            extra_args=[f"--tool-interception-url={tool_interception_url}"] if tool_interception_url else (),
        )


class _ThisPython:
    """A host runtime whose PEP 723 scripts run on this Python (verifiers' packages) instead of a uv env."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(self, script: str | bytes, env: dict[str, str] | None = None, **_: Any) -> list[str]:
        data = script.encode() if isinstance(script, str) else script
        path = f"vf-program-{hashlib.sha256(data).hexdigest()[:16]}.py"
        await self._runtime.write(path, data)
        return [sys.executable, str(self._runtime.workdir / path)]


_HOST_STATES: dict[str, SharedStates] = {}
_HOST_LOCK = threading.Lock()


def _host_rollout(options: dict[str, Any], sample_id: str) -> ThemistoToolEnv:
    """A rollout of ``sample_id`` over this process's states for ``options`` (made on first use)."""
    key = json.dumps(options, sort_keys=True, default=str)
    with _HOST_LOCK:
        states = _HOST_STATES.get(key)
        if states is None:
            states = _HOST_STATES[key] = SharedStates(**options)
    rollout = ThemistoToolEnv(states)
    rollout.reset(sample_id=sample_id)
    return rollout


if __name__ == "__main__":  # verifiers starts the tool server as `python -m themisto_env.bridges.vf_taskset`
    ThemistoTools.run()
