"""Reading the observation's history text back into cells."""

from __future__ import annotations

from themisto_env.agents import parse_history
from themisto_env.agents.history import HistoryCell
from themisto_env.env.observation import render_history
from themisto_env.env.tools import HistoryItem


def _render(items: list[HistoryItem], **options: int) -> str:
    settings = {"length": 10, "max_output_chars": 1500, "max_chars": 16000, **options}
    return render_history(items, **settings)


ITEMS = [
    HistoryItem(0, "import pandas as pd", ""),
    HistoryItem(
        1, "df = pd.read_csv('x.csv')\n\n# In [5]: a comment that looks like a header\ndf.head()", "   a  b\n0  1  2"
    ),
    HistoryItem(2, "print('a')\n\nprint('b')", "a\n\nb"),
    HistoryItem(3, "df.shape", "# Out [3]:\n(1, 2)"),
    HistoryItem(4, "for i in range(2):\n    print(i)", "0\n1"),
]


def test_parse_inverts_the_env_rendering() -> None:
    cells = parse_history(_render(ITEMS))
    assert cells == [HistoryCell(item.index + 1, item.source, item.output) for item in ITEMS]


def test_an_empty_history_has_no_cells() -> None:
    assert parse_history("") == []


def test_text_before_the_first_header_of_a_cut_history_is_ignored() -> None:
    text = _render(ITEMS)
    cut = text[text.index("print('b')") :]
    cells = parse_history(cut)
    assert [c.number for c in cells] == [4, 5]


def test_only_the_last_executions_are_shown_and_read() -> None:
    cells = parse_history(_render(ITEMS, length=2))
    assert [c.source for c in cells] == ["df.shape", "for i in range(2):\n    print(i)"]


def test_a_cut_output_keeps_its_marker() -> None:
    long = HistoryItem(0, "print('x' * 500)", "x" * 500)
    (cell,) = parse_history(_render([long], max_output_chars=100))
    assert cell.output.startswith("x" * 100) and cell.output.endswith("[400 more characters]")
