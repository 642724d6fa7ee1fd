"""The kit's hand-written SVG: monospace text measured, wrapped and placed, and documents sized to their
content (the crash study's pictures, ``spec.kit.crash``; the stress witness, ``spec.kit.stress``; the
``check --report`` page, docs/check.md §Report).

Every picture sets ``font-family="monospace"``, so a text's width is its length times a fixed advance:
``CHAR_EM`` of the font size (DejaVu Sans Mono and Liberation Mono, the fonts a Debian browser picks for
``monospace``, advance 0.60 em; 0.62 leaves a margin). ``width_of`` measures, ``wrap`` cuts a text into
lines no wider than a width (never a word in the middle unless the word alone is wider), ``text`` places
one, ``document`` wraps a body into an ``<svg>`` whose ``viewBox`` is exactly its width and height.

Not guaranteed: the measure for a proportional font, or for characters wider than one cell (CJK, emoji).
"""

from __future__ import annotations

import html
import textwrap

__all__ = ["CHAR_EM", "document", "text", "width_of", "wrap"]

#: The advance of one monospace character, in em (see the module docstring).
CHAR_EM = 0.62


def width_of(content: str, size: float) -> float:
    """The width ``content`` takes at font ``size`` (pixels)."""
    return len(content) * size * CHAR_EM


def wrap(content: str, size: float, width: float, *, indent: str = "    ") -> list[str]:
    """``content`` cut into lines that each fit ``width`` at font ``size``; continuation lines start with
    ``indent`` and the content's own leading spaces are kept."""
    chars = max(8, int(width / (size * CHAR_EM)))
    if len(content) <= chars:
        return [content]
    lead = content[: len(content) - len(content.lstrip(" "))]
    return textwrap.wrap(
        content.lstrip(" "),
        chars,
        initial_indent=lead,
        subsequent_indent=lead + indent,
        break_on_hyphens=False,
        drop_whitespace=True,
    ) or [content[:chars]]


def text(x: float, y: float, content: str, *, size: float = 12, anchor: str = "start", **extra: str) -> str:
    """One ``<text>`` element (``extra``: more attributes, ``font_weight`` written ``font-weight``)."""
    attributes = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in extra.items())
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" text-anchor="{anchor}" '
        f'font-family="monospace" xml:space="preserve"{attributes}>{html.escape(content)}</text>'
    )


def document(width: float, height: float, body: list[str]) -> str:
    """An SVG document of ``width`` × ``height`` (rounded up), white behind ``body``."""
    w, h = int(width + 0.999), int(height + 0.999)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">\n'
        '<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n"
    )
