"""themisto view on real runs, with hand-written rows for transcripts and errors; driven in headless Chromium
through the URL fragment (``--dump-dom`` for what is shown, ``--screenshot`` for how it looks)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import pytest
from langchain_core.messages import AIMessage
from typer.testing import CliRunner

from themisto_env.agents.fake_chat import ScriptedChatModel
from themisto_env.cli import app
from themisto_env.errors import DataError
from themisto_env.run.compare import run_label
from themisto_env.run.config import RunConfig
from themisto_env.run.report import render_report
from themisto_env.run.results import ResultRow
from themisto_env.run.runner import run
from themisto_env.run.view import ERROR_KINDS, error_kind, view_data, write_view

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOSTILE = "<script>document.title = 'pwned'</script><img src=x onerror=\"document.title = 'pwned'\">"


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def _append(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    with (run_dir / "results.jsonl").open("a", encoding="utf-8") as file:
        for row in rows:
            file.write(json.dumps(row) + "\n")


def _draw(row: dict[str, Any], prediction: str) -> dict[str, Any]:
    """One of K predictions of a row (``--samples K``), with the row's transcript."""
    keys = ("scores", "reward", "execution_score", "prediction_failed", "tool_calls", "transcript")
    return {"prediction": prediction, "passed": None, **{k: row[k] for k in keys}}


