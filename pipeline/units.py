"""Units and counts: GiB, MiB, seconds and "3 clips", how they are printed, and the size of a dtype's element.

The small vocabulary the memory estimate, the loader's report, the command line and the app share, so
a figure reads the same wherever it is printed; no formula of the memory model lives here.
"""

from __future__ import annotations

import math

GIB = 1024**3
MIB = 1024**2
KIB = 1024


def format_bytes(n: float | int | None) -> str:
    """`n` bytes in binary units (1 GiB = 1024**3 bytes, as `nvidia-smi`, PyTorch and `free` report them):
    `7_000_000_000` -> "6.52 GiB", `300 * MIB` -> "300 MiB", `4096` -> "4 KiB", `312` -> "312 bytes", `1` ->
    "1 byte"; two decimals in GiB, none below; a negative `n` (a margin) keeps its sign; None -> "–" (not
    known). Every size, however small, reads as a true figure: a 312-byte file is never "0.0 MiB"."""
    if n is None:
        return "–"
    value = float(n)
    if abs(value) >= GIB:
        return f"{value / GIB:.2f} GiB"
    if abs(value) >= MIB:
        return f"{value / MIB:.0f} MiB"
    if abs(value) >= KIB:
        return f"{value / KIB:.0f} KiB"
    return plural(int(round(value)), "byte")


def format_gib(n: float | int | None) -> str:
    """`n` bytes in GiB with two decimals whatever its size (`300 * MIB` -> "0.29 GiB"), for figures a
    person compares with one another on one screen (a measured peak beside its estimate, a peak beside the
    usable memory): one unit and one rounding, where `format_bytes` would show "1021 MiB" beside
    "1.00 GiB"; None -> "–"."""
    if n is None:
        return "–"
    return f"{float(n) / GIB:.2f} GiB"


def gib_minus(a: float | int, b: float | int) -> str:
    """`a - b` bytes in GiB as the two `format_gib` figures shown beside it subtract: each rounded to 0.01 GiB
    first, so a line "X = Y minus Z" or "Y, of which Z ... adds X" adds up on screen (18.49 = 20.84 minus
    2.35, never 18.48 beside them)."""
    shown = round(float(a) / GIB, 2) - round(float(b) / GIB, 2)
    return f"{shown + 0.0:.2f} GiB"


def gib_difference(measured: float | int | None, estimate: float | int | None) -> str:
    """How a measured figure compares with its estimate, in words that agree with the two `format_gib` figures
    shown beside it: "the same to 0.01 GiB" when both show the same figure, else "2 % more" / "3 % less" (the
    relative difference, with as many decimals as make it non-zero: "0.4 % more", never "0 %" or "101 %" beside
    two equal figures); "" when either is missing or zero."""
    if not measured or not estimate:
        return ""
    if format_gib(measured) == format_gib(estimate):
        return "the same to 0.01 GiB"
    percent = 100.0 * (float(measured) / float(estimate) - 1.0)
    shown = next((f"{abs(percent):.{d}f}" for d in (0, 1, 2) if float(f"{abs(percent):.{d}f}") > 0), "0.01")
    return f"{shown} % {'more' if percent > 0 else 'less'}"


def format_loss(value: float | int | None) -> str:
    """A training or eval loss as every screen and printout shows it: three decimals (`7.48132` -> "7.481"), so
    the Past runs table, the log box, the run summary and a tutor's card give one figure for one loss; None -> "–"."""
    if value is None:
        return "–"
    return f"{float(value):.3f}"


def format_seconds(seconds: float | int | None) -> str:
    """Seconds as people read them: `3725` -> `"1 h 02 min"`, `95` -> `"1 min 35 s"`, `4.2` -> `"4 s"`;
    None or NaN -> `"–"`."""
    if seconds is None or (isinstance(seconds, float) and not math.isfinite(seconds)):
        return "–"
    seconds = max(0, int(round(float(seconds))))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def plural(count: int, word: str, many: str | None = None) -> str:
    """A count with its noun in the right number: `plural(1, "clip")` -> "1 clip", `plural(3, "clip")` ->
    "3 clips", `plural(2, "child", "children")` -> "2 children" (`many`: the plural when it is not
    `word` + "s"). Every message that counts things says it this way, never "clip(s)"."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def dtype_bytes(name: str) -> int:
    """Bytes per element of a torch dtype name (`bfloat16` 2, `float32` 4, ...)."""
    name = name.replace("torch.", "")
    return {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "int8": 1, "uint8": 1}.get(name, 2)
