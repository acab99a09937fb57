"""A field of a result, whether `pipeline/` handed it over as a dict (read back from JSON) or as an object
(a dataclass such as `AudioReport`, `Sample`, `ImportReport`).

Pure (no gradio, no pipeline module): the tabs' views read their inputs with `get_field`, so a result
formats the same fresh from a function and reloaded from a file.
"""

from __future__ import annotations

from typing import Any, Mapping


def get_field(obj: Any, name: str, default: Any = None) -> Any:
    """Field `name` of `obj`: `obj[name]` of a mapping, else the attribute; `default` when it has none."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)