class ToolScriptedChat(ScriptedChatModel):
    """A scripted model for a real ``llm-tools`` run: per sample, it inspects ``df``, then answers."""

    model: str = ""

    def __init__(self, **kwargs: Any) -> None:
        look = AIMessage(
            content="Let me look at the frame.",
            tool_calls=[{"id": "call_1", "name": "inspect_variable", "args": {"name": "df"}}],
            usage_metadata={"input_tokens": 50, "output_tokens": 5, "total_tokens": 55},
        )
        super().__init__([look, "```python\ndf.shape\n```"], cycle=True, **kwargs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two real runs over the bundled data (the same 6 next-cell samples): ``repeat-previous``, and
    ``llm-tools`` with a scripted model (real transcripts: a tool call and its result). The second then
    gets rows written again (the last row of a sample wins): a model error, an infrastructure error, a
    failed prediction holding HTML, and two samples of the output task that only it has."""
    root = tmp_path_factory.mktemp("view-runs")
    # the first 6 samples of one trajectory (selection="first"): the scripted answer is right on some of them
    run(RunConfig(agent="repeat-previous", limit=6, selection="first"), root / "static", progress=False)
    scripted = f"{__name__}:{ToolScriptedChat.__name__}/scripted"
    run(RunConfig(agent="llm-tools", model=scripted, limit=6, selection="first"), root / "model", progress=False)
    base = _rows(root / "model")
    assert all(r["transcript"] and not r["model_error"] for r in base), "the scripted model run failed"
    again = [
        {**base[2], "model_error": "RateLimitError: 429 after 5 retries", "transcript": None},
        {**base[3], "infrastructure_error": "kernel died while serving the sample"},
        {**base[4], "prediction": HOSTILE, "prediction_failed": "SyntaxError: invalid syntax"},
        {**base[5], "draws": [_draw(base[5], base[5]["prediction"]), _draw(base[5], "df.describe()")]},
    ]
    for step in (1, 2):
        again.append(
            {
                **base[0],
                "sample_id": f"{base[0]['trajectory_id']}/output/{step}",
                "task": "output",
                "step": step,
                "target": "(178, 14)",
                "prediction": "(178, 13)",
                "scores": {"exact_match": 0.0, "rouge_l": 0.5, "chrf": 0.8},
            }
        )
    _append(root / "model", again)
    return root / "static", root / "model"


def test_view_data_joins_the_runs_by_sample(runs: tuple[Path, Path]) -> None:
    static, model = runs
    data = view_data([static, model])
    rows_a, rows_b = _rows(static), _rows(model)
    latest_b = {r["sample_id"]: r for r in rows_b}
    assert [s["id"] for s in data["samples"]] == list(dict.fromkeys(r["sample_id"] for r in rows_a + rows_b))
    for sample in data["samples"]:
        a, b = sample["rows"]
        assert b == latest_b[sample["id"]]  # the last row of a sample wins
        assert a is None if sample["task"] == "output" else a["sample_id"] == sample["id"]
        typed = [ResultRow.model_validate(r) if r else None for r in (a, b)]
        assert sample["kinds"] == [error_kind(r) if r else None for r in typed]
    assert [r["label"] for r in data["runs"]] == [
        run_label({r["sample_id"]: ResultRow.model_validate(r) for r in rows_a}, static),
        run_label({sid: ResultRow.model_validate(r) for sid, r in latest_b.items()}, model),
    ]
    counts = data["runs"][1]["errors"]
    assert (counts["model_error"], counts["infrastructure_error"], counts["prediction_failed"]) == (1, 1, 1)
    assert data["runs"][1]["scored"] == len(latest_b) - 2


def test_each_sample_shows_its_steps_replay_agreement(runs: tuple[Path, Path]) -> None:
    """Read from the runs' dataset (the bundled data, whose every step agrees); the report counts them."""
    data = view_data(list(runs))
    assert data["samples"] and all(s["agreement"] == {"kind": "ok", "detail": ""} for s in data["samples"])
    page = render_report(list(runs))
    assert "Replay agreement of the samples' steps" in page and "agree 6 / tolerated 0 / disagree 0" in page


def test_two_runs_of_one_agent_are_told_apart(runs: tuple[Path, Path], tmp_path: Path) -> None:
    static = runs[0]
    shutil.copytree(static, tmp_path / "again")
    labels = [r["label"] for r in view_data([static, tmp_path / "again"])["runs"]]
    assert labels[0] != labels[1] and labels[1].endswith("again")


def test_missing_or_empty_run_folder_is_a_one_line_error(runs: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such run folder"):
        write_view([runs[0], tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no results"):
        write_view([tmp_path / "empty"])
    (tmp_path / "empty" / "results.jsonl").write_text("")
    with pytest.raises(DataError, match="no results"):
        write_view([tmp_path / "empty"])
    shown = subprocess.run(
        [sys.executable, "-m", "themisto_env.cli", "view", str(runs[0]), str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 1
    assert shown.stderr.count("\n") == 1 and "no such run folder" in shown.stderr and "Traceback" not in shown.stderr


def test_cli_view_writes_one_self_contained_page(
    runs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "view.html"
    made = CliRunner().invoke(app, ["view", *map(str, runs), "--out", str(out)])
    assert made.exit_code == 0, made.output
    assert made.output.strip() == str(out)
    page = out.read_text()
    before, rest = page.split('<script type="application/json" id="data">', 1)
    data, after = rest.split("</script>", 1)
    for markup in (before, after):  # nothing is fetched: no address, no link, no source
        assert "http" not in markup and "<link" not in markup and "src=" not in markup
    assert page.count("<script") == 2  # the data block and the code; none from the rows
    assert json.loads(data) == json.loads(json.dumps(view_data(list(runs))))
    assert "<img src=x" not in page
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    monkeypatch.setenv("DISPLAY", ":0")  # a desktop (headless machines are told so: tests/cli/test_cli_errors.py)
    default = CliRunner().invoke(app, ["view", str(runs[0]), "--open"])
    assert default.exit_code == 0 and (runs[0] / "view.html").exists()
    assert opened == [(runs[0] / "view.html").resolve().as_uri()]


# -- in the browser ----------------------------------------------------------------------------------


@dataclass
class Node:
    """An element of a parsed page: tag, attributes, children, and the text directly inside."""

    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    parts: list[str | Node] = field(default_factory=list)

    def text(self) -> str:
        return "".join(p if isinstance(p, str) else p.text() for p in self.parts)

    def find_all(self, tag: str) -> list[Node]:
        found = []
        for child in self.children:
            if child.tag == tag:
                found.append(child)
            found += child.find_all(tag)
        return found


class _Tree(HTMLParser):
    VOID: ClassVar[set[str]] = {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "wbr",
    }

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].parts.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                break

    def handle_data(self, data: str) -> None:
        self.stack[-1].parts.append(data)


def _chromium() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium is not installed (bash scripts/setup.sh installs it): the page is not rendered")
    return chromium


@pytest.fixture(scope="module")
def page(runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_view(list(runs), tmp_path_factory.mktemp("view") / "view.html")


def _browse(page: Path, fragment: str, profile: Path) -> Node:
    """The page's DOM after its code ran, opened at ``view.html#fragment``."""
    shown = subprocess.run(
        [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", f"{page.as_uri()}#{fragment}"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    tree = _Tree()
    tree.feed(shown.stdout)
    return tree.root


def _listed(dom: Node) -> list[str]:
    return [li.attrs["data-sample"] for li in dom.find_all("li") if "data-sample" in li.attrs]


def _detail(dom: Node) -> Node:
    return next(s for s in dom.find_all("section") if s.attrs.get("id") == "detail")


def test_filters_in_the_url_choose_the_samples(page: Path, runs: tuple[Path, Path], tmp_path: Path) -> None:
    data = view_data(list(runs))
    samples = data["samples"]
    everything = _browse(page, "", tmp_path / "profile")
    assert _listed(everything) == [s["id"] for s in samples]
    assert f"{len(samples)} of {len(samples)} samples" in everything.text()

    def expect(fragment: str, wanted: list[str]) -> None:
        dom = _browse(page, fragment, tmp_path / "profile")
        assert _listed(dom) == wanted, fragment
        assert f"{len(wanted)} of {len(samples)} samples" in dom.text()

    expect("task=output", [s["id"] for s in samples if s["task"] == "output"])
    expect("error=model_error", [s["id"] for s in samples if "model_error" in s["kinds"]])
    expect("error=any", [s["id"] for s in samples if any(k not in (None, "none") for k in s["kinds"])])
    expect("error=none&run=1", [s["id"] for s in samples if s["kinds"][1] == "none"])
    expect(
        "metric=rouge_l&min=0.45&max=1&run=0",
        [s["id"] for s in samples if s["rows"][0] and 0.45 <= s["rows"][0]["scores"]["rouge_l"] <= 1],
    )
    expect("q=" + quote("RateLimitError"), [s["id"] for s in samples if "model_error" in s["kinds"]])
    needle = next(m["content"] for s in samples for m in s["rows"][1].get("transcript") or [] if m["role"] == "tool")
    needle = needle.splitlines()[0]
    expect("q=" + quote(needle), [s["id"] for s in samples if needle.lower() in _searched_text(s)])
    by_score = sorted(samples[:6], key=lambda s: s["rows"][0]["scores"]["chrf"])
    assert _listed(_browse(page, "task=next-cell&metric=chrf&sort=score&run=0", tmp_path / "profile")) == [
        s["id"] for s in by_score
    ]
    nothing = _browse(page, "q=no-such-text-anywhere", tmp_path / "profile")
    assert _listed(nothing) == [] and "No sample matches" in nothing.text()


def _searched_text(sample: dict[str, Any]) -> str:
    """What the search box looks through (the page's haystack, JSON parts left out)."""
    parts = [sample["id"], sample["target"]]
    for row in filter(None, sample["rows"]):
        parts += [row["prediction"], *(str(row.get(k) or "") for k in ERROR_KINDS)]
        parts += [m["content"] for m in row.get("transcript") or []]
    return "\n".join(parts).lower()


def _talked(samples: list[dict[str, Any]]) -> str:
    """A sample whose second run's transcript has a tool call answered."""
    return next(s["id"] for s in samples if any(m["role"] == "tool" for m in s["rows"][1].get("transcript") or []))


def test_side_by_side_and_transcript(page: Path, runs: tuple[Path, Path], tmp_path: Path) -> None:
    samples = {s["id"]: s for s in view_data(list(runs))["samples"]}
    talked = _talked(list(samples.values()))
    dom = _browse(page, "sample=" + quote(talked, safe=""), tmp_path / "profile")
    detail = _detail(dom)
    assert detail.attrs["data-sample"] == talked
    selected = [li for li in dom.find_all("li") if "selected" in li.attrs.get("class", "").split()]
    assert [li.attrs["data-sample"] for li in selected] == [talked]
    assert (
        next(p for p in detail.find_all("pre") if "target" in p.attrs.get("class", "")).text()
        == (samples[talked]["target"])
    )
    cards = [c for c in detail.find_all("div") if c.attrs.get("class") == "card"]
    assert [c.attrs["data-run"] for c in cards] == ["0", "1"]
    for i, card in enumerate(cards):
        row = samples[talked]["rows"][i]
        prediction = next(p for p in card.find_all("pre") if p.attrs.get("class") == "prediction")
        assert prediction.text() == row["prediction"]
        assert f"rouge_l {row['scores']['rouge_l']:.3f}" in card.text()
    row = samples[talked]["rows"][1]
    usage = row["usage"]
    assert f"{row['model']['provider']}/{row['model']['name']}" in cards[1].text()
    assert f"{usage['model_calls']} model calls, {usage['input_tokens']} in / {usage['output_tokens']} out" in (
        cards[1].text()
    )
    for call in row["tool_calls"]:  # the env's record of the tool calls
        assert f"{call['tool']}({json.dumps(call['args'], separators=(',', ':'))})" in cards[1].text()

    transcript = next(
        c
        for c in detail.find_all("div")
        if c.attrs.get("class") == "card transcript" and c.attrs.get("data-run") == "1"
    )
    messages = [m for m in transcript.find_all("div") if m.attrs.get("class") == "msg"]
    assert [m.attrs["data-role"] for m in messages] == [m["role"] for m in row["transcript"]]
    asked = next(m for m in row["transcript"] if m.get("tool_calls"))["tool_calls"][0]
    answer = next(m for m in row["transcript"] if m["role"] == "tool")
    assert answer["tool_call_id"] == asked["id"]
    call = next(c for c in transcript.find_all("div") if c.attrs.get("data-call-id") == asked["id"])
    assert asked["name"] in call.text() and json.dumps(asked["args"], indent=2) in call.text()
    result = next(m for m in messages if m.attrs["data-role"] == "tool")
    assert f"← {asked['name']} ({asked['id']})" in result.text() and answer["content"] in result.text()
    for shown, message in zip(messages, row["transcript"], strict=True):
        assert message["content"] in shown.text()
    other = next(
        c
        for c in detail.find_all("div")
        if c.attrs.get("class") == "card transcript" and c.attrs.get("data-run") == "0"
    )
    assert "no transcript recorded (an agent without a model)" in other.text()


def test_each_card_shows_where_the_samples_time_went(page: Path, runs: tuple[Path, Path], tmp_path: Path) -> None:
    samples = {s["id"]: s for s in view_data(list(runs))["samples"]}
    talked = _talked(list(samples.values()))
    detail = _detail(_browse(page, "sample=" + quote(talked, safe=""), tmp_path / "profile"))
    cards = [c for c in detail.find_all("div") if c.attrs.get("class") == "card"]
    for i, card in enumerate(cards):
        timing = samples[talked]["rows"][i]["timing"]
        shown = next(d for d in card.find_all("div") if d.attrs.get("class") == "timing")
        kinds = ("state", "tools", "model", "scoring")
        assert " · ".join(f"{k} {timing.get(k, 0.0):.3f}" for k in kinds) + " s" in shown.text()
        bar = next(d for d in shown.find_all("div") if d.attrs.get("class") == "timing-bar")
        segments = {s.attrs["class"]: s.attrs["style"] for s in bar.find_all("span")}
        assert set(segments) == {f"timing-{k}" for k in kinds if timing.get(k, 0.0) > 0}
        total = sum(timing.values())
        for kind, style in segments.items():
            # the page rounds in the browser, with its own sum: the last digit may differ by one
            width = float(style.removeprefix("width: ").removesuffix("%"))
            assert abs(width - 100 * timing[kind.removeprefix("timing-")] / total) <= 0.051, style
    assert samples[talked]["rows"][1]["timing"]["model"] > 0 and samples[talked]["rows"][1]["timing"]["tools"] > 0


def test_errors_and_absent_rows_are_shown(page: Path, runs: tuple[Path, Path], tmp_path: Path) -> None:
    samples = view_data(list(runs))["samples"]
    failed = next(s for s in samples if s["kinds"][1] == "model_error")
    detail = _detail(_browse(page, "sample=" + quote(failed["id"], safe=""), tmp_path / "profile"))
    card = next(c for c in detail.find_all("div") if c.attrs.get("data-run") == "1" and c.attrs.get("data-kind"))
    assert card.attrs["data-kind"] == "model_error" and "RateLimitError: 429 after 5 retries" in card.text()
    only_b = next(s for s in samples if s["rows"][0] is None)
    detail = _detail(_browse(page, "sample=" + quote(only_b["id"], safe=""), tmp_path / "profile"))
    card = next(c for c in detail.find_all("div") if c.attrs.get("class") == "card" and c.attrs.get("data-run") == "0")
    assert "not in this run" in card.text()


def test_draws_are_shown_with_their_transcripts(page: Path, runs: tuple[Path, Path], tmp_path: Path) -> None:
    drawn = next(s for s in view_data(list(runs))["samples"] if s["rows"][1] and s["rows"][1].get("draws"))
    detail = _detail(_browse(page, "sample=" + quote(drawn["id"], safe=""), tmp_path / "profile"))
    card = next(c for c in detail.find_all("div") if c.attrs.get("class") == "card" and c.attrs.get("data-run") == "1")
    draws = drawn["rows"][1]["draws"]
    assert f"{len(draws)} predictions (draws)" in card.text()
    shown = [d for d in card.find_all("div") if d.attrs.get("class") == "draw"]
    assert len(shown) == len(draws)
    for node, draw in zip(shown, draws, strict=True):
        assert node.find_all("pre")[0].text() == draw["prediction"]
        roles = [m.attrs["data-role"] for m in node.find_all("div") if m.attrs.get("class") == "msg"]
        assert roles == [m["role"] for m in draw["transcript"]]


def test_html_in_a_prediction_is_text(page: Path, runs: tuple[Path, Path], tmp_path: Path) -> None:
    hostile = next(
        s for s in view_data(list(runs))["samples"] if s["rows"][1] and s["rows"][1]["prediction"] == HOSTILE
    )
    dom = _browse(page, "sample=" + quote(hostile["id"], safe=""), tmp_path / "profile")
    titles = [t.text() for t in dom.find_all("title")]
    assert titles and "pwned" not in titles[0]
    assert not dom.find_all("img")  # the markup did not become elements
    assert len(dom.find_all("script")) == 2
    card = next(
        c for c in _detail(dom).find_all("div") if c.attrs.get("class") == "card" and c.attrs.get("data-run") == "1"
    )
    prediction = next(p for p in card.find_all("pre") if p.attrs.get("class") == "prediction")
    assert prediction.text() == HOSTILE  # shown as the text it is
    assert "SyntaxError: invalid syntax" in card.text()


def test_screenshots(page: Path, runs: tuple[Path, Path], tmp_path: Path) -> None:
    from PIL import Image

    samples = view_data(list(runs))["samples"]
    talked = _talked(samples)
    views = {  # name: (fragment, least share of dark pixels: text)
        "side-by-side": ("sample=" + quote(talked, safe=""), 0.01),
        "errors": ("error=any", 0.01),
        "filtered-empty": ("q=no-such-text-anywhere", 0.002),
    }
    for name, (fragment, dark) in views.items():
        shot = tmp_path / f"view-{name}.png"
        subprocess.run(
            [
                _chromium(),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={tmp_path / 'profile'}",
                "--window-size=1400,1000",
                f"--screenshot={shot}",
                f"{page.as_uri()}#{fragment}",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        image = Image.open(shot).convert("RGB")
        assert image.size == (1400, 1000)
        grey = image.convert("L")
        assert sum(grey.histogram()[:128]) > dark * 1400 * 1000, f"{name}: the page rendered (almost) blank"
        if name == "side-by-side":  # score colours: the green of exact_match 1.000 is on the page
            colours = image.getcolors(maxcolors=1 << 20) or []
            assert any(g > r + 30 and g > b + 30 for _, (r, g, b) in colours), "no score colour on the page"


class _DevTools:
    """Chromium driven over the DevTools protocol: key presses and clicks that a URL cannot express."""

    def __init__(self, chromium: str, url: str, profile: Path) -> None:
        from websockets.sync.client import connect

        self.closing = contextlib.ExitStack()
        self.process = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + 60
            while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("Chromium did not open its DevTools port")
                time.sleep(0.05)  # polling for the file Chromium writes, not waiting for an effect
            port = port_file.read_text().splitlines()[0]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
                target = next(t for t in json.load(answer) if t["type"] == "page")
            self.socket = self.closing.enter_context(connect(target["webSocketDebuggerUrl"], max_size=None))
            self.ids = iter(range(1, 1 << 30))
            self.events: list[str | None] = []
            self.call("Page.enable")
            self.call("Page.navigate", url=url)
            while "Page.loadEventFired" not in self.events:  # the page's code has run
                self.events.append(json.loads(self.socket.recv(timeout=60)).get("method"))
        except BaseException:
            self.close()
            raise

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self.ids)
        self.socket.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=30))
            self.events.append(message.get("method"))
            if message.get("id") == number:
                assert "error" not in message, message
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def key(self, key: str, code: str, text: str = "") -> None:
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key=key, code=code, text=text if kind == "keyDown" else "")

    def close(self) -> None:
        self.closing.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def test_keys_and_controls_move_and_write_the_url(page: Path, runs: tuple[Path, Path], tmp_path: Path) -> None:
    chromium = _chromium()
    pytest.importorskip("websockets", reason="websockets is not installed: keys are not tested (URLs are)")
    ids = [s["id"] for s in view_data(list(runs))["samples"]]
    browser = _DevTools(chromium, page.as_uri(), tmp_path / "profile")
    try:
        selected = "document.querySelector('#list li.selected').dataset.sample"
        params = "Object.fromEntries(new URLSearchParams(location.hash.slice(1)))"
        assert browser.evaluate(selected) == ids[0]
        browser.key("j", "KeyJ", "j")
        browser.key("ArrowDown", "ArrowDown")
        assert browser.evaluate(selected) == ids[2]
        assert browser.evaluate(params)["sample"] == ids[2]  # the URL follows: a link reproduces the view
        browser.key("k", "KeyK", "k")
        assert browser.evaluate(selected) == ids[1]
        browser.evaluate("document.querySelectorAll('#list li')[4].click()")
        assert browser.evaluate(params)["sample"] == ids[4]
        browser.evaluate(
            "const t = document.getElementById('task'); t.value = 'output'; t.dispatchEvent(new Event('change'))"
        )
        assert browser.evaluate(params) == {"task": "output", "sample": ids[6]}  # the selection follows the filter
        browser.key("/", "Slash", "/")
        assert browser.evaluate("document.activeElement.id") == "q"
        browser.key("j", "KeyJ", "j")  # typed into the search box, not a move
        assert browser.evaluate("document.getElementById('q').value") == "j"
        assert browser.evaluate(params)["q"] == "j"
    finally:
        browser.close()
