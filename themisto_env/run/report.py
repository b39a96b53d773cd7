"""An HTML report of one or more runs (``themisto report RUN_DIR...``): tables and plots in one file.

Plots (matplotlib, embedded as PNG so the file stands alone): each metric by run with its bootstrap
interval; ROUGE-L along the trajectory (by position of the sample in its trajectory); tool usage by tool;
where the samples' time went (a stacked bar per sample: state, tools, model, scoring) and a histogram of
their wall time.
With several runs, the first is compared with each other one as ``themisto compare`` does (paired
differences with trajectory-bootstrap intervals, wins/ties/losses). Where the runs' dataset is still
there, how the samples' steps replay against what the person saw: agree / tolerated / disagree, by cause;
and "the data": per notebook of that dataset, its kept samples and its drops by cause
(`themisto_env.data.corpus`, as ``themisto data info`` prints them).
"""

from __future__ import annotations

import base64
import html
import io
from collections import Counter
from pathlib import Path
from typing import Any

from themisto_env.data.agreement import TOLERATED
from themisto_env.errors import DataError
from themisto_env.metrics import METRICS
from themisto_env.run.compare import compare_runs, run_label, scored_rows
from themisto_env.run.costs import PER_SAMPLE
from themisto_env.run.results import TIMING_KINDS, ResultRow
from themisto_env.run.summary import summarize
from themisto_env.run.view import default_page, run_dataset_folder, step_agreements

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1f2328; background: #fff; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d0d7de; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #d0d7de; padding: 0.35rem 0.7rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #eee; border-radius: 6px; }
pre { margin: 0; white-space: pre-wrap; max-height: 12rem; overflow: auto; font-size: 0.8rem; }
.muted { color: #656d76; }
h3 { font-size: 1rem; margin-bottom: 0.2rem; } tr.significant td { font-weight: 600; }
"""


def png_base64(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _plots(runs: list[tuple[str, list[ResultRow], dict[str, Any]]]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    plots: dict[str, str] = {}
    width = 0.8 / max(len(runs), 1)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    x = np.arange(len(METRICS))
    for i, (label, _, summary) in enumerate(runs):
        means = [summary.get(m, {}).get("mean", 0.0) for m in METRICS]
        low = [mean - summary.get(m, {}).get("ci_low", mean) for m, mean in zip(METRICS, means, strict=True)]
        high = [summary.get(m, {}).get("ci_high", mean) - mean for m, mean in zip(METRICS, means, strict=True)]
        ax.bar(x + i * width, means, width, yerr=[low, high], capsize=3, label=label)
    ax.set_xticks(x + width * (len(runs) - 1) / 2, METRICS)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean score (95% CI)")
    ax.legend(fontsize=8)
    plots["metrics"] = png_base64(fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    bins = np.linspace(0, 1, 6)
    for label, rows, _ in runs:
        last = Counter()
        for r in rows:
            last[r.trajectory_id] = max(last[r.trajectory_id], r.step)
        position = np.array([r.step / max(last[r.trajectory_id], 1) for r in rows])
        values = np.array([r.scores["rouge_l"] for r in rows])
        which = np.clip(np.digitize(position, bins) - 1, 0, len(bins) - 2)
        means = [values[which == b].mean() if (which == b).any() else np.nan for b in range(len(bins) - 1)]
        ax.plot((bins[:-1] + bins[1:]) / 2, means, marker="o", label=label)
    ax.set_xlabel("position of the sample in its trajectory (0 = start, 1 = end)")
    ax.set_ylabel("mean ROUGE-L")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    plots["trajectory"] = png_base64(fig)
    plt.close(fig)

    tools = sorted({c["tool"] for _, rows, _ in runs for r in rows for c in r.tool_calls})
    if tools:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        y = np.arange(len(tools))
        for i, (label, rows, _) in enumerate(runs):
            counts = Counter(c["tool"] for r in rows for c in r.tool_calls)
            ax.barh(y + i * width, [counts[t] for t in tools], width, label=label)
        ax.set_yticks(y + width * (len(runs) - 1) / 2, tools)
        ax.set_xlabel("tool calls")
        ax.legend(fontsize=8)
        plots["tools"] = png_base64(fig)
        plt.close(fig)
    return plots


TIMING_COLOURS = {"state": "#0969da", "tools": "#1a7f37", "model": "#8250df", "scoring": "#9a6700"}
"""The colour of each kind of a sample's time (as in ``themisto view``)."""
TIMED_SAMPLES_SHOWN = 80
"""At most this many samples per run in the per-sample timing plot (the first ones, in run order)."""


def _timing_plots(runs: list[tuple[str, list[ResultRow], dict[str, Any]]]) -> dict[str, str]:
    """Where the samples' time went: per sample a stacked bar (state, tools, model, scoring), a subplot per
    run with timed rows; and the histogram of the samples' wall time by run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    plots: dict[str, str] = {}
    timed = [(label, [r for r in rows if r.timing is not None][:TIMED_SAMPLES_SHOWN]) for label, rows, _ in runs]
    timed = [(label, rows) for label, rows in timed if rows]
    if timed:
        fig, axes = plt.subplots(len(timed), 1, figsize=(8, 2.6 * len(timed)), squeeze=False)
        for ax, (label, rows) in zip(axes[:, 0], timed, strict=True):
            x, bottom = np.arange(len(rows)), np.zeros(len(rows))
            for kind in TIMING_KINDS:
                values = np.array([getattr(r.timing, kind) for r in rows])
                ax.bar(x, values, 0.8, bottom=bottom, label=kind, color=TIMING_COLOURS[kind])
                bottom += values
            ax.set_title(label, fontsize=9)
            ax.set_ylabel("seconds")
            ax.set_xticks([])
        axes[-1, 0].set_xlabel("samples, in run order")
        axes[0, 0].legend(fontsize=8, ncols=4)
        plots["timing"] = png_base64(fig)
        plt.close(fig)
    seconds = [(label, [r.seconds for r in rows]) for label, rows, _ in runs if rows]
    if seconds:
        fig, ax = plt.subplots(figsize=(8, 3.2))
        top = max(max(values) for _, values in seconds)
        bins = np.linspace(0, top if top > 0 else 1, 31)
        for label, values in seconds:
            ax.hist(values, bins=bins, histtype="step", linewidth=1.5, label=label)
        ax.set_xlabel("wall time of a sample (s)")
        ax.set_ylabel("samples")
        ax.legend(fontsize=8)
        plots["latency"] = png_base64(fig)
        plt.close(fig)
    return plots


def _timing_section(runs: list[tuple[str, list[ResultRow], dict[str, Any]]]) -> str:
    """Where each run's time went: mean seconds per sample by kind, the wall time's median and p90, and
    the plots of `_timing_plots` (rows of older runs have no timing: their kinds are left empty)."""
    import numpy as np

    lines = []
    for label, rows, _ in runs:
        timed = [r.timing for r in rows if r.timing is not None]
        means = [sum(getattr(t, k) for t in timed) / len(timed) if timed else None for k in TIMING_KINDS]
        walls = [r.seconds for r in rows]
        p50, p90 = (np.percentile(walls, 50), np.percentile(walls, 90)) if walls else (0.0, 0.0)
        cells = "".join(f'<td class="num">{m:.3f}</td>' if m is not None else '<td class="num"></td>' for m in means)
        lines.append(
            f'<tr><td>{html.escape(label)}</td><td class="num">{len(timed)}</td>{cells}'
            f'<td class="num">{p50:.3f}</td><td class="num">{p90:.3f}</td></tr>'
        )
    plots = _timing_plots(runs)
    head = "".join(f"<th>{k} (s)</th>" for k in TIMING_KINDS)
    bars = img_tag(plots["timing"], "where each sample's time went") if "timing" in plots else ""
    latency = img_tag(plots["latency"], "wall time of the samples") if "latency" in plots else ""
    return (
        '<h2>Where the time went</h2><p class="muted">Mean seconds per sample: serving its state (restores, '
        "forks, replays), answering its tool calls, the agent (its model calls), scoring; each kind's own time "
        "(a state served for a tool call counts as state). Then the median and 90th percentile of a sample's "
        "wall time. <code>themisto run --trace FILE</code> records the spans behind these figures.</p>"
        f"<table><tr><th>run</th><th>timed samples</th>{head}<th>wall p50 (s)</th><th>wall p90 (s)</th></tr>"
        f"{''.join(lines)}</table>{bars}{latency}"
    )


def img_tag(data: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def estimate_cell(m: dict[str, float] | None) -> str:
    """A mean with its interval as a table cell (empty when absent)."""
    if m is None:
        return '<td class="num"></td>'
    return f'<td class="num">{m["mean"]:.3f} <span class="muted">[{m["ci_low"]:.3f}, {m["ci_high"]:.3f}]</span></td>'


def _draws_table(runs: list[tuple[str, list[ResultRow], dict[str, Any]]]) -> str:
    """pass@k and best-of-K of the runs with several attempts per sample (empty when none has)."""
    drawn = [(label, s) for label, _, s in runs if s.get("draws")]
    if not drawn:
        return ""
    ks = sorted({k for _, s in drawn for k in s.get("pass_at_k", {})}, key=int)
    head = "".join(f"<th>pass@{k}</th>" for k in ks) + "".join(f"<th>best-of-K {m}</th>" for m in METRICS)
    body = "".join(
        f'<tr><td>{html.escape(label)}</td><td class="num">{s["draws"]}</td>'
        + "".join(estimate_cell(s.get("pass_at_k", {}).get(k)) for k in ks)
        + "".join(estimate_cell(s["best_of_k"].get(m)) for m in METRICS)
        + "</tr>"
        for label, s in drawn
    )
    return (
        '<h2>K attempts per sample</h2><p class="muted">pass@k: unbiased estimate (Chen et al., 2021) over '
        "the execution score; best-of-K: per sample, the best of the K predictions on each text metric.</p>"
        f"<table><tr><th>run</th><th>K</th>{head}</tr>{body}</table>"
    )


def paired_section(run_dirs: list[str | Path]) -> str:
    """The first run against each other run: `themisto_env.run.compare.compare_runs` as tables."""
    if len(run_dirs) < 2:
        return ""
    tables = []
    for other in run_dirs[1:]:
        try:
            result = compare_runs(run_dirs[0], other)
        except DataError as error:
            tables.append(f'<p class="muted">{html.escape(str(error))}</p>')
            continue
        body = "".join(
            f"<tr{' class=significant' if d['significant'] else ''}><td>{m}</td>"
            f'<td class="num">{d["mean_a"]:.3f}</td><td class="num">{d["mean_b"]:.3f}</td>'
            f'<td class="num">{d["mean_diff"]:+.3f}</td>'
            f'<td class="num">[{d["ci_low"]:+.3f}, {d["ci_high"]:+.3f}]</td>'
            f"<td>{'yes' if d['significant'] else 'no'}</td>"
            + (
                f'<td class="num">{d["wins"]} / {d["ties"]} / {d["losses"]}</td></tr>'
                if "wins" in d
                else "<td></td></tr>"
            )
            for m, d in [*result["metrics"].items(), *result.get("per_sample", {}).items()]
        )
        tables.append(
            f"<h3>A = {html.escape(result['a'])} vs B = {html.escape(result['b'])}</h3>"
            f'<p class="muted">{result["shared_samples"]} shared samples in {result["shared_trajectories"]} '
            f"trajectories ({result['only_a']} only in A, {result['only_b']} only in B)</p>"
            '<table class="paired"><tr><th>metric</th><th>A</th><th>B</th><th>A - B</th><th>95% CI</th>'
            f"<th>significant</th><th>A wins / ties / B wins</th></tr>{body}</table>"
        )
    return (
        '<h2>Paired comparison</h2><p class="muted">Mean difference A - B on the samples both runs scored, '
        "with a paired bootstrap interval that resamples whole trajectories (samples of one trajectory are "
        "correlated); significant when the interval excludes 0. As <code>themisto compare</code>.</p>" + "".join(tables)
    )


def _agreement_section(run_dirs: list[str | Path], runs: list[tuple[str, list[ResultRow], dict[str, Any]]]) -> str:
    """Per run: how its samples' steps replay against what the person saw: agree / tolerated (timings,
    warnings) / disagree, by cause (read from the runs' datasets; empty when none is there)."""
    causes = step_agreements([Path(d) for d in run_dirs])
    if not causes:
        return ""
    lines = []
    for label, rows, _ in runs:
        kinds = Counter(causes[key]["kind"] for r in rows if (key := (r.trajectory_id, r.step)) in causes)
        if not kinds:
            continue
        tolerated = {k: n for k, n in kinds.items() if k in TOLERATED}
        rest = {k: n for k, n in kinds.items() if k not in TOLERATED and k != "ok"}
        parts = [f"agree {kinds['ok']}", f"tolerated {sum(tolerated.values())}", f"disagree {sum(rest.values())}"]
        why = ", ".join(f"{k} {n}" for k, n in sorted({**tolerated, **rest}.items(), key=lambda kv: -kv[1]))
        lines.append(f"<tr><td>{html.escape(label)}</td><td>{' / '.join(parts)}</td><td>{html.escape(why)}</td></tr>")
    if not lines:
        return ""
    return (
        "<h2>Replay agreement of the samples' steps</h2><p class=\"muted\">Whether each sample's step replays as "
        "the person saw it: agree / tolerated (timings, warnings) / disagree, and the causes "
        "(<code>themisto data info</code> explains them).</p><table><tr><th>run</th><th>agree / tolerated / "
        "disagree</th><th>causes</th></tr>" + "".join(lines) + "</table>"
    )


def _data_section(run_dirs: list[str | Path]) -> str:
    """The runs' datasets (those still there): per dataset its totals and the plot of kept and dropped samples
    per notebook (`themisto_env.data.corpus`, as ``themisto data info`` gives them)."""
    from themisto_env.data.corpus import corpus_table, describe_causes
    from themisto_env.data.corpus_plot import corpus_image
    from themisto_env.data.samples import TASKS
    from themisto_env.data.trajectory import read_trajectories

    parts = []
    for data in dict.fromkeys(run_dataset_folder(Path(d)) for d in run_dirs):
        try:
            table = corpus_table(read_trajectories(data)) if data is not None else None
        except (DataError, OSError):
            continue
        if table is None or not table.rows:
            continue
        total = table.total
        kept = "; ".join(
            f"{task} {total.kept[task]} kept, {total.dropped_total(task)} dropped "
            f"({describe_causes(total.top_causes(task))})"
            for task in TASKS
        )
        image = base64.b64encode(corpus_image(table.to_json())).decode()
        parts.append(
            f'<h3>{html.escape(str(data))}</h3><p class="muted">{len(table.rows)} notebooks, {total.trajectories} '
            f"sessions, {total.executions} executions; samples: {html.escape(kept)}</p>"
            + img_tag(image, "kept and dropped samples per notebook")
        )
    if not parts:
        return ""
    return (
        '<h2>The data</h2><p class="muted">The samples the rule kept of each notebook of the runs\' datasets, and '
        "why it dropped the others (<code>themisto data info</code> has the table).</p>" + "".join(parts)
    )


def render_report(run_dirs: list[str | Path]) -> str:
    """The report's HTML for the given run folders."""
    runs = []
    for run_dir in run_dirs:
        rows = scored_rows(run_dir)
        runs.append((run_label(rows, run_dir), list(rows.values()), summarize(list(rows.values()))))
    plots = _plots(runs)
    head = "".join(f"<th>{m}</th>" for m in METRICS)
    summary_rows = []
    for label, _, s in runs:
        cells = "".join(estimate_cell(s[m]) for m in METRICS)
        per_sample = "".join(estimate_cell(s.get("per_sample", {}).get(f)) for f in PER_SAMPLE)  # reward, tools, tokens
        summary_rows.append(
            f"<tr><td>{html.escape(label)}</td><td>{html.escape(str(s['task']))}</td>"
            f'<td class="num">{s["samples"]}</td>{cells}{per_sample}'
            f'<td class="num">{s["infrastructure_failures"]}</td></tr>'
        )
    examples = []
    label, rows, _ = runs[0]
    for r in sorted(rows, key=lambda r: r.scores["rouge_l"])[:5]:
        examples.append(
            f"<tr><td>{html.escape(r.sample_id)}</td><td><pre>{html.escape(r.target[:1500])}</pre></td>"
            f"<td><pre>{html.escape(r.prediction[:1500])}</pre></td>"
            f'<td class="num">{r.scores["rouge_l"]:.3f}</td></tr>'
        )
    tools = f"<h2>Tool usage</h2>{img_tag(plots['tools'], 'tool calls by tool')}" if "tools" in plots else ""
    agreement = _agreement_section(run_dirs, runs)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>themisto-env report</title><style>{CSS}</style></head>
<body>
<h1>themisto-env report</h1>
<p class="muted">{len(runs)} run(s): {html.escape(", ".join(str(d) for d in run_dirs))}</p>
<h2>Summary</h2>
<p class="muted">Means over the scored samples with 95% bootstrap intervals that resample whole trajectories
(samples of one trajectory are correlated).</p>
<table><tr><th>run</th><th>task</th><th>samples</th>{head}<th>reward</th><th>tool calls / sample</th>
<th>tokens / sample</th><th>infrastructure failures</th></tr>{"".join(summary_rows)}</table>
{_draws_table(runs)}
{paired_section(run_dirs)}
<h2>Metrics by run</h2>{img_tag(plots["metrics"], "metrics by run")}
<h2>Score along the trajectory</h2>{img_tag(plots["trajectory"], "ROUGE-L along the trajectory")}
{tools}
{_timing_section(runs)}
{agreement}
{_data_section(run_dirs)}
<h2>Hardest samples for {html.escape(label)}</h2>
<table><tr><th>sample</th><th>target</th><th>prediction</th><th>ROUGE-L</th></tr>{"".join(examples)}</table>
</body></html>
"""


def write_report(run_dirs: list[str | Path], out: str | Path | None = None) -> Path:
    """Write the report (default: `default_page`'s ``report.html``: the run's folder, or for several runs a
    folder of their own) and return its path."""
    path = Path(out) if out is not None else default_page(run_dirs, "report.html")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(run_dirs), encoding="utf-8")
    return path
