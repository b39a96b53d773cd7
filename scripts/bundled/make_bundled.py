"""Generate the bundled JuNE event log by playing the scripted sessions in real kernels.

Every ``session_*.py`` module in this folder defines ``SESSION``, a
`SessionScript`: what a person did in one kernel of one notebook, step by step. This
script plays each session in a real ipykernel (a fresh one per session, restarted where the script
restarts it), captures the real outputs and execution times, and writes the JuNE events (``create``,
``execute``, ``finished_execute``, ``error``, ``delete``, ``rendered``, ``kernel_restarting``,
``save_notebook``, ``notebook_renamed``) with a seeded, human-like clock (think time before each cell,
the real execution time during it). Sessions of different people may overlap in time; ``action_id``
follows time over the whole log, as in JuNE.

Large rich outputs are trimmed to keep the log small: ``image/png`` over `PNG_LIMIT` and
``text/html`` over `HTML_LIMIT` characters (scikit-learn's estimator diagrams) are left out and
the omission is noted in the output's metadata (``{"themisto": {"omitted": {mime: size}}}``); the
``text/plain`` of every output is always kept.

By default every session is played twice, the second time under another ``PYTHONHASHSEED``, and the
outputs are compared (text of streams, ``text/plain``, error names and values, mime types): the log is
written only if both plays agree, so that replaying it reproduces its outputs.

Usage::

    python scripts/bundled/make_bundled.py            # writes themisto_env/data/bundled/bundled/june_log.jsonl
    python scripts/bundled/make_bundled.py --no-check --out /tmp/log.jsonl
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from script import Delete, Markdown, Pause, Rename, Restart, Run, Save, SessionScript  # noqa: E402

from themisto_env.data.june import read_sessions  # noqa: E402
from themisto_env.data.june_events import JuneEvent  # noqa: E402
from themisto_env.data.june_files import write_events  # noqa: E402
from themisto_env.sandbox.outputs import OutputCollector  # noqa: E402

REPO = HERE.parent.parent
DEFAULT_OUT = REPO / "themisto_env" / "data" / "bundled" / "june_log.jsonl"
PNG_LIMIT = 24_000
HTML_LIMIT = 8_000
CELL_TIMEOUT_S = 120.0
AUTOSAVE_S = 300.0
SUSPICIOUS = re.compile(r" at 0x[0-9a-f]+|/tmp/|ipykernel_\d+|\d{2}:\d{2}:\d{2}\.\d{3}")


@dataclass
class Played:
    """What one play of a session produced."""

    events: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[list[dict[str, Any]]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    final_order: list[str] = field(default_factory=list)
    final_cells: dict[str, dict[str, Any]] = field(default_factory=dict)


class _Kernel:
    """A real ipykernel driven through jupyter_client, sending cell ids like a notebook frontend."""

    def __init__(self, workdir: Path, hash_seed: int) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "JPY_SESSION_NAME")}
        env["PYTHONHASHSEED"] = str(hash_seed)
        self.manager = KernelManager(
            kernel_name="python3",
            connection_file=str(workdir / "kernel.json"),
            transport="ipc",
            ip=str(workdir / "k"),
        )
        self.manager.start_kernel(cwd=str(workdir), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def execute(self, code: str, cell_id: str) -> tuple[list[dict[str, Any]], float, int | None]:
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        msg = self.client.session.msg("execute_request", content, metadata={"cellId": cell_id})
        started = time.perf_counter()
        self.client.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        collector = OutputCollector()
        while True:
            reply = self.client.get_iopub_msg(timeout=CELL_TIMEOUT_S)
            if reply["parent_header"].get("msg_id") != msg_id:
                continue
            if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
                break
            collector.add_message(reply)
        outputs = collector.finish()
        duration = time.perf_counter() - started
        shell = self.client.get_shell_msg(timeout=CELL_TIMEOUT_S)
        while shell["parent_header"].get("msg_id") != msg_id:
            shell = self.client.get_shell_msg(timeout=CELL_TIMEOUT_S)
        return [_shrink(o) for o in outputs], duration, shell["content"].get("execution_count")

    def restart(self) -> None:
        self.manager.restart_kernel(now=False)
        self.client.wait_for_ready(timeout=60)

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=False)


def _shrink(output: dict[str, Any]) -> dict[str, Any]:
    data = output.get("data")
    if not isinstance(data, dict):
        return output
    omitted = {}
    for mime, limit in (("image/png", PNG_LIMIT), ("text/html", HTML_LIMIT)):
        value = data.get(mime)
        if isinstance(value, str | list) and len("".join(value)) > limit:
            omitted[mime] = len("".join(value))
    if not omitted:
        return output
    output = dict(output)
    output["data"] = {k: v for k, v in data.items() if k not in omitted}
    output["metadata"] = {**output.get("metadata", {}), "themisto": {"omitted": omitted}}
    return output


class _Clock:
    """A person's clock: think time before each action, real execution time during a cell."""

    def __init__(self, start: str, seed: str) -> None:
        self.now = datetime.fromisoformat(start)
        self.rng = random.Random(seed)

    def think(self, seconds: float) -> datetime:
        self.now += timedelta(milliseconds=max(1, round(seconds * 1000)))
        return self.now

    def noise(self, median: float, spread: float = 0.5) -> float:
        return median * math.exp(self.rng.gauss(0.0, spread))

    def before_new_cell(self, source: str) -> float:
        return self.noise(6.0) + len(source) / self.rng.uniform(3.0, 6.0)

    def before_edit(self, old: str, new: str, after_error: bool) -> float:
        import difflib

        changed = sum(len(s) for tag, s in _diff_chunks(difflib.SequenceMatcher(None, old, new), new) if tag != "equal")
        reading = self.noise(12.0) if after_error else 0.0
        return reading + self.noise(4.0) + changed / self.rng.uniform(2.5, 5.0)

    def before_rerun(self) -> float:
        return self.noise(2.5, 0.6)


