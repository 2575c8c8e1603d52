"""A picture of a memory plan: x is the step (kernel call), y the arena offset, one
rectangle per arena tensor, coloured by the kind of op that writes it (a legend on the
right names the kinds) and labelled with the tensor's name where it fits, else with its
row number in ``inspect --plan``'s table.

Drawn into a numpy RGB array with a built-in 3x5 pixel font and written as a PNG with
zlib (no plotting library: the packager does not depend on one).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

WIDTH, HEIGHT = 960, 540
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 36, 40  # margins around the plot area (and legend)
SWATCH = 12  # legend colour squares, pixels
SCALE = 2  # font pixels per glyph pixel

# 3x5 glyphs, rows top to bottom; text is drawn upper-case.
_GLYPHS = {
    "A": "010101111101101", "B": "110101110101110", "C": "011100100100011",
    "D": "110101101101110", "E": "111100110100111", "F": "111100110100100",
    "G": "011100101101011", "H": "101101111101101", "I": "111010010010111",
    "J": "001001001101010", "K": "101101110101101", "L": "100100100100111",
    "M": "101111111101101", "N": "110101101101101", "O": "010101101101010",
    "P": "110101110100100", "Q": "010101101110011", "R": "110101110101101",
    "S": "011100010001110", "T": "111010010010010", "U": "101101101101111",
    "V": "101101101101010", "W": "101101111111101", "X": "101101010101101",
    "Y": "101101010010010", "Z": "111001010100111", "0": "111101101101111",
    "1": "010110010010111", "2": "110001010100111", "3": "110001010001110",
    "4": "101101111001001", "5": "111100110001110", "6": "011100111101111",
    "7": "111001010010010", "8": "111101111101111", "9": "111101111001110",
    ".": "000000000000010", "-": "000000111000000", ":": "000010000010000",
    "/": "001001010100100", "(": "010100100100010", ")": "010001001001010",
    "=": "000111000111000", ",": "000000000010100", " ": "000000000000000",
    "_": "000000000000111", "+": "000010111010000", "#": "101111101111101",
}  # fmt: skip
_ADVANCE = 4 * SCALE


@dataclass(frozen=True)
class Rect:
    label: str  # drawn where it fits
    first: int  # first step
    last: int  # last step (inclusive)
    offset: int  # bytes
    size: int  # bytes
    color: int  # index into the legend: rectangles of one kind share a colour
    short: str = ""  # drawn instead where ``label`` does not fit


def text_width(text: str) -> int:
    return len(text) * _ADVANCE - SCALE


def draw_text(img: np.ndarray, x: int, y: int, text: str, color=(0, 0, 0)) -> None:
    """Text with its top-left corner at (x, y); clipped to the image."""
    for ch in text.upper():
        bits = _GLYPHS.get(ch, _GLYPHS[" "])
        for k, bit in enumerate(bits):
            if bit == "1":
                px, py = x + (k % 3) * SCALE, y + (k // 3) * SCALE
                img[max(py, 0) : max(py + SCALE, 0), max(px, 0) : max(px + SCALE, 0)] = color
        x += _ADVANCE


def color(key: int) -> np.ndarray:
    """A pastel colour per key (golden-ratio hues: neighbours differ), as RGB uint8."""
    h = (key * 0.618033988749895) % 1.0
    rgb = np.clip(np.abs(((h * 6 + np.array([0, 4, 2])) % 6) - 3) - 1, 0, 1)
    return (150 + 90 * rgb).astype(np.uint8)


def _ticks(top: int, n: int = 6) -> list[int]:
    """Round tick values from 0 to about ``top``."""
    if top <= 0:
        return [0]
    raw = top / n
    mag = 10 ** int(np.floor(np.log10(raw)))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return list(range(0, top + 1, max(1, int(step))))  # whole ticks for a small top


def _unit(arena: int) -> tuple[str, int]:
    return ("MIB", 1 << 20) if arena >= 4 << 20 else ("KIB", 1 << 10)


def draw_plan(
    rects: list[Rect], steps: int, arena: int, title: str, legend: list[str] = ()
) -> bytes:
    """The PNG file's bytes. ``legend``: the name of each colour key, drawn on the right."""
    img = np.full((HEIGHT, WIDTH, 3), 255, dtype=np.uint8)
    right = WIDTH - RIGHT - _legend_width(legend)
    x0, x1, y0, y1 = LEFT, right, TOP, HEIGHT - BOTTOM
    sx = (x1 - x0) / max(steps, 1)
    sy = (y1 - y0) / max(arena, 1)
    _axes(img, steps, arena, sx, sy, x1)
    _legend(img, legend, x1 + 16, y0)
    boxes = [_box(r, sx, sy) for r in rects]
    for r, (left, right, top, bottom) in zip(rects, boxes, strict=True):
        img[top:bottom, left:right] = color(r.color)
        edge = (color(r.color) * 0.55).astype(np.uint8)
        img[top, left:right] = img[bottom - 1, left:right] = edge
        img[top:bottom, left] = img[top:bottom, right - 1] = edge
    # Labels last, so that no box hides one.
    for r, (left, right, top, bottom) in zip(rects, boxes, strict=True):
        fits = [t for t in (r.label, r.short) if t and right - left >= text_width(t) + 4]
        if fits and bottom - top >= 5 * SCALE + 4:
            tx = (left + right - text_width(fits[0])) // 2
            draw_text(img, tx, (top + bottom) // 2 - 5 * SCALE // 2, fits[0])
    draw_text(img, x0, 6, title)
    return encode_png(img)


def _legend_width(legend: list[str]) -> int:
    if not legend:
        return 0
    return 16 + SWATCH + 6 + max(text_width(name) for name in legend)


def _legend(img: np.ndarray, legend: list[str], x: int, y: int) -> None:
    """One colour square and name per key, top to bottom."""
    for key, name in enumerate(legend):
        top = y + key * (SWATCH + 6)
        img[top : top + SWATCH, x : x + SWATCH] = color(key)
        draw_text(img, x + SWATCH + 6, top + (SWATCH - 5 * SCALE) // 2, name)


def _box(r: Rect, sx: float, sy: float) -> tuple[int, int, int, int]:
    """Pixel (left, right, top, bottom) of a tensor: from the middle of the step that
    writes it to the middle of the last step that reads it, so the tensors of an
    in-place chain sit end to end; at least half a step (or a pixel) wide."""
    y1 = HEIGHT - BOTTOM
    left = LEFT + int((r.first + 0.5) * sx)
    right = max(LEFT + int((r.last + 0.5) * sx), left + max(1, int(sx / 2)))
    top, bottom = y1 - int((r.offset + r.size) * sy), y1 - int(r.offset * sy)
    return left, right, top, max(bottom, top + 1)


def _axes(img: np.ndarray, steps: int, arena: int, sx: float, sy: float, x1: int) -> None:
    x0, y0, y1 = LEFT, TOP, HEIGHT - BOTTOM
    grey, dark = (225, 225, 225), (90, 90, 90)
    name, unit = _unit(arena)
    for t in _ticks(arena // unit or 1):
        y = y1 - int(t * unit * sy)
        if y0 <= y <= y1:
            img[y, x0:x1] = grey
            draw_text(img, x0 - 6 - text_width(str(t)), y - 5, str(t), dark)
    for t in _ticks(steps, 10):
        x = x0 + int(t * sx)
        if x0 <= x <= x1:
            img[y0:y1, x] = grey
            draw_text(img, x - text_width(str(t)) // 2, y1 + 6, str(t), dark)
    img[y0 : y1 + 1, x0] = img[y1, x0:x1] = dark
    draw_text(img, x1 - text_width("STEP"), HEIGHT - 14, "STEP", dark)
    draw_text(img, 4, y0 - 14, name, dark)


def encode_png(img: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of ``img`` (H x W x 3 uint8), each row with filter type 0."""
    h, w, _ = img.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), img.reshape(h, w * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
        + chunk(b"IEND", b"")
    )
