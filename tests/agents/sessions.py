"""Two small development sessions for the agent tests, written as a JuNE event log.

Cells a person would run while exploring a DataFrame and a few Python values: many end by displaying
a variable (``df.shape``, ``df.head()``, ``len(df)``, ...), which is what ``runtime-rules`` answers from
the kernel, two fail (a module used before its import, a column that does not exist), and some define
a variable and show nothing, which its next-cell rule looks at.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from themisto_env.data.june_events import JuneEvent
from themisto_env.data.june_files import write_events

SESSIONS: dict[str, list[str]] = {
    "k-frames": [
        "import pandas as pd\nimport numpy as np",
        "df = pd.DataFrame({'a': np.arange(40), 'b': np.arange(40) * 2.5, 'c': list('wxyz') * 10})",
        "df.shape",
        "df.head()",
        "df.describe()",
        "df['d'] = df['a'] ** 2",
        "df.shape",
        "len(df)",
        "df.dtypes",
        "df.head(3)",
        "total = df['b'].sum()",
        "total",
        "type(total)",
        "small = df[df.a < 5]",
        "small.shape",
        "small",
        "small.shape, len(df)",
        "df['e'].sum()",
        "df.info()",
    ],
    "k-values": [
        "scores = [0.81, 0.79, 0.84]",
        "len(scores)",
        "best = max(scores)",
        "best",
        "statistics.median(scores)",
        "import statistics\nmean = statistics.mean(scores)",
        "mean",
        "params = {'model': 'rf', 'depth': 4}",
        "params",
        "print(f'best score {best:.2f}')",
        "names = sorted(params)\nnames",
    ],
}


def write_log(path: Path) -> Path:
    """Write `SESSIONS` as a JuNE JSON Lines log (``execute``/``finished_execute`` pairs).

    Args:
        path: The ``.jsonl`` file to write.

    Returns:
        ``path``.
    """
    events: list[JuneEvent] = []
    clock = datetime(2023, 5, 6, 10, 0, 0)
    for kernel_id, cells in SESSIONS.items():
        for number, source in enumerate(cells):
            cell_id = f"{kernel_id[2:]:x<8}{number:024x}"[:32]
            for event, delay in (("execute", 20), ("finished_execute", 1)):
                clock += timedelta(seconds=delay)
                events.append(
                    JuneEvent(
                        action_id=len(events),
                        time=clock,
                        session_id=f"s-{kernel_id}",
                        kernel_id=kernel_id,
                        notebook_name=f"{kernel_id}.ipynb",
                        event=event,
                        cell_index=cell_id,
                        cell_num=float(number),
                        cell_type="code",
                        cell_source=source,
                        cell_output=[] if event == "finished_execute" else None,
                        user_id="tester",
                        expert=False,
                    )
                )
    write_events(path, events)
    return path
