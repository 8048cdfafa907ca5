"""Turn a Textual/Rich SVG screenshot into a PNG that looks like the terminal: one monospace cell per character.

General SVG rasterisers (CairoSVG) stretch each ``<text textLength=…>`` run to its length with their own font, which
opens gaps inside words ("Che cks"). Rich's SVG is a character grid — x = column × cell width, baseline = row × line
height + 20 — so this reads the grid back (background rectangles, text runs, their classes' colour, weight, slant
and line-through) and draws each character in its own cell with DejaVu Sans Mono.

    python screenshots/terminal_png.py screenshot.svg [out.png]
"""

from __future__ import annotations

import html
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

SVG_CELL_W, SVG_LINE_H, SVG_BASELINE = 12.2, 24.4, 20.0  # Rich's export_svg grid (font size 20, line height 1.22)
CELL_W, CELL_H, FONT_PX = 11, 22, 18  # the PNG's grid
PAD, TITLE_H = 16, 34
FONTS = Path("/usr/share/fonts/truetype/dejavu")
NS = "{http://www.w3.org/2000/svg}"


@dataclass(frozen=True)
class Style:
    fill: str = "#c5c8c6"
    bold: bool = False
    italic: bool = False
    strike: bool = False
    underline: bool = False


def _styles(svg: str) -> dict[str, Style]:
    out = {}
    for name, body in re.findall(r"\.([\w-]+)\s*\{([^}]*)\}", svg):
        fill = re.search(r"fill:\s*(#[0-9a-fA-F]{6})", body)
        out[name] = Style(fill.group(1) if fill else "#c5c8c6", "bold" in body, "italic" in body,
                          "line-through" in body, "underline" in body)
    return out


def _font(style: Style) -> ImageFont.FreeTypeFont:
    name = "DejaVuSansMono" + ("-Bold" if style.bold else "") + ("Oblique" if style.italic and style.bold else
                                                                  "-Oblique" if style.italic else "")
    return ImageFont.truetype(str(FONTS / f"{name}.ttf"), FONT_PX)


def svg_to_png(svg_path: Path, png_path: Path) -> tuple[int, int]:
    """Draw the SVG's character grid as a PNG; returns the grid's (columns, rows)."""
    text = svg_path.read_text(encoding="utf-8")
    styles = _styles(text)
    root = ET.fromstring(text)
    matrix = next(g for g in root.iter(f"{NS}g") if g.get("class", "").endswith("matrix"))
    title = next((t.text or "" for t in root.iter(f"{NS}text") if t.get("class", "").endswith("title")), "")
    cells: dict[tuple[int, int], tuple[str, Style]] = {}
    backgrounds: list[tuple[int, int, int, str]] = []
    columns = rows = 0
    for rect in root.iter(f"{NS}rect"):
        if rect.get("shape-rendering") != "crispEdges":
            continue  # the window frame and clip paths
        col, row = round(float(rect.get("x")) / SVG_CELL_W), round((float(rect.get("y")) - 1.5) / SVG_LINE_H)
        width = round(float(rect.get("width")) / SVG_CELL_W)
        if width <= 0:
            continue
        backgrounds.append((col, row, width, rect.get("fill")))
        columns, rows = max(columns, col + width), max(rows, row + 1)
    for node in matrix.iter(f"{NS}text"):
        style = styles.get(node.get("class", ""), Style())
        col, row = round(float(node.get("x")) / SVG_CELL_W), round((float(node.get("y")) - SVG_BASELINE) / SVG_LINE_H)
        for i, char in enumerate(html.unescape(node.text or "").replace("\xa0", " ")):
            cells[(col + i, row)] = (char, style)

    size = (PAD * 2 + columns * CELL_W, TITLE_H + PAD + rows * CELL_H)
    image = Image.new("RGB", size, "#1e1e1e")
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((0, 0, size[0] - 1, size[1] - 1), radius=10, fill="#292929", outline="#555555")
    for i, colour in enumerate(("#ff5f57", "#febc2e", "#28c840")):
        draw.ellipse((PAD + i * 22, 11, PAD + i * 22 + 12, 23), fill=colour)
    title_font = ImageFont.truetype(str(FONTS / "DejaVuSans-Bold.ttf"), 15)
    draw.text((size[0] / 2, TITLE_H / 2), title, fill="#c5c8c6", font=title_font, anchor="mm")
    x0, y0 = PAD, TITLE_H
    for col, row, width, fill in backgrounds:
        draw.rectangle((x0 + col * CELL_W, y0 + row * CELL_H, x0 + (col + width) * CELL_W - 1,
                        y0 + (row + 1) * CELL_H - 1), fill=fill)
    fonts: dict[Style, ImageFont.FreeTypeFont] = {}
    for (col, row), (char, style) in cells.items():
        left, top = x0 + col * CELL_W, y0 + row * CELL_H
        if char != " ":
            font = fonts.setdefault(style, _font(style))
            draw.text((left + CELL_W / 2, top + CELL_H / 2), char, fill=style.fill, font=font, anchor="mm")
        if style.strike:
            draw.line((left, top + CELL_H // 2, left + CELL_W, top + CELL_H // 2), fill=style.fill, width=2)
        if style.underline:
            draw.line((left, top + CELL_H - 3, left + CELL_W, top + CELL_H - 3), fill=style.fill, width=1)
    image.save(png_path)
    return columns, rows


if __name__ == "__main__":
    source = Path(sys.argv[1])
    print(svg_to_png(source, Path(sys.argv[2]) if len(sys.argv) > 2 else source.with_suffix(".png")))
