"""One MCP session's episode: the env's [`Episode`][themisto_env.env.Episode] stepped by MCP tool calls.

No turn loop of its own: an observation tool is ``episode.step(ToolCall(...))``, ``submit`` is
``episode.step(Prediction(...))``, ``start_sample`` is ``episode.reset(...)``; so a session is paid exactly
what the gym env pays for the same actions. Every call here blocks (the kernel's I/O): the server runs them
on worker threads, one at a time per session. Each answer is an `Answer`: the text the model reads and the
structured data beside it; an error the model should read is an answer with ``error`` set, while a
machinery fault raises [`InfrastructureError`][themisto_env.errors.InfrastructureError] (never an answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from themisto_env.agents.prompting import PromptTemplates, load_prompts
from themisto_env.bridges.mcp.tools import START, StartArgs
from themisto_env.data.limits import echo
from themisto_env.env.actions import Prediction
from themisto_env.env.episode import Episode
from themisto_env.env.tools import SUBMIT, ToolCall
from themisto_env.errors import ConfigError, InfrastructureError, ThemistoError

__all__ = ["Answer", "EpisodeSession", "fault_message"]


@dataclass(frozen=True)
class Answer:
    """What a tool call answers: ``text`` for the model, ``data`` (JSON-able) beside it, ``error`` when the
    model made a mistake it should read (unknown tool, bad arguments, budget spent, no sample started)."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)
    error: bool = False


def fault_message(exc: BaseException) -> str:
    """The protocol error's message for a machinery fault: it says it is one, and that it is not the
    model's answer."""
    return f"infrastructure fault (not a tool's answer; retry or start another sample): {type(exc).__name__}: {exc}"


