"""The agent's actions: a tool call or a prediction, never guessed from text.

In the gymnasium action space an action is a dict ``{"kind", "tool", "args", "text"}``:

* ``kind`` 0 = call an observation tool: ``tool`` is the index into ``TOOL_NAMES``, ``args`` a JSON
  object of its arguments;
* ``kind`` 1 = submit a prediction: ``text`` is the predicted cell source or output.

Agents may also pass [`ToolCall`][themisto_env.env.tools.ToolCall] or [`Prediction`][themisto_env.env.Prediction]
objects directly. `parse_action` turns either form into one of the two, or raises
[`ActionError`][themisto_env.errors.ActionError] saying what is wrong; the env answers that in the observation rather
than ending the episode.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from themisto_env.data.limits import (
    MAX_ARGS_CHARS,
    MAX_ARGS_DEPTH,
    MAX_NAME_CHARS,
    MAX_PREDICTION_CHARS,
    depth_exceeds,
    echo,
    load_json,
    size_exceeds,
)
from themisto_env.data.samples import TASKS
from themisto_env.env.tools import TOOL_NAMES, ToolCall
from themisto_env.errors import ActionError, ConfigError

if TYPE_CHECKING:
    from themisto_env.data.samples import Sample

TOOL_CALL, PREDICT = 0, 1


class Prediction(BaseModel):
    """Submit a prediction for the current sample."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str


Action = ToolCall | Prediction


def encode_action(action: Action) -> dict[str, Any]:
    """The action-space form of an action."""
    if isinstance(action, Prediction):
        return {"kind": PREDICT, "tool": 0, "args": "", "text": action.text}
    if action.tool not in TOOL_NAMES:
        raise ActionError(f"unknown tool {echo(action.tool)}; tools: {', '.join(TOOL_NAMES)}")
    return {
        "kind": TOOL_CALL,
        "tool": TOOL_NAMES.index(action.tool),
        "args": json.dumps(action.args),
        "text": "",
    }


def parse_action(raw: object) -> Action:
    """Read an action in either form, within the limits (`themisto_env.data.limits`: name, arguments'
    size and depth, prediction length); error messages repeat only a short prefix of
    what was sent.

    Raises:
        ActionError: The action is malformed or outside the limits (the message says how).
    """
    if isinstance(raw, ToolCall):
        return checked_tool_call(raw)
    if isinstance(raw, Prediction):
        return _checked_prediction(raw.text, raw)
    if not isinstance(raw, Mapping):
        raise ActionError(
            "an action is a ToolCall, a Prediction or a dict with 'kind', 'tool', 'args', 'text'; "
            f"got {type(raw).__name__}"
        )
    kind = _index(raw.get("kind"))
    if kind == PREDICT:
        text = raw.get("text")
        if not isinstance(text, str):
            raise ActionError(f"a prediction needs 'text' as a string, got {type(text).__name__}")
        return _checked_prediction(text, None)
    if kind != TOOL_CALL:
        raise ActionError(f"'kind' must be 0 (tool call) or 1 (prediction), got {echo(raw.get('kind'))}")
    tool = _index(raw.get("tool"))
    if tool is None or not 0 <= tool < len(TOOL_NAMES):
        raise ActionError(
            f"'tool' must be an index from 0 to {len(TOOL_NAMES) - 1} ({', '.join(TOOL_NAMES)}), "
            f"got {echo(raw.get('tool'))}"
        )
    name = TOOL_NAMES[tool]
    args_text = raw.get("args") or "{}"
    if isinstance(args_text, (str, bytes)):
        if len(args_text) > MAX_ARGS_CHARS:
            raise ActionError(f"'args' of {name} is {len(args_text)} chars; at most {MAX_ARGS_CHARS} are read")
        try:
            args = load_json(args_text, max_depth=MAX_ARGS_DEPTH)
        except ValueError as exc:
            raise ActionError(f"'args' of {name}: {exc}") from None
    else:
        args = args_text
    if not isinstance(args, dict):
        raise ActionError(f"'args' of {name} must be a JSON object, got {type(args).__name__}")
    return checked_tool_call(ToolCall(tool=name, args=args))


def checked_tool_call(call: ToolCall) -> ToolCall:
    """A tool call within the limits of `themisto_env.data.limits`: a tool name of at most
    ``MAX_NAME_CHARS`` characters, arguments of at most ``MAX_ARGS_CHARS`` nested at most ``MAX_ARGS_DEPTH``.

    Raises:
        ActionError: Outside a limit (the message repeats only a prefix of the name).
    """
    if not isinstance(call.tool, str) or len(call.tool) > MAX_NAME_CHARS:
        raise ActionError(f"unknown tool {echo(call.tool)}; tools: {', '.join(TOOL_NAMES)}")
    if not isinstance(call.args, dict):
        raise ActionError(f"'args' of {echo(call.tool)} must be a JSON object, got {type(call.args).__name__}")
    if depth_exceeds(call.args, MAX_ARGS_DEPTH):
        raise ActionError(f"'args' of {echo(call.tool)} nest deeper than {MAX_ARGS_DEPTH} levels")
    if size_exceeds(call.args, MAX_ARGS_CHARS):
        raise ActionError(f"'args' of {echo(call.tool)} hold more than {MAX_ARGS_CHARS} chars")
    for key in call.args:
        if not isinstance(key, str) or len(key) > MAX_NAME_CHARS:
            raise ActionError(f"{echo(key)} is not an argument of {echo(call.tool)}")
    return call


