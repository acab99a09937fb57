"""What the app's figures share: their colours, in a stable order.

Each tab's view draws its own figures with matplotlib's object-oriented `matplotlib.figure.Figure`
API (no `pyplot`, so no global figure state is shared between browser sessions or threads); this
module imports nothing.
"""

from __future__ import annotations

PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)
"""Tableau 10 (colour-blind friendly), in its own order: the first colour is a figure's main series (the
Dataset tab's train rows, the Train tab's training loss), the next ones what is drawn beside it."""
