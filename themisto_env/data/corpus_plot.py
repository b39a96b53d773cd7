"""The per-notebook table as a plot: per notebook, a stacked bar of kept samples and drops by cause, per task.

Drawn with matplotlib (Agg) from `themisto_env.data.corpus.CorpusTable.to_json`, as
``themisto data info --plot FILE`` writes it and the run report (`themisto_env.run.report`) embeds it.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from themisto_env.data.samples import TASKS
from themisto_env.errors import ConfigError

PLOTTED = 30
"""At most this many notebooks are drawn (those with most drops); the title says how many are left out."""
FORMATS = ("png", "svg")
"""The image formats a plot file can have (by its suffix)."""
KEPT_COLOUR = "#1a7f37"


def _figure(corpus: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = corpus["notebooks"]
    dropped = {id(r): sum(sum(r["dropped"][t].values()) for t in TASKS) for r in rows}
    if len(rows) > PLOTTED:
        rows = sorted(rows, key=lambda r: -dropped[id(r)])[:PLOTTED]
    causes = list(dict.fromkeys(c for task in TASKS for c in corpus["total"]["dropped"][task]))
    palette = plt.get_cmap("tab20")
    colours = {cause: palette(i % 20) for i, cause in enumerate(causes)}
    names = [r["notebook"] for r in rows]
    y = np.arange(len(rows))
    fig, axes = plt.subplots(1, len(TASKS), figsize=(11, 1.2 + 0.32 * max(len(rows), 1)), sharey=True, squeeze=False)
    for ax, task in zip(axes[0], ("output", "next-cell"), strict=True):
        left = np.array([r["kept"][task] for r in rows], dtype=float)
        ax.barh(y, left, color=KEPT_COLOUR, label="kept")
        for cause in causes:
            widths = np.array([r["dropped"][task].get(cause, 0) for r in rows], dtype=float)
            if widths.any():
                ax.barh(y, widths, left=left, color=colours[cause], label=f"dropped: {cause}")
                left += widths
        ax.set_title(f"{task} samples")
        ax.set_xlabel("samples")
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_yticks(y, names, fontsize=8)
    axes[0][0].invert_yaxis()
    left_out = len(corpus["notebooks"]) - len(rows)
    more = f" ({PLOTTED} with most drops; {left_out} more not drawn)" if left_out else ""
    fig.suptitle(f"kept and dropped samples per notebook{more}", fontsize=10)
    fig.tight_layout()
    return fig


def corpus_image(corpus: dict[str, Any], fmt: str = "png") -> bytes:
    """The plot as image bytes (``png`` or ``svg``)."""
    if fmt not in FORMATS:
        raise ConfigError(f"a plot is {' or '.join(FORMATS)}, not {fmt!r}")
    fig = _figure(corpus)
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=fmt, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buf.getvalue()


def write_corpus_plot(corpus: dict[str, Any], path: str | Path) -> Path:
    """Write the plot to ``path``, PNG or SVG by its suffix.

    Raises:
        ConfigError: The suffix is neither ``.png`` nor ``.svg``.
    """
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise ConfigError(f"--plot {path}: give a .png or .svg file")
    path.write_bytes(corpus_image(corpus, fmt))
    return path


__all__ = ["FORMATS", "PLOTTED", "corpus_image", "write_corpus_plot"]
