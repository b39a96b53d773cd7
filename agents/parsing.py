"""Reading a prediction out of what a model wrote.

Models are asked for the answer alone in one fenced block, and often write more: a lead-in, an
explanation, several blocks, an unclosed block, a reasoning section, or no fence at all.
`extract_prediction` reads the answer out of all of these (its docstring lists the rules, in order).
"""

from __future__ import annotations

import re
import textwrap
from typing import Literal

from themisto_env.syntax import parse as parse_python

Task = Literal["next-cell", "output"]

_CODE_TAGS = frozenset({"", "python", "py", "python3", "ipython", "ipython3", "jupyter"})
_OUTPUT_TAGS = frozenset({"", "text", "txt", "plaintext", "plain", "output", "console", "shell", "bash", "sh", "none"})

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_OPEN_THINK = re.compile(r"^\s*<(think|thinking|reasoning)>.*\Z", re.DOTALL | re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<(answer|cell|code|output)>\n?(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<tag>[\w+#.-]*)[^\n]*$", re.MULTILINE)

_PROSE = r"[\w ,'’.\-]*"
#: Lead-in lines dropped before an unfenced answer (case-insensitive, optionally in ``**bold**``): an
#: interjection ("Sure!", "Okay, here it is."), or a prose phrase ending in a colon that starts with one of
#: these words ("Here is the next cell:", "Based on the history, the next cell is:").
LEAD_INS = (
    r"(?:sure|okay|ok|certainly|of course|alright|great|absolutely)\b" + _PROSE + r"[!.,:]?",
    r"(?:here|the|my|i|i'd|i'll|based|given|looking|after|this|it|that|next|predicted|expected|likely|output|"
    r"result|prediction|answer|cell|code|source)\b" + _PROSE + r":",
)
_BOLD = r"(?:\*\*|__)?"
_LEAD_IN = re.compile(rf"^\s*{_BOLD}(?:{'|'.join(LEAD_INS)}){_BOLD}\s*$", re.IGNORECASE)
_LEAD_IN_INLINE = re.compile(
    rf"^\s*{_BOLD}(?:the |my )?(?:predicted |expected )?(?:next cell|cell output|output|result|prediction|answer)"
    rf"{_BOLD}\s*:\s*{_BOLD}\s*(?P<rest>\S.*)$",
    re.IGNORECASE,
)
#: Paragraphs after (or before) an unfenced answer that explain it rather than being part of it.
_COMMENTARY = re.compile(
    r"^\s*(?:\*\*)?(?:this|these|note|explanation|the (?:cell|code|output|result|dataframe|above|first|next)|"
    r"it (?:shows|prints|displays|returns|will|would)|here,|since|because|i (?:chose|predict|expect))\b",
    re.IGNORECASE,
)
_ANSWER_INTRO = re.compile(r"\b(?:next|answer|predict\w*|final|output|will)\b", re.IGNORECASE)
_OTHER_INTRO = re.compile(r"\b(?:previous|earlier|last|before|already)\b", re.IGNORECASE)
_INLINE_FENCE = re.compile(r"^\s*```(?P<content>[^`\n]+)```\s*$")
_IN_HEADER = re.compile(r"^\s*#?\s*In\s*\[\s*\d*\s*\]\s*:\s*$")
_OUT_HEADER = re.compile(r"^\s*#?\s*Out\s*\[\s*\d*\s*\]\s*:\s?")
_WORD = re.compile(r"[A-Za-z]{2,}")


def extract_prediction(reply: str, task: Task) -> str:
    """The predicted cell source or output in a model's reply.

    The rules, in order:

    1. Reasoning is removed: ``<think>...</think>`` / ``<thinking>...</thinking>`` sections (and an unclosed
       one at the start, up to the end of the reply).
    2. An explicit answer tag wins: the content of the last ``<answer>``, ``<cell>``, ``<code>`` or
       ``<output>`` element, and the rules below apply to that content.
    3. Fenced blocks (```` ``` ```` or ``~~~``, any language tag; also a one-line ```` ```df.info()``` ````):
       the blocks whose tag suits the task are the candidates (for ``next-cell``: ``python``, ``py``,
       ``python3``, ``ipython``, ``ipython3``, ``jupyter`` or no tag; for ``output``: no tag, ``text``,
       ``txt``, ``plaintext``, ``plain``, ``output``, ``console``, ``shell``, ``bash``, ``sh``, ``none``), or
       every block when none suits. Of several candidates, the first one introduced as the answer wins (the
       text before it says "next", "answer", "predict...", "final", "output" or "will", and not "previous",
       "earlier", "last", "before" or "already"), else the first one. A fence opened and never closed
       runs to the end of the reply.
    4. Without a fence: leading lead-in lines are dropped (`LEAD_INS`: an interjection such as
       "Sure!" or "Okay, here it is.", or a prose phrase ending in a colon that starts like "Here is...",
       "The next cell is...", "Based on...", "Output...", optionally in ``**bold**``). A lead-in sharing the
       line with the answer ("Output: 42", "Next cell: df.info()") is cut off, unless the line is valid
       Python for ``next-cell`` (``result: int = 5``). Then, for ``next-cell``, prose paragraphs (separated
       by blank lines; they do not parse as Python and have about two words or more per line, or start like
       an explanation: "This...", "Note...", "The cell...") before or after the code are dropped; for
       ``output``, only trailing paragraphs that start like an explanation are.
    5. Jupyter prompt headers the model may imitate from the history are removed: a first line
       ``# In [n]:`` / ``In [n]:``; for ``output`` a first line ``# Out [n]:`` / ``Out[n]:`` (or that prefix
       on the first line). For ``next-cell`` the answer stops at a ``# Out [n]:`` line (the model went on
       to predict the output too).
    6. An answer wrapped whole in single backticks (```` `df.head()` ````) is unwrapped.
    7. Blank lines at either end and trailing spaces are removed; for ``next-cell`` the code is dedented
       (leading spaces of an output's first line are kept: a table's header starts with them).

    Args:
        reply: The model's reply text.
        task: ``next-cell`` or ``output``.

    Returns:
        The prediction ("" when there is none).
    """
    text = _OPEN_THINK.sub("", _THINK.sub("", reply.replace("\r\n", "\n")))
    tagged = _ANSWER_TAG.findall(text)
    if tagged:
        text = tagged[-1][1]
    block = _fenced_block(text, task)
    answer = block if block is not None else _unfenced(text, task)
    answer = _strip_prompt_headers(answer, task)
    answer = _unwrap_backticks(answer)
    return _tidy(answer, task)


def _fenced_block(text: str, task: Task) -> str | None:
    """The chosen fenced block's content, or None when the text has no fence."""
    for line in text.split("\n"):
        inline = _INLINE_FENCE.match(line)
        if inline is not None:
            return inline.group("content")
    blocks: list[tuple[str, str, str]] = []  # (tag, content, the text that introduces it)
    position = 0
    while (opening := _FENCE.search(text, position)) is not None:
        fence, tag = opening.group("fence"), opening.group("tag").lower()
        intro = text[position : opening.start()]
        start = opening.end() + 1
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        end_match = closing.search(text, start) if start <= len(text) else None
        if end_match is None:
            blocks.append((tag, text[start:], intro))
            break
        blocks.append((tag, text[start : end_match.start()], intro))
        position = end_match.end()
    if not blocks:
        return None
    suitable = [b for b in blocks if b[0] in (_CODE_TAGS if task == "next-cell" else _OUTPUT_TAGS)] or blocks
    if len(suitable) > 1:
        for _, content, intro in suitable:
            if _ANSWER_INTRO.search(intro) and not _OTHER_INTRO.search(intro):
                return content
    return suitable[0][1]


def _unfenced(text: str, task: Task) -> str:
    lines = text.strip("\n").split("\n")
    while lines and (not lines[0].strip() or _LEAD_IN.match(lines[0])):
        lines.pop(0)
    if lines and (inline := _LEAD_IN_INLINE.match(lines[0])) is not None and not _parses(lines[0], task):
        lines[0] = inline.group("rest")
    paragraphs = _paragraphs(lines)
    if task == "output":
        while len(paragraphs) > 1 and _COMMENTARY.match(paragraphs[-1]):
            paragraphs.pop()
        return "\n\n".join(paragraphs)
    while len(paragraphs) > 1 and _is_prose(paragraphs[-1]):
        paragraphs.pop()
    while len(paragraphs) > 1 and _is_prose(paragraphs[0]):
        paragraphs.pop(0)
    return "\n\n".join(paragraphs)


def _parses(line: str, task: Task) -> bool:
    """Whether a line is valid Python (only asked for ``next-cell``, where code must be kept)."""
    if task != "next-cell":
        return False
    try:
        parse_python(line.strip())
    except SyntaxError:
        return False
    return True


def _paragraphs(lines: list[str]) -> list[str]:
    paragraphs, current = [], []
    for line in [*lines, ""]:
        if line.strip():
            current.append(line)
        elif current:
            paragraphs.append("\n".join(current))
            current = []
    return paragraphs


def _is_prose(paragraph: str) -> bool:
    """Sentences rather than code: does not parse as Python and has several words per line."""
    if _COMMENTARY.match(paragraph) and not _parses(paragraph.split("\n")[0], "next-cell"):
        return True
    try:
        parse_python(textwrap.dedent(paragraph))
    except SyntaxError:
        words = len(_WORD.findall(paragraph))
        return words >= 3 and words >= 2 * len(paragraph.splitlines())
    return False


def _strip_prompt_headers(answer: str, task: Task) -> str:
    lines = answer.strip("\n").split("\n")
    if task == "next-cell":
        if lines and _IN_HEADER.match(lines[0]):
            lines.pop(0)
        for i, line in enumerate(lines):
            if _OUT_HEADER.match(line) and _OUT_HEADER.sub("", line).strip() == "":
                lines = lines[:i]
                break
        return "\n".join(lines)
    if lines and _OUT_HEADER.match(lines[0]):
        rest = _OUT_HEADER.sub("", lines[0], count=1)
        lines = ([rest] if rest.strip() else []) + lines[1:]
    return "\n".join(lines)


def _unwrap_backticks(answer: str) -> str:
    stripped = answer.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] == "`" and "`" not in stripped[1:-1]:
        return stripped[1:-1]
    return answer


def _tidy(answer: str, task: Task) -> str:
    lines = [line.rstrip() for line in answer.split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    text = "\n".join(lines)
    return textwrap.dedent(text) if task == "next-cell" else text


__all__ = ["LEAD_INS", "Task", "extract_prediction"]
