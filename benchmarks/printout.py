"""How a benchmark prints its result: one JSON line (`--json`), else a title and a table (`print_report`)."""

from __future__ import annotations

import json
from typing import Any, Callable

Column = tuple[str, str, Callable[[dict], Any]]
"""A table column: its heading, its format spec (alignment and width, ">8"), and `cell(row)` -> what it
shows (formatted into the spec; a float's precision is the cell's own)."""


def print_report(result: dict, *, as_json: bool, title: list[str], columns: list[Column], rows: list[dict]) -> None:
    """Print `result` as one JSON line when `as_json`; else the `title` lines, the column headings and one
    line per row of `rows`, each cell `cell(row)` in its column's spec, cells parted by one space."""
    if as_json:
        print(json.dumps(result))
        return
    for line in title:
        print(line)
    print(" ".join(f"{heading:{spec}}" for heading, spec, _ in columns))
    for row in rows:
        print(" ".join(f"{cell(row)!s:{spec}}" for _, spec, cell in columns))