def _checked_prediction(text: str, given: Prediction | None) -> Prediction:
    if len(text) > MAX_PREDICTION_CHARS:
        raise ActionError(f"a prediction of {len(text)} chars; at most {MAX_PREDICTION_CHARS} are scored")
    return given if given is not None else Prediction(text=text)


def _index(value: object) -> int | None:
    """An integral index from an action field (an int, a bool, a whole float, a numpy scalar, a digit
    string); None for anything else (infinities, NaN, fractions, other types)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (str, bytes)) and len(value) > 20:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(number) or not number.is_integer():
        return None
    return int(number)


RESET_OPTIONS = ("trajectory", "sample")
"""The options ``reset`` reads."""


def reset_options(
    options: Mapping[str, Any] | None,
    episode_ids: list[str],
    episode_samples: Mapping[str, Sequence[Sample]] | None = None,
    task: str | None = None,
) -> tuple[str | None, int]:
    """The trajectory and first sample that ``reset(options=...)`` asks for.

    Args:
        options: ``trajectory`` (an id, or an index into ``episode_ids``) and ``sample``: an index into that
            trajectory's samples (checked by the caller against their number), or a sample id
            (``TRAJECTORY/TASK/STEP``, as in ``results.jsonl``; its trajectory then need not be given);
            both optional.
        episode_ids: The trajectories with samples of the env's task.
        episode_samples: Their samples in order (needed for a sample id).
        task: The env's task (a sample id of another task is refused).

    Returns:
        The trajectory id (None: draw one) and the sample index.

    Raises:
        ConfigError: An unknown option, a trajectory that is neither a known id nor an index in range, a
            sample that is neither a whole number nor a sample id of this env (the nearest ids suggested),
            or a sample id of another trajectory than the one given.
    """
    options = options or {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"reset options are a dict ({', '.join(RESET_OPTIONS)}), got {type(options).__name__}")
    unknown = [str(key) for key in options if key not in RESET_OPTIONS]
    if unknown:
        raise ConfigError(f"unknown reset option {echo(unknown[0])}; reset takes {', '.join(RESET_OPTIONS)}")
    chosen = options.get("trajectory")
    tid: str | None = None
    if isinstance(chosen, str) and chosen in episode_ids:
        tid = chosen
    elif chosen is not None:
        index = _index(chosen) if not isinstance(chosen, (str, bool)) else None
        if index is None or not -len(episode_ids) <= index < len(episode_ids):
            known = ", ".join(episode_ids[:10]) + (", ..." if len(episode_ids) > 10 else "")
            raise ConfigError(
                f"no trajectory {echo(chosen)} with samples of this task: give an id ({known}) or an index "
                f"below {len(episode_ids)}"
            )
        tid = episode_ids[index]
    sample = options.get("sample", 0)
    if isinstance(sample, str) and episode_samples is not None:
        found, index = _sample_position(sample, episode_samples, task)
        if tid is not None and tid != found:
            raise ConfigError(f"sample {echo(sample)} is not of trajectory {tid!r}: leave the trajectory out")
        return found, index
    start = _index(sample) if not isinstance(sample, (str, bool)) else None
    if start is None:
        raise ConfigError(f"reset option 'sample' is an index into the trajectory's samples, got {echo(sample)}")
    return tid, start


def _sample_position(
    sample_id: str, episode_samples: Mapping[str, Sequence[Sample]], task: str | None
) -> tuple[str, int]:
    """The trajectory of a sample id and the sample's index among that trajectory's samples."""
    parts = sample_id.rsplit("/", 2)
    if len(parts) == 3 and task is not None and parts[1] in TASKS and parts[1] != task:
        raise ConfigError(f"{echo(sample_id)} is an {parts[1]} sample; this env's task is {task}")
    for index, sample in enumerate(episode_samples.get(parts[0], ())):
        if sample.id == sample_id:
            return parts[0], index
    known = [s.id for group in episode_samples.values() for s in group]
    near = difflib.get_close_matches(sample_id, known, n=3)
    if near:
        hint = f"; did you mean {', '.join(map(repr, near))}?"
    else:  # what exists: the form of an id, one of them, and the trajectories
        trajectories = sorted(episode_samples)
        shown = ", ".join(trajectories[:5]) + (", ..." if len(trajectories) > 5 else "")
        example = f", e.g. {known[0]!r}" if known else ""
        hint = f" (ids are TRAJECTORY/TASK/STEP{example}; {len(known)} samples in trajectories {shown})"
    raise ConfigError(
        f"reset option 'sample' is an index into the trajectory's samples or a sample id: no sample "
        f"{echo(sample_id)} in this env's samples{hint}"
    )
