"""Counts and lists of ids in a teacher's words: "1 learner", "3 recordings", "a, b, c and 4 more".

Pure text (no gradio, no pipeline module): the tabs' views and `ui.common` share it.
"""

from __future__ import annotations

from typing import Sequence


def plural(count: int, word: str, many: str | None = None) -> str:
    """"1 learner", "3 learners" (`many`: the plural when it is not `word` + "s")."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def some_ids(ids: Sequence[str], shown: int, *, code: bool = False) -> str:
    """The first `shown` of `ids` in their order, comma-separated (each as `code` when asked), then
    "and N more" for the rest: `some_ids(["a", "b", "c"], 2)` -> "a, b and 1 more"."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(f"`{i}`" if code else str(i) for i in ids[:shown]) + more
