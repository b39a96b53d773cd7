"""The env's spaces: its observation and action ``Dict`` spaces, and the ``Text`` space of any text (code and
outputs are any characters, so the charset is the whole Basic Multilingual Plane but surrogates)."""

from __future__ import annotations

import copy
import functools

from gymnasium import spaces

from themisto_env.env.tools import TOOL_NAMES

__all__ = ["CHARSET", "AnyText", "action_space", "fit_text", "observation_space", "text_space"]

#: Every character of the Basic Multilingual Plane but surrogates: code and outputs are any text.
CHARSET = "".join(chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF)
_CHARSET_SET = frozenset(CHARSET)


class AnyText(spaces.Text):
    """A ``Text`` space over `CHARSET` that prints short (gymnasium's repr lists every character of
    the charset: 63,488 of them in ``print(env.action_space)``)."""

    def __repr__(self) -> str:
        return f"Text({self.min_length}, {self.max_length}, charset=<BMP but surrogates: {len(CHARSET)} chars>)"


@functools.cache
def _text_space_prototype(max_length: int) -> spaces.Text:
    return AnyText(max_length, min_length=0, charset=CHARSET)


def text_space(max_length: int) -> spaces.Text:
    """A ``Text`` space over `CHARSET`: a copy of one built once per length (building the charset's index
    is slow, and every env makes several)."""
    return copy.copy(_text_space_prototype(max_length))


def fit_text(value: str, limit: int) -> str:
    """Fit text into a Text space: cut to the limit, replace characters outside the charset."""
    value = value[:limit]
    if not all(ch in _CHARSET_SET for ch in value):
        value = "".join(ch if ch in _CHARSET_SET else "\ufffd" for ch in value)
    return value


def observation_space(max_text_chars: int, tool_budget: int) -> spaces.Dict:
    """The observation: ``history``, ``cell``, ``runtime``, ``tool_result`` (texts) and ``tools_left``."""
    return spaces.Dict(
        {
            "history": text_space(max_text_chars),
            "cell": text_space(max_text_chars),
            "runtime": text_space(max_text_chars),
            "tool_result": text_space(max_text_chars),
            "tools_left": spaces.Discrete(tool_budget + 1),
        }
    )


def action_space(max_text_chars: int) -> spaces.Dict:
    """The action: ``kind`` (0 a tool call, 1 a prediction), ``tool`` (an index into
    `TOOL_NAMES`), ``args`` (JSON) and ``text`` (the prediction)."""
    return spaces.Dict(
        {
            "kind": spaces.Discrete(2),
            "tool": spaces.Discrete(len(TOOL_NAMES)),
            "args": text_space(2000),
            "text": text_space(max_text_chars),
        }
    )
