"""Point labels placed without collisions: each label goes to the first free spot around its point
(a ring of offsets, nearest first) where its box overlaps no earlier label, no marker and stays
inside the axes; a label with no free spot is left out. Units: points (1/72 inch) from the
figure's lower left; text boxes estimated from the font size with a margin (the browser's font
may be wider than matplotlib's)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

CHAR_W = 0.62   # a digit or lower-case letter, as a share of the font size (DejaVu Sans ~0.6)
LINE_H = 1.25   # a line's height, as a share of the font size
MARGIN = 1.5    # points around every box
MARKER = 3.5    # half the side of a marker's box
RADII = (3.0, 7.0, 12.0, 18.0, 26.0, 36.0, 48.0)
DIRECTIONS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1),
              (1, 0.5), (1, -0.5), (-1, 0.5), (-1, -0.5),
              (0.5, 1), (-0.5, 1), (0.5, -1), (-0.5, -1))
LEADER = 12.0  # a label this far from its point or more gets a thin line to it


class Box(msgspec.Struct, frozen=True):
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, o: Box) -> bool:
        return self.x0 < o.x1 and o.x0 < self.x1 and self.y0 < o.y1 and o.y0 < self.y1

    def inside(self, o: Box) -> bool:
        return o.x0 <= self.x0 and self.x1 <= o.x1 and o.y0 <= self.y0 and self.y1 <= o.y1


Spot = tuple[float, float, str, str]  # offset dx, dy (points), ha, va


def text_box(x: float, y: float, text: str, size: float, ha: str, va: str) -> Box:
    """The box of `text` anchored at (x, y) by matplotlib's ha/va, with MARGIN around."""
    w, h = CHAR_W * size * len(text) + 2 * MARGIN, LINE_H * size + 2 * MARGIN
    x0 = {"left": x - MARGIN, "right": x - w + MARGIN, "center": x - w / 2}[ha]
    y0 = {"bottom": y - MARGIN, "top": y - h + MARGIN, "center": y - h / 2}[va]
    return Box(x0, y0, x0 + w, y0 + h)


def _candidates() -> list[Spot]:
    out = []
    for r in RADII:
        for dx, dy in DIRECTIONS:
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            va = "bottom" if dy > 0 else "top" if dy < 0 else "center"
            out.append((dx * r, dy * r, ha, va))
    return out


def place(anchors: Sequence[tuple[float, float]], texts: Sequence[str], size: float,
          area: Box) -> list[Spot | None]:
    """Per anchor, where its text goes (None: nowhere free)."""
    taken = [Box(x - MARKER, y - MARKER, x + MARKER, y + MARKER) for x, y in anchors]
    out: list[Spot | None] = []
    for (x, y), text in zip(anchors, texts):
        spot = None
        for dx, dy, ha, va in _candidates():
            box = text_box(x + dx, y + dy, text, size, ha, va)
            if box.inside(area) and not any(box.overlaps(t) for t in taken):
                spot = (dx, dy, ha, va)
                taken.append(box)
                break
        out.append(spot)
    return out