def _diff_chunks(matcher: Any, new: str) -> list[tuple[str, str]]:
    return [(tag, new[j1:j2] or "x" * (i2 - i1)) for tag, i1, i2, j1, j2 in matcher.get_opcodes()]


def play(script: SessionScript, *, hash_seed: int, opened: Played | None = None) -> Played:
    """Play a session in a fresh kernel and return its events (without action ids) and outputs.

    Args:
        script: The session.
        hash_seed: ``PYTHONHASHSEED`` of the kernel (plays under two seeds must agree).
        opened: The play of the session this one continues: the notebook starts with its cells.

    Returns:
        The events as JuneEvent field dicts, and each execution's outputs.
    """
    played = Played()
    clock = _Clock(script.start, script.slug)
    notebook_name = script.notebook_name
    order: list[str] = list(opened.final_order) if opened else []
    cells: dict[str, dict[str, Any]] = (
        {label: {**cell, "count": None} for label, cell in opened.final_cells.items()} if opened else {}
    )
    last_error = False
    last_save = clock.now

    def emit(kind: str, label: str | None = None, **fields: Any) -> None:
        cell = cells.get(label) if label else None
        event = {
            "time": clock.now,
            "session_id": script.session_id(),
            "kernel_id": script.kernel_id(),
            "notebook_name": notebook_name,
            "event": kind,
            "cell_index": cell["id"] if cell else None,
            "cell_num": float(order.index(label)) if cell and label in order else None,
            "cell_type": cell["cell_type"] if cell else None,
            "cell_source": cell["source"] if cell else None,
            "cell_output": None,
            "user_id": script.user_id,
            "expert": script.expert,
        }
        event.update(fields)
        played.events.append(event)

    def place(label: str, after: str | None, cell_type: str) -> None:
        cells[label] = {"id": script.cell_id(label), "cell_type": cell_type, "source": "", "count": None}
        order.insert(order.index(after) + 1 if after else len(order), label)
        emit("create", label)

    def save_notebook() -> None:
        nonlocal last_save
        listing = [
            {
                "id": cells[label]["id"],
                "cell_type": cells[label]["cell_type"],
                "source": cells[label]["source"],
                **({"execution_count": cells[label]["count"]} if cells[label]["cell_type"] == "code" else {}),
            }
            for label in order
        ]
        emit("save_notebook", cell_source=json.dumps(listing, ensure_ascii=False))
        last_save = clock.now

    with tempfile.TemporaryDirectory(prefix=f"themisto-{script.slug}-") as tmp:
        kernel = _Kernel(Path(tmp), hash_seed)
        try:
            save_notebook()
            for step in script.steps:
                if isinstance(step, Run):
                    if step.cell not in cells:
                        if step.source is None:
                            raise ValueError(f"{script.slug}: first run of {step.cell!r} needs a source")
                        clock.think(clock.noise(2.0))
                        place(step.cell, step.after, "code")
                        think = clock.before_new_cell(step.source)
                    elif step.source is not None and step.source != cells[step.cell]["source"]:
                        think = clock.before_edit(cells[step.cell]["source"], step.source, last_error)
                    else:
                        think = clock.before_rerun() + (clock.noise(5.0) if last_error else 0.0)
                    cell = cells[step.cell]
                    if step.source is not None:
                        cell["source"] = step.source
                    clock.think(step.think if step.think is not None else think)
                    emit("execute", step.cell)
                    outputs, duration, count = kernel.execute(cell["source"], cell["id"])
                    cell["count"] = count
                    finish = clock.now + timedelta(milliseconds=max(1, round(duration * 1000)))
                    error = [o for o in outputs if o["output_type"] == "error"]
                    if error:
                        clock.now = finish - timedelta(milliseconds=1)
                        emit("error", step.cell, cell_output=error)
                    clock.now = finish
                    emit("finished_execute", step.cell, cell_output=outputs)
                    played.outputs.append(outputs)
                    played.labels.append(step.cell)
                    last_error = bool(error)
                elif isinstance(step, Markdown):
                    if step.cell not in cells:
                        clock.think(clock.noise(2.0))
                        place(step.cell, step.after, "markdown")
                    clock.think(clock.noise(5.0) + len(step.text) / clock.rng.uniform(3.0, 6.0))
                    cells[step.cell]["source"] = step.text
                    emit("rendered", step.cell)
                elif isinstance(step, Delete):
                    clock.think(clock.noise(3.0))
                    emit("delete", step.cell)
                    order.remove(step.cell)
                    del cells[step.cell]
                elif isinstance(step, Restart):
                    clock.think(clock.noise(4.0))
                    emit("kernel_restarting")
                    kernel.restart()
                    for cell in cells.values():
                        cell["count"] = None
                    clock.think(clock.noise(1.5, 0.2))
                elif isinstance(step, Save):
                    clock.think(clock.noise(1.0))
                    save_notebook()
                elif isinstance(step, Rename):
                    clock.think(clock.noise(8.0))
                    notebook_name = step.name
                    emit("notebook_renamed")
                elif isinstance(step, Pause):
                    clock.think(step.seconds)
                if (clock.now - last_save).total_seconds() > AUTOSAVE_S:
                    save_notebook()
            clock.think(clock.noise(3.0))
            save_notebook()
        finally:
            kernel.close()
    played.final_order = order
    played.final_cells = cells
    return played


