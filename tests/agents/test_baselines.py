"""The static baselines: on hand-made observations, and over real episodes."""

from __future__ import annotations

import pytest

from tests.agents.conftest import MakeEnv
from tests.agents.episodes import run_agent
from themisto_env.agents import make_agent
from themisto_env.agents.baselines import repeat_previous, retrieve

HISTORY = """# In [1]:
df = load()

# In [2]:
df.head()
# Out [2]:
   a
0  1

# In [3]:
model.fit(X, y)
# Out [3]:
LinearRegression()

# In [4]:
print('done')
"""


def _obs(history: str, cell: str = "") -> dict[str, object]:
    return {"history": history, "cell": cell, "runtime": "", "tool_result": "", "tools_left": 0}


def test_repeat_previous_predicts_the_last_source_or_the_last_output() -> None:
    assert repeat_previous(_obs(HISTORY), "next-cell") == "print('done')"
    assert repeat_previous(_obs(HISTORY), "output") == "LinearRegression()"  # the last non-empty output
    assert repeat_previous(_obs(""), "next-cell") == repeat_previous(_obs(""), "output") == ""


def test_retrieval_predicts_what_followed_the_most_similar_cell() -> None:
    history = HISTORY + "\n# In [5]:\ndf = load()\n"
    assert retrieve(_obs(history), "next-cell") == "df.head()"  # cell 1 was followed by cell 2
    assert retrieve(_obs("# In [1]:\nx = 1\n"), "next-cell") == "x = 1"  # one cell: itself


def test_retrieval_predicts_the_output_of_the_most_similar_cell_with_an_output() -> None:
    assert retrieve(_obs(HISTORY, cell="df.head(3)"), "output") == "   a\n0  1"
    assert retrieve(_obs(HISTORY, cell="model.fit(X2, y2)"), "output") == "LinearRegression()"
    assert retrieve(_obs("# In [1]:\nx = 1\n", cell="x"), "output") == ""


@pytest.mark.parametrize("task", ["next-cell", "output"])
@pytest.mark.parametrize("name", ["repeat-previous", "retrieval"])
def test_baselines_play_whole_episodes(make_env: MakeEnv, task: str, name: str) -> None:
    env = make_env(task, "static")
    results = run_agent(env, make_agent(name))
    assert len(results) == len(env.unwrapped.episode.samples)  # type: ignore[attr-defined]
    for result in results:
        assert all(0.0 <= value <= 1.0 for value in result.scores.values())
        assert result.tool_calls == [] and result.usage.tool_calls == 0
