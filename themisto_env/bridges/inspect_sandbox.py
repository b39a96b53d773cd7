"""The ``themisto`` sandbox of inspect_ai: a sample's sandbox is the env's episode serving that sample's state.

Under the ``themisto`` type a sample's sandbox is an [`Episode`][themisto_env.env.Episode] reset to the
sample and configured by a `SandboxConfig`.
[`ThemistoSandbox.call_tool`][themisto_env.bridges.ThemistoSandbox.call_tool] runs one observation tool as
the episode's tool step; ``exec`` of ``python`` runs code as ``try_cell`` does (next-cell task only); the
sandbox has no files. A state that cannot be served fails the sample's setup with
[`InfrastructureError`][themisto_env.errors.InfrastructureError], so inspect reports an error, never a wrong
answer. inspect_ai is needed here; ``import themisto_env`` never imports this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal, overload

import anyio
from inspect_ai.util import (
    ExecResult,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from pydantic import ConfigDict

from themisto_env.env.config import EnvConfig
from themisto_env.env.episode import Episode
from themisto_env.env.info import StepInfo
from themisto_env.env.tools import TRY_CELL, ToolCall
from themisto_env.errors import ConfigError, InfrastructureError
from themisto_env.scoring.score import SampleScore

#: The sandbox type's name (``sandbox="themisto"``, ``--sandbox themisto``).
SANDBOX_TYPE = "themisto"
_PYTHONS = frozenset({"python", "python3"})
#: Episodes made and not yet closed, by task (closed at the task's end if a cancelled setup lost one).
_OPEN_EPISODES: dict[str, set[Episode]] = {}


@dataclass(frozen=True)
class ToolAnswer:
    """What one observation tool call answered (``ok=False``: an error the model should read)."""

    tool: str
    ok: bool
    text: str


class SandboxConfig(EnvConfig):
    """The ``themisto`` sandbox's config: the env's options ([`EnvConfig`][themisto_env.env.EnvConfig], whose
    fields and defaults it has), frozen and hashable because inspect hashes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def __hash__(self) -> int:  # a value may not hash (a list in the launcher options): hash the JSON form
        return hash(self.model_dump_json())

    def env_config(self) -> EnvConfig:
        """The env's options."""
        return EnvConfig(**self.model_dump())


def env_config(config: SandboxEnvironmentConfigType | None) -> EnvConfig:
    """The env options a sandbox config stands for (None: the defaults)."""
    if config is None:
        return EnvConfig()
    if isinstance(config, SandboxConfig):
        return config.env_config()
    raise ConfigError(f"the themisto sandbox takes a SandboxConfig as its config, got {type(config).__name__}")


def _serve(
    task_name: str, config: EnvConfig, trajectory_id: str, index: int, sample_id: str
) -> tuple[Episode, dict[str, Any], dict[str, Any]]:
    """A new episode reset to one sample, with the reset's observation and info (blocking: run in a thread)."""
    episode = Episode.open(**config.model_dump())
    _OPEN_EPISODES.setdefault(task_name, set()).add(episode)
    try:
        observation, info = episode.reset({"trajectory": trajectory_id, "sample": index})
        served = episode.current_sample
        if served is None or served.id != sample_id:
            raise ConfigError(f"sample {index} of trajectory {trajectory_id} is not {sample_id}; the dataset changed")
        report = episode.state_report
        if report is not None and report.route == "failed":
            raise InfrastructureError(f"the state of {sample_id} could not be served: {'; '.join(report.faults)}")
    except BaseException:
        _close(episode)
        raise
    return episode, observation, info


def _close(episode: Episode) -> None:
    for episodes in _OPEN_EPISODES.values():
        episodes.discard(episode)
    episode.close()