def _comparable(outputs: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    result: list[tuple[str, ...]] = []
    for out in outputs:
        kind = out["output_type"]
        if kind == "stream":
            result.append((kind, out["name"], out["text"]))
        elif kind == "error":
            result.append((kind, out["ename"], out["evalue"]))
        else:
            data = out.get("data", {})
            result.append((kind, str(data.get("text/plain", "")), ",".join(sorted(data))))
    return result


def _load_scripts(names: list[str] | None) -> list[SessionScript]:
    scripts = []
    for path in sorted(HERE.glob("session_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        script: SessionScript = module.SESSION
        if names is None or script.slug in names:
            scripts.append(script)
    return scripts


def _summary(path: Path, scripts: list[SessionScript]) -> dict[str, Any]:
    sessions = read_sessions(path)
    tasks = {s.kernel_id(): s for s in scripts}
    rows = []
    for session in sessions:
        seen: dict[str | None, str] = {}
        edits = reruns = out_of_order = 0
        last_num = -1.0
        for e in session.executions:
            if e.cell_id in seen:
                if seen[e.cell_id] != e.source:
                    edits += 1
                else:
                    reruns += 1
            seen[e.cell_id] = e.source
            if e.cell_num is not None:
                if e.cell_num < last_num and not e.restarted_before:
                    out_of_order += 1
                last_num = e.cell_num
        script = tasks[session.key]
        rows.append(
            {
                "session": script.slug,
                "kernel_id": session.key,
                "notebook": session.notebook_name,
                "task": script.task,
                "user_id": session.user_id,
                "executions": len(session.executions),
                "errors": len(session.errors),
                "error_names": dict(Counter(e.error["ename"] for e in session.errors if e.error)),
                "restarts": session.restarts,
                "deleted_cells": len(session.deleted_cell_ids),
                "edits": edits,
                "reruns": reruns,
                "out_of_order": out_of_order,
                "minutes": round(((session.end_time - session.start_time).total_seconds()) / 60, 1)
                if session.start_time and session.end_time
                else None,
                "events": sum(session.event_counts.values()),
            }
        )
    return {
        "file": path.name,
        "size_bytes": path.stat().st_size,
        "sessions": len(sessions),
        "notebooks": len({s.notebook_name for s in sessions}),
        "executions": sum(r["executions"] for r in rows),
        "errors": sum(r["errors"] for r in rows),
        "restarts": sum(r["restarts"] for r in rows),
        "per_session": rows,
    }


def main(argv: list[str] | None = None) -> int:
    """Play the sessions, check they replay identically, write the log and its summary."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the log to write (.jsonl, .csv, ...)")
    parser.add_argument("--session", action="append", help="play only this session slug (repeatable)")
    parser.add_argument("--no-check", action="store_true", help="play once; skip the determinism check")
    args = parser.parse_args(argv)

    scripts = _load_scripts(None)
    selected = [s for s in scripts if args.session is None or s.slug in args.session]
    if not selected:
        parser.error("no sessions found")
    plays: dict[str, Played] = {}
    all_events: list[tuple[datetime, int, int, dict[str, Any]]] = []
    failures = 0
    by_slug = {s.slug: s for s in scripts}
    needed: set[str] = set()
    for chosen in selected:
        slug: str | None = chosen.slug
        while slug is not None and slug not in needed:
            needed.add(slug)
            slug = by_slug[slug].continues if slug in by_slug else None
    for number, script in enumerate(scripts):
        if script.slug not in needed:
            continue
        opened = plays.get(script.continues) if script.continues else None
        if script.continues and opened is None:
            raise SystemExit(f"{script.slug} continues {script.continues!r}, which is not an earlier session")
        if script not in selected:  # played only to open the notebook of a selected session
            plays[script.slug] = play(script, hash_seed=1, opened=opened)
            continue
        started = time.perf_counter()
        played = plays[script.slug] = play(script, hash_seed=1, opened=opened)
        note = ""
        if not args.no_check:
            again = play(script, hash_seed=2, opened=opened)
            bad = [
                (i, label)
                for i, (label, a, b) in enumerate(zip(played.labels, played.outputs, again.outputs, strict=True))
                if _comparable(a) != _comparable(b)
            ]
            failures += len(bad)
            note = f", replay agreement {len(played.outputs) - len(bad)}/{len(played.outputs)}"
            for i, label in bad:
                print(f"  NOT DETERMINISTIC: execution {i} (cell {label!r})", file=sys.stderr)
                print(f"    first:  {_comparable(played.outputs[i])}", file=sys.stderr)
                print(f"    second: {_comparable(again.outputs[i])}", file=sys.stderr)
        for i, (label, outputs) in enumerate(zip(played.labels, played.outputs, strict=True)):
            text = json.dumps(_comparable(outputs))
            if SUSPICIOUS.search(text):
                print(
                    f"  warning: {script.slug} execution {i} (cell {label!r}) output looks machine- or "
                    f"time-dependent: {SUSPICIOUS.search(text).group(0)!r}",
                    file=sys.stderr,
                )  # type: ignore[union-attr]
        print(f"{script.slug}: {len(played.outputs)} executions in {time.perf_counter() - started:.1f}s{note}")
        all_events.extend((e["time"], number, seq, e) for seq, e in enumerate(played.events))
    if failures:
        print(
            f"{failures} executions differ between two plays: fix the sessions; nothing written",
            file=sys.stderr,
        )
        return 1
    all_events.sort(key=lambda item: item[:3])
    events = [JuneEvent(action_id=i, **e) for i, (_, _, _, e) in enumerate(all_events)]
    write_events(args.out, events)
    summary = _summary(args.out, selected)
    if args.out == DEFAULT_OUT:
        (args.out.parent / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in summary.items() if k != "per_session"}))
    for row in summary["per_session"]:
        print(
            f"  {row['session']:<22} {row['notebook']:<28} execs={row['executions']:<4}"
            f" errors={row['errors']:<3}"
            f" restarts={row['restarts']} deleted={row['deleted_cells']} edits={row['edits']}"
            f" reruns={row['reruns']} out_of_order={row['out_of_order']} minutes={row['minutes']}"
            f" {row['error_names']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
