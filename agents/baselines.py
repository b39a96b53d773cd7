"""Static baselines: no model and no tools, only the observation's history (and the cell about to run).

``repeat-previous``
    next-cell: the source of the last executed cell (people re-run and edit cells often);
    output: the most recent non-empty output in the history.
``retrieval`` (JuICe-style retrieval from the notebook itself)
    next-cell: the earlier cell most similar to the last executed one, and predict the cell that
    followed it; output: the output of the earlier cell most similar to the cell about to run.

Similarity is rapidfuzz's normalized Indel similarity (``fuzz.ratio``) of the sources; ties go to the
most recent cell. Both agents answer with an empty prediction when the history is empty.
"""

from __future__ import annotations

from collections.abc import Sequence

from rapidfuzz import fuzz

from themisto_env.agents.base import BaseAgent, Info, Observation
from themisto_env.agents.history import HistoryCell, parse_history
from themisto_env.env import Action
from themisto_env.env.actions import Prediction


def repeat_previous(observation: Observation, task: str) -> str:
    """The ``repeat-previous`` prediction for an observation.

    Args:
        observation: The env's observation.
        task: ``next-cell`` or ``output``.

    Returns:
        The last cell's source (next-cell) or the most recent non-empty output (output); "" when none.
    """
    cells = parse_history(str(observation.get("history", "")))
    if task == "output":
        return next((c.output for c in reversed(cells) if c.output.strip()), "")
    return cells[-1].source if cells else ""


def most_similar(query: str, cells: Sequence[HistoryCell]) -> int | None:
    """The index of the cell whose source is most similar to ``query`` (the latest on ties), or None."""
    best, best_score = None, -1.0
    for i, cell in enumerate(cells):
        value = fuzz.ratio(query, cell.source)
        if value >= best_score:
            best, best_score = i, value
    return best


def retrieve(observation: Observation, task: str) -> str:
    """The ``retrieval`` prediction for an observation.

    Args:
        observation: The env's observation.
        task: ``next-cell`` or ``output``.

    Returns:
        next-cell: the cell that followed the earlier cell most similar to the last one (the last cell's
        source when it is the only one); output: the output of the earlier cell with an output most
        similar to the cell about to run; "" when the history gives nothing.
    """
    cells = parse_history(str(observation.get("history", "")))
    if not cells:
        return ""
    if task == "output":
        shown = [c for c in cells if c.output.strip()]
        index = most_similar(str(observation.get("cell", "")), shown)
        return shown[index].output if index is not None else ""
    last, earlier = cells[-1], cells[:-1]
    index = most_similar(last.source, earlier)
    return cells[index + 1].source if index is not None else last.source


class RepeatPreviousAgent(BaseAgent):
    """Predicts the previous cell's source (next-cell) or the previous output (output)."""

    name = "repeat-previous"

    def decide(self, observation: Observation, info: Info) -> Action:
        """Predict from the history alone."""
        return Prediction(text=repeat_previous(observation, str(info["task"])))


class RetrievalAgent(BaseAgent):
    """Predicts by retrieving the most similar earlier cell from the history (see the module docstring)."""

    name = "retrieval"

    def decide(self, observation: Observation, info: Info) -> Action:
        """Predict from the history alone."""
        return Prediction(text=retrieve(observation, str(info["task"])))


__all__ = ["RepeatPreviousAgent", "RetrievalAgent", "most_similar", "repeat_previous", "retrieve"]
