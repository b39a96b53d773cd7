"""Run records: the model, times, transcripts and tokens in every row, no secret anywhere, a resume that
refuses another config, agents by path and entry point, and concurrent model calls (issue 12).

LLM runs use the real langchain-openai client against the stand-in server of test_provider_errors.
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.agents.stand_in import Behaviour, StandIn, ok
from tests.agents.test_provider_errors import cli
from themisto_env.cli import app
from themisto_env.errors import ConfigError, DataError
from themisto_env.redaction import REDACTED
from themisto_env.run.config import RunConfig
from themisto_env.run.results import RESULTS, read_results
from themisto_env.run.runner import run

pytest.importorskip("langchain_openai")

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-themisto-test-0123456789abcdef"


@pytest.fixture(scope="module")
def server() -> Any:
    stand_in = StandIn()
    yield stand_in
    stand_in.close()


def llm_config(server: StandIn, env_dataset: dict[str, str], **kw: Any) -> RunConfig:
    return RunConfig(
        agent=kw.pop("agent", "llm-static"),
        model="openai/stand-in",
        base_url=kw.pop("base_url", server.base_url),
        model_args={"api_key": SECRET, "temperature": 0.2, "timeout": 5.0, **kw.pop("model_args", {})},
        task=kw.pop("task", "output"),
        data=env_dataset["dataset"],
        env={"snapshot_dir": env_dataset["snapshot_dir"]},
        **kw,
    )


def run_files(out: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(out.iterdir()) if p.is_file())


def test_rows_name_the_model_keep_times_transcripts_tokens_and_no_secret(
    server: StandIn, env_dataset: dict[str, str], tmp_path: Path
) -> None:
    server.play(default=Behaviour(echo_auth=True))  # a server that leaks the key into its replies
    summary = run(llm_config(server, env_dataset, limit=4), tmp_path, progress=False)
    rows = read_results(tmp_path)
    assert len(rows) == 4 and len(server.requests) == 4
    everything = run_files(tmp_path)
    assert SECRET not in everything, "the key is in the run folder"
    assert REDACTED in json.loads((tmp_path / "config.json").read_text())["model_args"]["api_key"]
    for row in rows:
        assert row.model == {"provider": "openai", "name": "stand-in", "params": row.model["params"]}
        assert row.model["params"]["temperature"] == 0.2 and "api_key" not in row.model["params"]
        start, end = datetime.fromisoformat(row.started_at), datetime.fromisoformat(row.finished_at)
        assert start <= end and start.tzinfo is not None
        roles = [m["role"] for m in row.transcript]
        assert roles == ["system", "user", "assistant"]
        assert row.transcript[-1]["content"].endswith(f"Bearer {REDACTED}"), "the leaked key is redacted"
        assert row.usage["input_tokens"] == 11 and row.usage["output_tokens"] == 7
    assert summary["usage"]["model_calls"] == 4
    assert summary["usage"]["input_tokens"] == 44 and summary["usage"]["output_tokens"] == 28
    assert summary["model"]["name"] == "stand-in"


def test_tool_calls_and_results_are_in_the_transcript(
    server: StandIn, env_dataset: dict[str, str], tmp_path: Path
) -> None:
    call = json.dumps(
        {
            "id": "chatcmpl-tools",
            "object": "chat.completion",
            "created": 0,
            "model": "stand-in",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "list_variables", "arguments": "{}"},
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }
    )
    server.play(Behaviour(body=call), default=ok())
    run(llm_config(server, env_dataset, agent="llm-tools", limit=1), tmp_path, progress=False)
    (row,) = read_results(tmp_path)
    transcript = row.transcript
    assert [m["role"] for m in transcript] == ["system", "user", "assistant", "tool", "assistant"]
    assert transcript[2]["tool_calls"][0]["name"] == "list_variables"
    assert transcript[3]["tool_call_id"] == "call_1" and transcript[3]["content"], "the tool's result is kept"
    assert row.tool_calls[0]["tool"] == "list_variables"
    assert row.usage["model_calls"] == 2 and row.usage["input_tokens"] == 16


def test_resuming_with_another_config_stops_in_one_line_and_force_starts_over(
    env_dataset: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["run", "-c", dataset_config(env_dataset, tmp_path), "--limit", "3", "--out", str(tmp_path / "run")]
    tmp_path = tmp_path / "run"
    assert cli(monkeypatch, capsys, *base, "--agent", "repeat-previous")[0] == 0
    before = (tmp_path / RESULTS).read_text()
    code, err = cli(monkeypatch, capsys, *base, "--agent", "retrieval")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "another config" in err and "'repeat-previous' -> 'retrieval'" in err and "--force" in err
    assert (tmp_path / RESULTS).read_text() == before, "nothing was mixed in"
    assert cli(monkeypatch, capsys, *base, "--agent", "repeat-previous")[0] == 0, "the same config resumes"
    assert cli(monkeypatch, capsys, *base, "--agent", "retrieval", "--force")[0] == 0
    assert {r.agent for r in read_results(tmp_path)} == {"retrieval"}


def dataset_config(env_dataset: dict[str, str], folder: Path) -> str:
    """A config file naming the test dataset and its snapshot store (what the CLI options do not set)."""
    path = folder / "data.yaml"
    path.write_text(json.dumps({"data": env_dataset["dataset"], "env": {"snapshot_dir": env_dataset["snapshot_dir"]}}))
    return str(path)


def readme_agent() -> str:
    block = re.search(r"```python\n(# my_agents\.py\n.*?)```", (REPO / "docs" / "agents.md").read_text(), flags=re.S)
    assert block, "the agents page (docs/agents.md) shows my_agents.py"
    return block.group(1)


@pytest.mark.slow
def test_the_readme_custom_agent_runs_from_the_cli_with_two_workers(
    env_dataset: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "my_agents.py").write_text(readme_agent())
    out = tmp_path / "runs" / "last-source"
    args = ["--agent", "my_agents:LastSourceAgent", "--workers", "2", "--limit", "8", "--out", str(out)]
    done = subprocess.run(
        ["themisto", "run", "-c", dataset_config(env_dataset, tmp_path), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = read_results(out)
    assert len(rows) == 8 and {r.agent for r in rows} == {"my_agents:LastSourceAgent"}
    assert all(r.prediction for r in rows if r.step > 0), "the agent predicted the last cell"


def test_agents_are_listed_and_found_through_the_entry_point_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    package = tmp_path / "site"
    (package / "extra_agents").mkdir(parents=True)
    (package / "extra_agents" / "__init__.py").write_text(readme_agent())
    info = package / "extra_agents-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-agents\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[themisto_env.agents]\nlast-source = extra_agents:LastSourceAgent\n")
    monkeypatch.syspath_prepend(str(package))
    from themisto_env.agents import make_agent

    agent = make_agent("last-source")
    assert type(agent).__name__ == "LastSourceAgent" and agent.name == "last-source"
    result = CliRunner().invoke(app, ["agents"], terminal_width=200)
    listed = result.output
    assert result.exit_code == 0
    lines = {line.split()[0]: line for line in listed.splitlines() if line.strip() and not line.startswith(" ")}
    assert {"llm-static", "llm-tools", "repeat-previous", "last-source"} <= set(lines)
    assert "Predicts that the developer re-runs the last cell." in lines["last-source"]
    assert "(extra_agents:LastSourceAgent)" in lines["last-source"], "an installed agent says where it comes from"


def test_max_connections_overlaps_model_calls_and_gives_the_serial_rows(
    server: StandIn, env_dataset: dict[str, str], tmp_path: Path
) -> None:
    slow = ok(delay=0.3)
    server.play(default=slow)
    serial = run(llm_config(server, env_dataset, limit=12), tmp_path / "serial", progress=False)
    assert server.max_in_flight == 1
    server.play(default=slow)
    concurrent = run(llm_config(server, env_dataset, limit=12, max_connections=4), tmp_path / "four", progress=False)
    assert 2 <= server.max_in_flight <= 4, "calls overlap, never more than the bound"
    assert len(server.requests) == serial["samples"] >= 6

    def rows(folder: str) -> dict[str, tuple]:
        return {r.sample_id: (r.prediction, r.scores, r.state_check) for r in read_results(tmp_path / folder)}

    assert rows("four") == rows("serial")
    assert concurrent["rouge_l"] == serial["rouge_l"] and concurrent["samples"] == serial["samples"]


@pytest.mark.slow
def test_max_connections_is_a_bound_over_the_whole_run_with_workers(
    server: StandIn, env_dataset: dict[str, str], tmp_path: Path
) -> None:
    server.play(default=ok(delay=0.3))
    summary = run(llm_config(server, env_dataset, max_connections=2, workers=2), tmp_path, progress=False)
    assert summary["samples"] == len(server.requests) >= 6 and server.max_in_flight <= 2


def test_a_row_without_a_required_field_is_one_error_naming_file_row_and_field(tmp_path: Path) -> None:
    good = {
        "sample_id": "t/next-cell/1",
        "trajectory_id": "t",
        "step": 1,
        "task": "next-cell",
        "agent": "a",
        "observation": "static",
        "backend": "local",
        "prediction": "x",
        "target": "y",
        "scores": {"exact_match": 0.0, "rouge_l": 0.0, "chrf": 0.0},
        "reward": 0.0,
        "seconds": 0.1,
    }
    bad = {k: v for k, v in good.items() if k != "scores"}
    (tmp_path / RESULTS).write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError) as caught:
        read_results(tmp_path)
    message = str(caught.value)
    assert str(tmp_path / RESULTS) in message and "row 2" in message and "'scores'" in message
    assert "\n" not in message


def test_a_model_for_an_agent_without_one_is_a_config_error(env_dataset: dict[str, str], tmp_path: Path) -> None:
    from themisto_env.errors import ConfigError

    with pytest.raises(ConfigError, match="repeat-previous"):
        run(RunConfig(agent="repeat-previous", model="openai/m", data=env_dataset["dataset"]), tmp_path, progress=False)
    with pytest.raises(Exception, match="PROVIDER/NAME"):
        RunConfig(model="openai")


def test_model_args_are_read_as_yaml_values() -> None:
    from themisto_env.run.config import parse_model_args

    assert parse_model_args(["temperature=0", "stop=[END, STOP]", "name=gpt", "flag=true"]) == {
        "temperature": 0,
        "stop": ["END", "STOP"],
        "name": "gpt",
        "flag": True,
    }


def test_next_cell_rows_and_summary_carry_the_api_sequence_metrics(env_dataset: dict[str, str], tmp_path: Path) -> None:
    from themisto_env.metrics import API_SEQUENCE_METRICS, api_sequence, api_sequence_score

    config = RunConfig(
        agent="repeat-previous", data=env_dataset["dataset"], env={"snapshot_dir": env_dataset["snapshot_dir"]}
    )
    summary = run(config, tmp_path, progress=False)
    rows = [r for r in read_results(tmp_path) if api_sequence(r.target)]  # targets calling nothing: left out
    assert 0 < len(rows) == summary["api_samples"] <= summary["samples"]
    assert all("api_f1" not in r.scores for r in read_results(tmp_path) if not api_sequence(r.target))
    for row in rows:
        expected = api_sequence_score(row.prediction, row.target).as_dict()
        assert {m: row.scores[m] for m in API_SEQUENCE_METRICS} == expected
    for metric in API_SEQUENCE_METRICS:
        mean = sum(r.scores[metric] for r in rows) / len(rows)
        assert summary[metric]["mean"] == pytest.approx(mean)
        assert summary[metric]["ci_low"] <= mean <= summary[metric]["ci_high"]
    output = run(config.model_copy(update={"task": "output"}), tmp_path / "output", progress=False)
    assert "api_f1" not in output and all("api_f1" not in r.scores for r in read_results(tmp_path / "output"))


# -- adversarial: secrets in odd places, a concurrent run that fails or stops, resumes of other configs ------

LONG_HEADER_KEY = "azure-header-key-0123456789"
LONG_ANTHROPIC_KEY = "anthropic-header-key-9876543210"


def test_keys_in_headers_queries_and_urls_never_reach_the_run_folder_and_placeholders_corrupt_nothing(
    server: StandIn, env_dataset: dict[str, str], tmp_path: Path
) -> None:
    server.play(default=ok("```\nimport ollama\nx = df.max()\n```"))
    host = server.base_url.replace("http://", "http://user:pw-in-url@")
    config = llm_config(
        server,
        env_dataset,
        limit=2,
        base_url=host,
        model_args={
            "api_key": "ollama",  # what local servers take as a key: short, and a word of the code
            "default_headers": {"api-key": LONG_HEADER_KEY, "x-api-key": LONG_ANTHROPIC_KEY},
            "default_query": {"key": "q-key"},
        },
    )
    run(config, tmp_path, progress=False)
    everything = run_files(tmp_path)
    for secret in (LONG_HEADER_KEY, LONG_ANTHROPIC_KEY, "pw-in-url", "q-key", SECRET):
        assert secret not in everything, f"{secret} is in the run folder"
    rows = read_results(tmp_path)
    assert rows and all(r.prediction == "import ollama\nx = df.max()" for r in rows), "no text was corrupted"
    params = rows[0].model["params"]
    assert "api-key" not in json.dumps(params) and "x-api-key" not in json.dumps(params)
    assert params["temperature"] == 0.2


def test_a_concurrent_run_stopped_by_errors_spends_few_calls_and_keeps_its_rows(
    server: StandIn,
    env_dataset: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.agents.stand_in import error
    from themisto_env.errors import ModelError
    from themisto_env.run import tally

    monkeypatch.setattr(tally, "FAIL_ON_ERROR_MIN_SAMPLES", 2)
    server.play(default=error(400, "bad request"))
    with pytest.raises(ModelError, match="stopped"):
        run(llm_config(server, env_dataset, max_connections=3, fail_on_error=0.0), tmp_path, progress=False)
    rows = read_results(tmp_path)
    assert len(rows) >= 2 and all(r.model_error for r in rows), "the rows before the stop are kept"
    assert len(server.requests) <= len(rows) + 3, "at most the calls in flight when it stopped are lost"


class FailsOnThirdSample:
    """An agent that looks at the kernel (a tool call), predicts, and breaks on the third sample it sees."""

    observation = "tools"
    seen = 0

    def __init__(self) -> None:
        from themisto_env.agents import AgentUsage

        self.usage = AgentUsage()
        self._asked: set[str] = set()

    def reset(self, info: Any) -> None:
        pass

    def act(self, observation: Any, info: Any) -> Any:
        raise NotImplementedError("async only")

    async def aact(self, observation: Any, info: Any) -> Any:
        from themisto_env.env.actions import Prediction
        from themisto_env.env.tools import ToolCall

        sample = str(info["sample_id"])
        if sample not in self._asked:
            self._asked.add(sample)
            type(self).seen += 1
            if type(self).seen == 3:
                raise RuntimeError("the agent broke")
            return ToolCall(tool="list_variables", args={})
        return Prediction(text="x")


def _kernels() -> set[int]:
    import psutil

    found = set()
    for process in psutil.Process().children(recursive=True):
        try:  # a forked kernel is reaped by its template: it may be gone, or a zombie, as it is looked at
            if any("ipykernel" in part for part in process.cmdline()):
                found.add(process.pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.slow
def test_a_failing_slot_raises_its_error_once_every_env_is_closed_and_no_kernel_is_left(
    env_dataset: dict[str, str], tmp_path: Path
) -> None:
    import time

    FailsOnThirdSample.seen = 0
    before = _kernels()
    config = RunConfig(
        agent=f"{__name__}:FailsOnThirdSample",
        task="output",
        data=env_dataset["dataset"],
        env={"snapshot_dir": env_dataset["snapshot_dir"]},
        max_connections=3,
    )
    with pytest.raises(RuntimeError, match="the agent broke"):
        run(config, tmp_path, progress=False)
    deadline = time.monotonic() + 10
    while _kernels() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _kernels() - before, "kernels outlived the run"
    assert all(r.prediction == "x" for r in read_results(tmp_path)), "the rows scored before the failure are kept"


@pytest.mark.slow
def test_max_connections_holds_over_uneven_workers(
    server: StandIn, env_dataset: dict[str, str], tmp_path: Path
) -> None:
    from themisto_env.run.executors.sharing import in_flight

    config = llm_config(server, env_dataset, max_connections=3, workers=2)
    assert [in_flight(config, i) for i in range(2)] == [2, 1]
    assert [in_flight(config.model_copy(update={"max_connections": 1}), i) for i in range(1)] == [1]
    server.play(default=ok(delay=0.3))
    run(config, tmp_path, progress=False)
    assert 2 <= server.max_in_flight <= 3


def test_resuming_a_run_folder_of_an_older_version_or_without_config_is_judged_by_what_it_holds(
    env_dataset: dict[str, str], tmp_path: Path
) -> None:
    config = RunConfig(
        agent="repeat-previous", data=env_dataset["dataset"], env={"snapshot_dir": env_dataset["snapshot_dir"]}
    )
    run(config.model_copy(update={"limit": 2}), tmp_path, progress=False)
    old = json.loads((tmp_path / "config.json").read_text())
    for field in ("model", "base_url", "model_args", "max_connections", "cache", "agent_options"):
        old.pop(field)  # as an older version wrote it
    (tmp_path / "config.json").write_text(json.dumps(old))
    run(config.model_copy(update={"limit": 4}), tmp_path, progress=False)  # the same run: resumes
    assert len(read_results(tmp_path)) == 4
    with pytest.raises(ConfigError, match="env"):
        run(config.model_copy(update={"env": {**config.env, "tool_budget": 1}}), tmp_path, progress=False)
    (tmp_path / "config.json").unlink()
    with pytest.raises(ConfigError, match="'repeat-previous' -> 'retrieval'"):
        run(config.model_copy(update={"agent": "retrieval"}), tmp_path, progress=False)
    run(config.model_copy(update={"limit": 5, "workers": 1, "max_retries": 2}), tmp_path, progress=False)
    assert len(read_results(tmp_path)) == 5, "operational options may change between resumes"


def test_force_with_a_config_that_cannot_run_keeps_the_results(env_dataset: dict[str, str], tmp_path: Path) -> None:
    config = RunConfig(
        agent="repeat-previous", limit=2, data=env_dataset["dataset"], env={"snapshot_dir": env_dataset["snapshot_dir"]}
    )
    run(config, tmp_path, progress=False)
    before = (tmp_path / RESULTS).read_text()
    with pytest.raises(ConfigError):
        run(config.model_copy(update={"agent": "repeat-previus"}), tmp_path, progress=False, force=True)
    with pytest.raises(ConfigError):
        run(config.model_copy(update={"model": "openai/m"}), tmp_path, progress=False, force=True)
    assert (tmp_path / RESULTS).read_text() == before


def test_ray_and_max_connections_together_are_refused_in_one_line() -> None:
    with pytest.raises(Exception, match="Ray actors run theirs one at a time"):
        RunConfig(ray="local", max_connections=4)


def test_a_config_cannot_name_any_callable_as_its_agent(tmp_path: Path) -> None:
    from themisto_env.agents import make_agent

    marker = tmp_path / "ran"
    with pytest.raises(ConfigError, match="not an agent class"):
        make_agent("subprocess:run", args=f"touch {marker}", shell=True)
    assert not marker.exists()
    assert type(make_agent(f"{__name__}:FailsOnThirdSample")).__name__ == "FailsOnThirdSample"


@pytest.mark.slow  # opens the bundled data (built once in the shared cache) and runs two samples on it
def test_a_run_on_the_bundled_data_records_which_data_it_read(tmp_path: Path) -> None:
    from themisto_env.replay.dataset import Dataset

    out = tmp_path / "run"
    config = RunConfig(agent="repeat-previous", limit=2)
    run(config, out, progress=False)
    recorded = json.loads((out / "config.json").read_text(encoding="utf-8"))
    bundled = Dataset.open(None, progress=False).path
    assert recorded["data"] == str(bundled), "the bundled data's folder, not null"
    assert Path(recorded["data"]).name.startswith("bundled-")  # named by the bundled log's digest
    run(config, out, progress=False)  # resuming without --data is the same run
    run(RunConfig(agent="repeat-previous", limit=2, data=str(bundled)), out, progress=False)  # so is the folder
    recorded["data"] = None  # a config.json written by an older version
    (out / "config.json").write_text(json.dumps(recorded), encoding="utf-8")
    run(config, out, progress=False)
    recorded["data"] = str(bundled.with_name(bundled.name.replace("bundled-", "bundled-0")))  # other bundled data
    (out / "config.json").write_text(json.dumps(recorded), encoding="utf-8")
    with pytest.raises(ConfigError, match="another config"):
        run(config, out, progress=False)
