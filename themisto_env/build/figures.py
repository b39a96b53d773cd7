"""Figures past the output cap, kept in the dataset's content-addressed file store instead of being dropped.

A build's kernels keep the images the output cap would drop from a display output (up to an image budget
per execution, `BUILD_IMAGE_BYTES`; see `themisto_env.sandbox.outputs`). `keep_figures`
then moves each such image out of the step's outputs into the dataset's ``files/`` (``blobs/<sha[:2]>/<sha>``,
the image's own bytes: a PNG file for ``image/png``; the same figure twice is kept once) and names it in the
output's metadata: ``{"themisto_files": {"image/png": "<sha256>"}}``. The output keeps its ``text/plain``
(``<Figure size 640x480 with 1 Axes>``): what a model sees, and what agreement compares, stays text. The
viewer (``themisto view``) shows a sample's figures, inline or kept; ``data info`` counts them in the
dataset's size.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Mapping
from typing import Any

from themisto_env.data.trajectory import FIGURE_FILES_KEY
from themisto_env.errors import DataError
from themisto_env.sandbox.outputs import OVER_CAP_KEY
from themisto_env.sandbox.store.workdir import FileStore

BUILD_IMAGE_BYTES = 32 * 2**20
"""A build's image budget per execution (characters of the images' JSON, base64 for PNG)."""
_TEXT_IMAGES = frozenset({"image/svg+xml"})


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def image_bytes(mime: str, value: Any) -> bytes:
    """An nbformat image's own bytes: base64 decoded (PNG, JPEG, ...), or the text of an SVG."""
    if mime in _TEXT_IMAGES:
        return _text(value).encode("utf-8")
    try:
        return base64.b64decode(_text(value), validate=False)
    except (binascii.Error, ValueError):
        return _text(value).encode("utf-8")


def keep_figures(outputs: list[dict[str, Any]], store: FileStore) -> int:
    """Move the images kept past the output cap out of ``outputs`` (changed in place) into ``store``.

    Returns:
        How many images were moved.
    """
    moved = 0
    for output in outputs:
        metadata = output.get("metadata")
        if not isinstance(metadata, dict) or not metadata.get(OVER_CAP_KEY):
            continue
        files = metadata.setdefault(FIGURE_FILES_KEY, {})
        for mime in metadata.pop(OVER_CAP_KEY):
            value = (output.get("data") or {}).pop(mime, None)
            if value is not None:
                files[mime] = store.add_bytes(image_bytes(mime, value))
                moved += 1
    return moved


def without_over_cap(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The outputs with the images kept past the cap left out (for what is kept only as text)."""
    kept = []
    for output in outputs:
        over = (output.get("metadata") or {}).get(OVER_CAP_KEY)
        if over:
            data = {k: v for k, v in output["data"].items() if k not in over}
            metadata = {k: v for k, v in output["metadata"].items() if k != OVER_CAP_KEY}
            output = {**output, "data": data, "metadata": metadata}
        kept.append(output)
    return kept


def figures(outputs: list[Mapping[str, Any]], store: FileStore | None) -> Iterator[tuple[str, bytes]]:
    """A step's figures, in order: (mime type, bytes), inline or from ``store`` (a kept one that is
    missing or does not match its digest is skipped)."""
    for output in outputs:
        data = output.get("data") or {}
        for mime, value in data.items():
            if mime.startswith("image/"):
                yield mime, image_bytes(mime, value)
        kept = (output.get("metadata") or {}).get(FIGURE_FILES_KEY) or {}
        for mime, sha in kept.items():
            if store is None:
                continue
            try:
                yield mime, store.read(str(sha), name=f"figure {str(sha)[:12]}")
            except DataError:
                continue


__all__ = ["BUILD_IMAGE_BYTES", "figures", "image_bytes", "keep_figures", "without_over_cap"]
