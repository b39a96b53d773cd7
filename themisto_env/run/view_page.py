"""The page of ``themisto view``: its HTML skeleton, CSS and JavaScript, filled with a title and the runs' data.

The three are files beside this module (``view_assets/page.html``, ``view.css``, ``view.js``: plain files
an editor and a linter read as what they are), put into one self-contained page by `render_page`.
The script reads the data block (``<script type="application/json" id="data">``), inserts everything from
the runs as text (never as HTML), and keeps the view's state in the URL's fragment.
"""

from __future__ import annotations

import html
from importlib import resources

ASSETS = "view_assets"
"""The folder of the page's files, inside [`themisto_env.run`][themisto_env.run]."""


def _asset(name: str) -> str:
    return resources.files("themisto_env.run").joinpath(ASSETS, name).read_text(encoding="utf-8")


def render_page(title: str, data_json: str) -> str:
    """The view's self-contained HTML page.

    Args:
        title: The page's title (escaped here).
        data_json: The runs' data as JSON already made safe inside a ``<script>`` element.

    Returns:
        The page, with its CSS, its script and the data inline.
    """
    return (
        _asset("page.html")
        .replace("__TITLE__", html.escape(title))
        .replace("__CSS__", "\n" + _asset("view.css"))
        .replace("__JS__", "\n" + _asset("view.js"))
        .replace("__DATA__", data_json)
    )


__all__ = ["ASSETS", "render_page"]