class EpisodeSession:
    """A session's episode over ``options`` (the server's env options, `EnvConfig`'s; ``dataset`` may be
    an open dataset shared by the sessions). The episode (and its kernel) is made at the first start.

    Args:
        options: The env's options.
        prompts: The prompt templates the sample's prompt is worded with (default: the bundled ones).
    """

    def __init__(self, options: Mapping[str, Any], *, prompts: PromptTemplates | None = None) -> None:
        self.options = dict(options)
        self.prompts = prompts or load_prompts()
        self.episode: Episode | None = None
        self.done = True  # no sample waits for a prediction
        self.closed = False
        self._observation: dict[str, Any] | None = None
        self._info: dict[str, Any] = {}

    # -- the calls -------------------------------------------------------------------------------------

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> Answer:
        """Answer one MCP tool call by name (the episode's tools, else an observation tool's step).

        Raises:
            InfrastructureError: The machinery failed (a kernel died, the backend is gone).
        """
        if self.closed:
            return Answer("Error: the session is closed: reconnect.", error=True)
        args = dict(arguments or {})
        try:
            if name == START:
                return self.start(**StartArgs.model_validate(args).model_dump())
            if name == SUBMIT.name:
                return self.predict(SUBMIT.args_model.model_validate(args).prediction)  # type: ignore[attr-defined]
            return self.tool(name, args)
        except ValidationError as exc:
            return _error(f"invalid arguments for {name}: {format_validation_error(exc)}")
        except InfrastructureError:
            raise
        except ThemistoError as exc:  # a bad option of the model's: a sample id, a split's other side
            return _error(" ".join(str(exc).split()))

    def start(self, sample_id: str | None = None, trajectory: str | None = None) -> Answer:
        """Start a sample (see `StartArgs`) and answer its prompt."""
        episode = self._episode()
        if sample_id is not None and trajectory is not None:
            return _error("give sample_id or trajectory, not both")
        if sample_id is not None:
            tid, index = episode.dataset.episode_position(sample_id, episode.config.sample_rule)
            if sample_id not in {sample.id for sample in episode.episode_samples.get(tid, ())}:
                raise ConfigError(f"no {episode.config.task} sample {echo(sample_id)} is served here")
            options: dict[str, Any] = {"trajectory": tid, "sample": index}
        elif trajectory is not None:
            options = {"trajectory": trajectory, "sample": 0}
        else:
            options = self._next_position(episode)
        obs, info = episode.reset(options)
        self._observation, self._info, self.done = obs, info, False
        return Answer(self.prompt_text(), self._sample_data())

    def tool(self, name: str, args: dict[str, Any]) -> Answer:
        """One observation tool's step (an unknown name too: the env answers it, nearest name suggested)."""
        episode = self._started()
        obs, reward, _, _, info = episode.step(ToolCall(tool=name, args=args))
        self._observation, self._info = obs, info
        if "infrastructure_error" in info:
            raise InfrastructureError(str(info["infrastructure_error"]))
        extra = {"reward": float(reward), "tools_left": obs["tools_left"]}
        result = info.get("tool_result")
        if result is not None:
            data = {**result, **extra}
            return Answer(str(result["text"]), data, error=not result["ok"])
        text = str(obs["tool_result"]) or str(info.get("action_error", "the call was refused"))
        refused = bool(info.get("tool_refused"))
        return Answer(text, {"tool": name, "ok": False, "text": text, "error": text, "refused": refused, **extra}, True)

    def predict(self, text: str) -> Answer:
        """Score a prediction of the current sample (the episode then moves on)."""
        episode = self._started()
        obs, reward, terminated, truncated, info = episode.step(Prediction(text=text))
        self._observation, self._info = obs, info
        if "scored_sample_id" not in info:
            message = str(info.get("action_error") or obs["tool_result"] or "the prediction was not taken")
            return _error(message)
        self.done = bool(terminated or truncated)
        scores = {key: info.get(key) for key in ("scores", "metric_reward", "execution_score", "reward")}
        data = {
            "reward": float(reward),
            "sample_reward": info.get("reward"),
            "scored_sample_id": info["scored_sample_id"],
            "scores": info.get("scores", {}),
            "tools_used": info.get("tools_used"),
            "tool_cost": info.get("tool_cost"),
            "infrastructure_error": info.get("infrastructure_error"),
            "done": self.done,
            "next": None if self.done else self._sample_data(),
        }
        metrics = ", ".join(f"{key} {value:.3f}" for key, value in (scores["scores"] or {}).items())
        text_out = f"Scored {info['scored_sample_id']}: reward {float(reward):.4f} ({metrics})."
        if self.done:
            text_out += f" The trajectory is done: call {START} for another sample."
        else:
            text_out += f" Next sample {info['sample_id']}:\n\n{self.prompt_text()}"
        return Answer(text_out, data)

    # -- what the model reads ---------------------------------------------------------------------------

    def prompt_text(self) -> str:
        """The current sample's prompt, worded as our LLM agents word it (system text, then the user text);
        empty before a start."""
        episode, obs = self.episode, self._observation
        if episode is None or obs is None:
            return ""
        config = episode.config
        mode = "static" if config.observation == "tools" and config.tool_budget == 0 else config.observation
        system = self.prompts.system_text(config.task)
        user = self.prompts.user_text({**obs, "tool_result": ""}, config.task, mode)  # type: ignore[arg-type]
        return f"{system}\n\n{user}"

    def close(self) -> None:
        """Close the episode and its kernels (idempotent)."""
        self.closed = True
        episode, self.episode = self.episode, None
        if episode is not None:
            episode.close()

    # -- inside ------------------------------------------------------------------------------------------

    def _episode(self) -> Episode:
        if self.episode is None:
            self.episode = Episode.open(**self.options)
        return self.episode

    def _started(self) -> Episode:
        if self.episode is None or self._observation is None:
            raise ConfigError(f"no sample started: call {START} first")
        if self.done:
            raise ConfigError(f"the trajectory is done: call {START} for another sample")
        return self.episode

    def _next_position(self, episode: Episode) -> dict[str, Any]:
        """The next sample of the served dataset in its order, after the current one (the first at first)."""
        order = [sample.id for sample in episode.samples]
        current = episode.current_sample
        index = order.index(current.id) + 1 if current is not None and current.id in order else 0
        if index >= len(order):
            raise ConfigError(f"no samples left after {current.id if current else '?'}: start one by sample_id")
        tid, position = episode.dataset.episode_position(order[index], episode.config.sample_rule)
        return {"trajectory": tid, "sample": position}

    def _sample_data(self) -> dict[str, Any]:
        info, obs = self._info, self._observation or {}
        keys = ("sample_id", "trajectory_id", "step", "task", "observation_mode", "samples_left", "tool_names")
        return {**{key: info.get(key) for key in keys}, "tools_left": obs.get("tools_left"), "observation": obs}


def format_validation_error(exc: ValidationError) -> str:
    """A validation error of an episode tool's arguments as one line naming each field."""
    problems = [f"{'.'.join(map(str, error['loc'])) or 'arguments'}: {error['msg']}" for error in exc.errors()]
    return "; ".join(problems[:5])


def _error(message: str) -> Answer:
    text = f"Error: {message}"
    return Answer(text, {"ok": False, "text": text, "error": message}, error=True)
