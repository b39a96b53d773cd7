"""The typed messages of the OpenEnv server: an action in, an observation and a state out.

They are OpenEnv's pydantic models (``openenv.core.env_server.types``), so the server's ``/schema`` lists
them and a client in any language can build them from that schema:

* [`ThemistoAction`][themisto_env.bridges.openenv.ThemistoAction]: ``{"kind": "tool", "tool": NAME, "args": {...}}``
calls an observation tool,
  ``{"kind": "predict", "text": "..."}`` submits a prediction. The two are never guessed from text; a
  message that mixes them (a prediction with a tool, a tool call without one) is refused at the boundary
  (HTTP 422, a WebSocket ``VALIDATION_ERROR``). An unknown tool name or bad arguments are the env's to
  answer, as in process: in ``tool_result``, at the cost of a tool call.
* [`ThemistoObservation`][themisto_env.bridges.openenv.ThemistoObservation]: the gym env's observation (``history``,
``cell``, ``runtime``,
  ``tool_result``, ``tools_left``), the step's ``reward`` and ``done``, and ``info`` (the gym env's
  `StepInfo`: the current and the scored sample's ids, scores, flags).
* [`ThemistoState`][themisto_env.bridges.openenv.ThemistoState]: where the session's episode is (``GET /state``, the
client's ``state()``).
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from themisto_env.env.actions import Prediction
from themisto_env.env.tools import ToolCall

__all__ = ["ThemistoAction", "ThemistoObservation", "ThemistoState"]


class ThemistoAction(Action):
    """One move of the agent: a tool call or a prediction.

    Attributes:
        kind: ``tool`` (call ``tool`` with ``args``) or ``predict`` (submit ``text``).
        tool: The tool's name (``info["tool_names"]`` lists those offered); only with ``kind="tool"``.
        args: The tool's arguments by name; only with ``kind="tool"``.
        text: The predicted cell source or output; only with ``kind="predict"``.
    """

    kind: Literal["tool", "predict"]
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    text: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ThemistoAction:
        # PydanticCustomError, not ValueError: OpenEnv puts the errors in JSON (a ValueError in them would
        # not serialize, and the server would answer 500 or drop the session)
        if self.kind == "tool" and self.tool is None:
            raise PydanticCustomError("action_kind", "a tool call (kind 'tool') names its 'tool'")
        if self.kind == "tool" and self.text is not None:
            raise PydanticCustomError(
                "action_kind", "a tool call (kind 'tool') has no 'text': send kind 'predict' to submit a prediction"
            )
        if self.kind == "predict" and self.text is None:
            raise PydanticCustomError("action_kind", "a prediction (kind 'predict') needs 'text'")
        if self.kind == "predict" and (self.tool is not None or self.args):
            raise PydanticCustomError("action_kind", "a prediction (kind 'predict') has no 'tool' or 'args'")
        return self

    @classmethod
    def predict(cls, text: str) -> ThemistoAction:
        """Submit ``text`` as the prediction of the current sample."""
        return cls(kind="predict", text=text)

    @classmethod
    def call(cls, tool: str, **args: Any) -> ThemistoAction:
        """Call the observation tool ``tool`` with ``args``."""
        return cls(kind="tool", tool=tool, args=args)

    def env_action(self) -> ToolCall | Prediction:
        """The gym env's action for this one (what `ThemistoEnv.step` takes in process)."""
        if self.kind == "predict":
            assert self.text is not None
            return Prediction(text=self.text)
        assert self.tool is not None
        return ToolCall(tool=self.tool, args=dict(self.args))


class ThemistoObservation(Observation):
    """What the agent sees after ``reset`` or a step (``reward`` and ``done`` are OpenEnv's own fields).

    Attributes:
        history: Recent executions with their outputs.
        cell: The cell about to run (output task), else empty.
        runtime: The dump of the runtime state (``full`` mode), else empty.
        tool_result: The last tool's answer, or why an action was malformed.
        tools_left: Tool calls left for the current sample.
        info: The gym env's ``info`` (`StepInfo` as a dict): ``sample_id``,
            ``tool_names``, ``samples_left``; on the step that scores a sample ``scored_sample_id``,
            ``scores``, ``reward``, ``forced_submission``, ``infrastructure_error``, ``state_mismatch``, ...
    """

    history: str = ""
    cell: str = ""
    runtime: str = ""
    tool_result: str = ""
    tools_left: int = 0
    info: dict[str, Any] = Field(default_factory=dict)


class ThemistoState(State):
    """Where a session's episode is (``episode_id`` and ``step_count`` are OpenEnv's own fields).

    Attributes:
        task: ``next-cell`` or ``output``.
        observation_mode: ``static``, ``full`` or ``tools``.
        trajectory_id: The episode's trajectory (None before the first reset).
        sample_id: The sample now being predicted.
        samples_left: Samples of the episode not scored yet, the current one included.
        scored: Samples scored in this episode.
        total_reward: The sum of the episode's step rewards.
        done: The episode is over (reset to start another).
    """

    task: str = "next-cell"
    observation_mode: str = "tools"
    trajectory_id: str | None = None
    sample_id: str | None = None
    samples_left: int = 0
    scored: int = 0
    total_reward: float = 0.0
    done: bool = False
