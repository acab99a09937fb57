"""Lists of ids in a teacher's words: "a, b, c and 4 more" (counts are `pipeline.units.plural`).

Pure text (no gradio): the tabs' views and `ui.common` share it.
"""

from __future__ import annotations

from typing import Sequence


def some_ids(ids: Sequence[str], shown: int, *, code: bool = False) -> str:
    """The first `shown` of `ids` in their order, comma-separated (each as `code` when asked), then
    "and N more" for the rest: `some_ids(["a", "b", "c"], 2)` -> "a, b and 1 more"."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(f"`{i}`" if code else str(i) for i in ids[:shown]) + more
