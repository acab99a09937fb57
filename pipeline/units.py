"""Bytes: the units (GiB, MiB), how they are printed, and the size of a dtype's element.

The small vocabulary the other modules of `pipeline.memory` share; no formula of the memory model
lives here.
"""

from __future__ import annotations

GIB = 1024**3
MIB = 1024**2


def fmt_bytes(n: float) -> str:
    """`n` bytes as GiB / MiB text."""
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / MIB:.0f} MiB"


def dtype_bytes(name: str) -> int:
    """Bytes per element of a torch dtype name (`bfloat16` 2, `float32` 4, ...)."""
    name = name.replace("torch.", "")
    return {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "int8": 1, "uint8": 1}.get(name, 2)
