"""The HTML report of an eval-set (``OUT/report.html``): the grid's table, a plot of each metric per setting with
its interval, and like with like: for each agent and task, its first observation mode paired with each other
one on the samples they share (as ``themisto compare`` and ``themisto report`` pair runs)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from themisto_env.metrics import METRICS
from themisto_env.run.report import CSS, estimate_cell, img_tag, paired_section, png_base64

FIGURES = ("reward", "tool_calls", "tokens")
"""The per-sample figures of a grid row, after the metrics."""


def _label(row: dict[str, Any]) -> str:
    return f"{row['agent']} ({row['observation']})"


def _plot(rows: list[dict[str, Any]]) -> str:
    """Each metric and the reward per setting, with its interval: a panel per measure, a bar per setting,
    settings grouped by task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = [*METRICS, "reward"]
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(len(tasks), len(measures), figsize=(3.2 * len(measures), 2.9 * len(tasks)), squeeze=False)
    colours = {"static": "#8c959f", "full": "#0969da", "tools": "#1a7f37"}
    for i, task in enumerate(tasks):
        these = [r for r in rows if r["task"] == task]
        for j, measure in enumerate(measures):
            ax = axes[i, j]
            for k, row in enumerate(these):
                m = row.get(measure)
                if not m:
                    continue
                err = [[m["mean"] - m["ci_low"]], [m["ci_high"] - m["mean"]]]
                ax.bar(k, m["mean"], 0.7, yerr=err, capsize=3, color=colours.get(row["observation"], "#8250df"))
            ax.set_xticks(range(len(these)), [_label(r) for r in these], rotation=30, ha="right", fontsize=7)
            ax.set_title(f"{task}: {measure}", fontsize=9)
            ax.set_ylim(min(0.0, *(r[measure]["ci_low"] for r in these if r.get(measure))), 1)
    fig.tight_layout()
    data = png_base64(fig)
    plt.close(fig)
    return data


def grid_table_html(rows: list[dict[str, Any]]) -> str:
    """The grid's table: a row per setting, each metric and per-sample figure with its interval."""
    head = (
        "".join(f"<th>{m}</th>" for m in METRICS)
        + "<th>reward</th><th>tool calls / sample</th><th>tokens / sample</th>"
    )
    body = "".join(
        f"<tr><td>{html.escape(r['agent'])}</td><td>{html.escape(r['task'])}</td><td>{html.escape(r['observation'])}</td>"
        f'<td class="num">{r["samples"]}</td>'
        + "".join(estimate_cell(r.get(m)) for m in (*METRICS, *FIGURES))
        + f"<td>{html.escape(r['status'])}{': ' + html.escape(r['error']) if r.get('error') else ''}</td></tr>"
        for r in rows
    )
    return (
        "<table><tr><th>agent</th><th>task</th><th>observation</th><th>samples</th>"
        f"{head}<th>status</th></tr>{body}</table>"
    )


def render_grid_report(rows: list[dict[str, Any]], out: str | Path) -> str:
    """The eval-set report's HTML for the grid's rows (``eval-set.json``'s) under the folder ``out``."""
    out = Path(out)
    scored = [r for r in rows if r["samples"]]
    plot = img_tag(_plot(scored), "each metric per setting") if scored else ""
    paired = []
    for task in dict.fromkeys(r["task"] for r in scored):
        for agent in dict.fromkeys(r["family"] for r in scored if r["task"] == task):
            group = [out / r["run"] for r in scored if r["task"] == task and r["family"] == agent]
            if len(group) > 1:
                section = paired_section(group).replace("<h2>Paired comparison</h2>", "")
                paired.append(f"<h2>{html.escape(agent)} on {html.escape(task)}: like with like</h2>{section}")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>themisto-env eval-set</title><style>{CSS}</style></head>
<body>
<h1>themisto-env eval-set</h1>
<p class="muted">{len(rows)} settings in {html.escape(str(out))}. Means over the scored samples with 95% bootstrap
intervals that resample whole trajectories; reward, tool calls and tokens are per sample.</p>
<h2>The grid</h2>
{grid_table_html(rows)}
<h2>Metrics per setting</h2>{plot}
{"".join(paired)}
</body></html>
"""


def _md(m: dict[str, float] | None, digits: int = 3) -> str:
    return f"{m['mean']:.{digits}f} [{m['ci_low']:.{digits}f}, {m['ci_high']:.{digits}f}]" if m else ""


def _signed(d: dict[str, Any]) -> str:
    mark = "**" if d["significant"] else ""
    return f"{mark}{d['mean_diff']:+.3f}{mark} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"


def grid_markdown(rows: list[dict[str, Any]], out: str | Path) -> str:
    """The grid as Markdown (``OUT/eval-set.md``, and the tables docs/eval-set.md publishes): the settings'
    table, then for each agent family and task each mode minus the first mode, paired on the shared samples."""
    from themisto_env.run.compare import compare_runs

    out = Path(out)
    lines = [
        "| agent | task | observation | samples | EM | ROUGE-L | chrF | reward | tool calls / sample | tokens"
        " / sample |",
        "| --- | --- | --- | ---: | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        cells = [_md(r.get(m)) for m in (*METRICS, "reward")] + [_md(r.get("tool_calls"), 2), _md(r.get("tokens"), 0)]
        lines.append(
            f"| {r['agent']} | {r['task']} | {r['observation']} | {r['samples']} | " + " | ".join(cells) + " |"
        )
    paired = [
        "",
        "| agent | task | difference | EM | ROUGE-L | chrF | reward |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    scored = [r for r in rows if r["samples"]]
    for task in dict.fromkeys(r["task"] for r in scored):
        for family in dict.fromkeys(r["family"] for r in scored if r["task"] == task):
            group = [r for r in scored if r["task"] == task and r["family"] == family]
            for other in group[1:]:
                result = compare_runs(out / other["run"], out / group[0]["run"])
                diffs = [_signed(result["metrics"][m]) for m in METRICS] + [_signed(result["per_sample"]["reward"])]
                what = f"{other['observation']} - {group[0]['observation']} ({result['shared_samples']} samples)"
                paired.append(f"| {family} | {task} | {what} | " + " | ".join(diffs) + " |")
    return "\n".join(lines + (paired if len(paired) > 3 else [])) + "\n"


def write_grid_report(rows: list[dict[str, Any]], out: str | Path) -> Path:
    """Write ``OUT/report.html`` for the grid and return its path."""
    path = Path(out) / "report.html"
    path.write_text(render_grid_report(rows, out), encoding="utf-8")
    return path


__all__ = ["FIGURES", "grid_markdown", "grid_table_html", "render_grid_report", "write_grid_report"]