@sandboxenv(name=SANDBOX_TYPE)
class ThemistoSandbox(SandboxEnvironment):
    """One sample's episode, its kernel in the sample's state.

    What inspect can ask of it: `call_tool` (one observation tool, counted against the sample's budget; once
    the budget is spent the call is refused and answered with an error); ``exec(["python", "-c", CODE])`` or
    ``exec(["python"], input=CODE)`` (CODE runs as ``try_cell`` runs it, in a disposable copy of the kernel,
    counted against the same budget; next-cell task only, since in the output task it would reveal the output;
    any other command is a failed result with exit 127, and another ``user`` raises
    ``SandboxUserUnsupportedError``); ``read_file``/``write_file`` (``PermissionError``: no files).

    Attributes:
        episode: The episode, reset to the sample (its ``config``, ``state_report``, ``scorer``, ``record``).
        observation: The sample's last observation.
        tools_left: Tool calls the sample may still make.
        tool_names: The tools this task offers (``try_cell`` in the next-cell task only).
        infrastructure_errors: Machinery failures during tool calls (recovered from by the state server).
    """

    def __init__(self, episode: Episode, observation: dict[str, Any], info: dict[str, Any]) -> None:
        super().__init__()
        self.episode = episode
        self.observation = observation
        self.tools_left = int(observation["tools_left"])
        self.tool_names: tuple[str, ...] = StepInfo.model_validate(info).tool_names
        self.infrastructure_errors: list[str] = []
        self._scored: tuple[str, SampleScore] | None = None  # the last prediction scored, and its score
        self._lock = anyio.Lock()  # one step at a time: the kernel's client is not thread-safe

    # -- the lifecycle --------------------------------------------------------------------------------

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> SandboxConfig:
        return SandboxConfig(**config)

    @classmethod
    def default_concurrency(cls) -> int | None:
        return os.cpu_count() or 1  # each sandbox is a kernel

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, Any]
    ) -> dict[str, SandboxEnvironment]:
        options = env_config(config)
        try:
            trajectory_id, index, sample_id = metadata["trajectory_id"], metadata["sample_index"], metadata["sample_id"]
        except KeyError as exc:
            raise ConfigError(f"a themisto sandbox needs the sample's metadata {exc}; use themisto_dataset()") from exc
        where = (str(trajectory_id), int(index), str(sample_id))
        served = await anyio.to_thread.run_sync(_serve, task_name, options, *where)
        return {"default": cls(*served)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            await anyio.to_thread.run_sync(_close, environment.as_type(ThemistoSandbox).episode)

    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool) -> None:
        for episode in list(_OPEN_EPISODES.pop(task_name, ())):  # a setup cancelled while serving leaves it here
            await anyio.to_thread.run_sync(_close, episode)

    # -- the tools ------------------------------------------------------------------------------------

    async def call_tool(self, tool: str, args: dict[str, Any]) -> ToolAnswer:
        """Run one observation tool as the episode's tool step (counted against the budget; refused, with
        nothing run, once it is spent)."""
        async with self._lock:
            obs, _, _, _, info = await anyio.to_thread.run_sync(self.episode.step, ToolCall(tool=tool, args=args))
            self.observation, self.tools_left = obs, int(obs["tools_left"])
        step = StepInfo.model_validate(info)
        if step.infrastructure_error is not None:
            self.infrastructure_errors.append(step.infrastructure_error)
        result = step.tool_result  # None: not run (refused, a bad action, tools off, the machinery failed)
        return ToolAnswer(tool, result is not None and bool(result["ok"]), self.episode.tool_text)

    async def score(self, prediction: str) -> SampleScore:
        """The prediction's [`SampleScore`][themisto_env.scoring.SampleScore], as the episode's prediction step
        would give it (this sample's tool calls, faults and state check; the execution score when on),
        computed once per prediction (the scorers share it)."""
        async with self._lock:
            if self._scored is None or self._scored[0] != prediction:
                scored = await anyio.to_thread.run_sync(self.episode.score_prediction, prediction)
                self._scored = (prediction, scored)
            return self._scored[1]

    # -- the SandboxEnvironment contract --------------------------------------------------------------

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        if user is not None:
            raise SandboxUserUnsupportedError(
                "the themisto sandbox runs Python cells in a kernel, not commands as users"
            )
        code = _python_code(cmd, input)
        if code is None:
            message = (
                f"themisto sandbox: {' '.join(cmd[:1])!r} cannot run here; only `python -c CODE` (or CODE on stdin) "
                "runs, as a cell tried in a copy of the kernel in the sample's state\n"
            )
            return ExecResult(success=False, returncode=127, stdout="", stderr=message)
        answer = await self.call_tool(TRY_CELL.name, {"code": code})
        if answer.ok:
            return ExecResult(success=True, returncode=0, stdout=answer.text, stderr="")
        return ExecResult(success=False, returncode=1, stdout="", stderr=answer.text)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        raise PermissionError(f"the themisto sandbox has no files: cannot write {file}")

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        raise PermissionError(f"the themisto sandbox has no files: cannot read {file}")


def _python_code(cmd: list[str], input: str | bytes | None) -> str | None:
    """The code of ``python -c CODE`` or of ``python`` with the code on stdin; None for anything else."""
    if not cmd or os.path.basename(cmd[0]) not in _PYTHONS:
        return None
    if len(cmd) == 3 and cmd[1] == "-c":
        return cmd[2]
    if len(cmd) in (1, 2) and cmd[1:] in ([], ["-"]) and input is not None:
        return input.decode("utf-8", "replace") if isinstance(input, bytes) else input
    return None


__all__ = ["SANDBOX_TYPE", "SandboxConfig", "ThemistoSandbox", "ToolAnswer", "env_config"]
