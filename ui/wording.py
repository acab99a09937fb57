"""The app's words for what the library says in command-line terms: flags, commands, log lines.

`pipeline/` messages name the command line's flags and commands (`--max-length`, `python -m pipeline
build`), because the same message is printed by the CLI. Inside the app a person has widgets and
buttons instead, so `app_wording` rewrites those names into the label of the widget that holds the
same setting and the tab it is on (`SETTING_WIDGETS`; `tests/test_app_handlers.py` checks every label
against the built page). `readable_log` turns `train.log` lines into short readable ones (a peak
memory figure says how it was measured, `ui.memory_counters`).

Pure text work: no gradio, torch or pipeline module that does work is imported; the handlers apply the
app's words to what `pipeline/` says before a tab's view (`ui/*_view.py`) lays it out.
"""

from __future__ import annotations

import json
import re
from typing import Iterable

from pipeline.config import DEVICES, LORA_TARGETS, LR_SCHEDULES, OPTIMIZERS, QUANTIZATIONS
from pipeline.model.hub_failures import OFFLINE_FIX, OFFLINE_ON
from pipeline.model.hub import OFFLINE_MODE
from pipeline.units import MIB, format_gib, format_loss, format_seconds
from ui.memory_counters import memory_counter_words

SETTING_WIDGETS: dict[str, tuple[str, str, bool]] = {
    # flag (without --): (widget label as shown, where it is, on/off setting)
    "model": ("Model", "top of the page", False),
    "device": ("Device", "Memory tab", False),
    "memory-gb": ("The machine's memory (GB)", "Memory tab", False),
    "quantization": ("Quantization", "Memory tab", False),
    "lora-rank": ("LoRA rank r", "Memory tab", False),
    "lora-targets": ("LoRA on", "Memory tab", False),
    "optimizer": ("Optimizer", "Memory tab", False),
    "batch-size": ("Batch size", "Memory tab", False),
    "grad-accum": ("Gradient accumulation", "Memory tab", False),
    "max-length": ("Max tokens per row", "Memory tab", False),
    "gradient-checkpointing": ("Gradient checkpointing", "Memory tab", True),
    "vision-tower": ("Load the vision tower", "Memory tab", True),
    "ple-on-cpu": ("Per-layer embeddings in CPU RAM", "Memory tab", True),
    "quantize-audio-encoder": ("Quantize the audio encoder too", "Memory tab", True),
    "learning-rate": ("Learning rate", "Train tab, Advanced settings", False),
    "lr-schedule": ("Schedule", "Train tab, Advanced settings", False),
    "epochs": ("Passes over your recordings (epochs)", "Train tab", False),
    "max-steps": ("Max steps", "Train tab, Advanced settings", False),
    "lora-alpha": ("LoRA alpha", "Train tab, Advanced settings", False),
    "lora-dropout": ("LoRA dropout", "Train tab, Advanced settings", False),
    "eval-steps": ("Eval every N steps", "Train tab, Advanced settings", False),
    "save-steps": ("Checkpoint every N steps", "Train tab, Advanced settings", False),
    "eval-fraction": ("Held-out share", "Dataset tab", False),
    "trim": ("Trim clips longer than 30 s", "Samples tab", True),
    "format": ("Layout", "Samples tab, Import a folder", False),
    "max-new-tokens": ("Longest answer (tokens)", "Try tab, Advanced settings", False),
    "run": ("Tuned run", "Try tab", False),
}
"""Command-line flags that have a widget in the app: its label (the start of the widget's label on the
page), where it is, and whether it is an on/off box."""

RESUME_ANYWAY_LABEL = "Resume even though the dataset was rebuilt"
"""The Train tab's box beside Resume: `train --resume --allow-dataset-change`."""

BUTTONS: dict[str, tuple[str, str]] = {
    "resume": ("Resume", "Train tab"),
}
"""Flags that are a button in the app."""

COMMANDS: dict[str, tuple[str, str]] = {
    "build": ("Build dataset", "Dataset tab"),
    "estimate": ("Estimate", "Memory tab"),
    "make-tiny-model": ("Create offline tiny test model", "top of the page"),
    "get-model": ("Get the model", "top of the page"),
    "samples": ("Sample library", "Samples tab"),
    "import": ("Import a folder", "Samples tab"),
    "train": ("Start training", "Train tab"),
    "infer": ("Get feedback", "Try tab"),
}
"""`python -m pipeline COMMAND`s and the button (or table) that does the same in the app."""

OFFLINE_WORDS = "this app was started in offline mode (it downloads nothing from Hugging Face)"
"""Offline mode as the app's user knows it: they see no variable, only that the app downloads nothing."""
ENVIRONMENT_PHRASES: dict[str, str] = {
    OFFLINE_MODE: OFFLINE_WORDS,
    OFFLINE_ON: OFFLINE_WORDS[0].upper() + OFFLINE_WORDS[1:],
    OFFLINE_FIX: "start the app again without offline mode, then click **Get the model** again.",
}
"""Phrases of `pipeline/` messages that name an environment variable the app's user never set, and the app's
words for them (`app_wording`)."""

HF_HOME_WHY = ("Hugging Face keeps what it downloads in the folder the environment variable `HF_HOME` names "
               "(else `~/.cache/huggingface`): start the app with it set to a folder on a larger disk, e.g. "
               "`HF_HOME=/mnt/big/huggingface python app.py`.")
HF_TOKEN_WHY = ("The machine reads the token from the environment variable `HF_TOKEN`: `export HF_TOKEN=hf_...` "
                "there before the job starts (a *Read* token of an account that accepted the model's licence).")
HF_ENDPOINT_WHY = ("huggingface_hub asks the server that the environment variable `HF_ENDPOINT` names (else "
                   "https://huggingface.co): a mirror or a company proxy named there answers instead of the hub; start "
                   "the app without it, or with the right address.")
ENVIRONMENT_FIXES: list[tuple[re.Pattern, str, str]] = [
    (re.compile(r"(?:set HF_HOME to|point HF_HOME at) (?:a folder on )?(a larger|another) disk"),
     r"keep Hugging Face's downloads on \1 disk", HF_HOME_WHY),
    (re.compile(r"set HF_TOKEN there"), "give it your Hugging Face read token there", HF_TOKEN_WHY),
    (re.compile(r"\bHF_ENDPOINT\b"), "the hub address this app was started with", HF_ENDPOINT_WHY),
]
"""A fix that names an environment variable: the app says it in words, the variable behind "Why?"
(`app_wording`): (the phrase, its words, the Why? text)."""

_CHOICES = {str(value) for group in (DEVICES, QUANTIZATIONS, LORA_TARGETS, OPTIMIZERS, LR_SCHEDULES)
            for value in group}
_VALUE = r"(?:-?\d[\w.]*|DIR|N|" + "|".join(re.escape(c) for c in sorted(_CHOICES, key=len, reverse=True)) + r")"
_RESUME_COMMAND = re.compile(r"`python -m pipeline train [^`]*?--resume(?P<anyway> --allow-dataset-change)?[^`]*`")
_BACKTICKED_COMMAND = re.compile(r"`python -m pipeline ([a-z-]+)[^`]*`")
_BARE_COMMAND = re.compile(r"python -m pipeline ([a-z-]+)(?: --?[a-z-]+(?: (?!-)[^\s,;)`]+)?)*")
_BACKTICKED_FLAGS = re.compile(r"`(--[a-z][a-z0-9-]*(?: [^`]*)?)`")
_BARE_FLAG = re.compile(r"(?<![\w`-])--(no-)?([a-z][a-z0-9-]*)(?: (" + _VALUE + r")(?![\w+]))?")
_PASS_MODEL = re.compile(r"pass `--model ([^`]+)`")
_APP_ASIDE = re.compile(r" \(the app's [A-Z][a-z]+ tab[^()]*\)|, or the app's [A-Z][a-z]+ tab(?=\))")
"""A command-line message's pointer to the app, "(the app's Dataset tab, Build dataset)": dropped in the app,
where the command it follows is already said as the button (`_command`)."""
_COMMAND_LINE_ONLY = re.compile(r" \(on the command line: [^()]*\)")
"""A message's aside for the command line only, "(on the command line: `--token-stdin`)": dropped in the app,
whose own widget the same sentence names."""
_IN_THE_APP = re.compile(r" \(in the app: ([^()]*)\)")
"""A message's aside for the app's user, "edit it (in the app: click it in the Saved samples table)": in the
app it is said plainly, "edit it: click it in the Saved samples table" (the screen it shows on is the app)."""
_NEXT_SETTING = re.compile(r"(\((?:top of the page|[A-Z][a-z]+ tab[^)]*)\)) (\*\*)")


def _setting(flag: str, value: str | None, negated: bool = False,
             widgets: dict[str, tuple[str, str, bool]] = SETTING_WIDGETS) -> str | None:
    """One flag (with its value) in the app's words, or None when the app has no widget for it."""
    if flag in BUTTONS:
        label, where = BUTTONS[flag]
        return f"**{label}** ({where})"
    if flag not in widgets:
        return None
    label, where, switch = widgets[flag]
    if switch:
        return f"**{label}** {'off' if negated else 'on'} ({where})"
    if value:
        return f"**{label}: {value}** ({where})"
    return f"**{label}** ({where})"


def _backticked_flags(match: re.Match, widgets: dict[str, tuple[str, str, bool]] = SETTING_WIDGETS) -> str:
    """`--a 1 --b 2` -> **A: 1** (tab), **B: 2** (tab); left as it was when any flag has no widget."""
    parts = []
    for chunk in re.split(r"\s+(?=--)", match.group(1).strip()):
        name, _, value = chunk[2:].partition(" ")
        negated = name.startswith("no-") and name[3:] in widgets
        words = _setting(name[3:] if negated else name, value.strip() or None, negated, widgets)
        if words is None:
            return match.group(0)
        parts.append(words)
    return ", ".join(parts)


def _bare_flag(match: re.Match, widgets: dict[str, tuple[str, str, bool]] = SETTING_WIDGETS) -> str:
    negated, name, value = match.group(1), match.group(2), match.group(3)
    words = _setting(name, value, bool(negated), widgets)
    return match.group(0) if words is None else words


def _resume_command(match: re.Match) -> str:
    """`python -m pipeline train ... --resume [--allow-dataset-change]` -> the Train tab's Resume button
    (with its box ticked): the app resumes a run there, never with Start training."""
    resume = f"**{BUTTONS['resume'][0]}** ({BUTTONS['resume'][1]})"
    return f"{resume} after ticking **{RESUME_ANYWAY_LABEL}**" if match.group("anyway") else resume


def _command(match: re.Match) -> str:
    command = COMMANDS.get(match.group(1))
    if command is None:
        return match.group(0)
    return f"**{command[0]}** ({command[1]})"


BUILD_WIDGETS: dict[str, tuple[str, str, bool]] = {
    "max-length": ("Longest row to keep", "Dataset tab", False),
}
"""Where the Dataset tab's build has its own widget for a flag: `--max-length` of `build` decides which
rows the build leaves out, and that is the Dataset tab's box, not the Memory tab's training limit (pass
as `app_wording(..., widgets=BUILD_WIDGETS)` for what the build says)."""


_LEVEL_ASIDE = re.compile(r" ?\(([^()]*\bdBFS\b[^()]*)\)")
DBFS_WORDS = ("dBFS: decibels below the loudest sound a recording can hold (0 is the top; speech at a usable "
              "distance measures about -35 to -15, a room's hiss about -60).")
"""What the figure of a sound level means, said once under "Why?"."""


def levels_aside(text: str) -> tuple[str, list[str]]:
    """`text` without its bracketed asides that give a sound level in dBFS, and those asides: the words
    ("quiet: speak closer to the microphone") lead, the figure goes behind "Why?" (`why_levels`)."""
    asides = [match.group(1) for match in _LEVEL_ASIDE.finditer(text or "")]
    return _LEVEL_ASIDE.sub("", text or ""), asides


def why_levels(asides: Iterable[str]) -> str:
    """A "Why?" block with the sound-level figures `asides` (`levels_aside`) and what dBFS means; "" for none."""
    asides = [a[0].upper() + a[1:] + ("" if a.endswith(".") else ".") for a in asides if a]
    if not asides:
        return ""
    return f"\n\n<details><summary>Why?</summary>\n\n{' '.join(asides)} {DBFS_WORDS}\n\n</details>"


def not_here(text: str, here: str | None) -> str:
    """`text` without the pointers to `here`, the tab it is shown on ("Dataset tab"): "**Build dataset**
    (Dataset tab)" -> "**Build dataset**", "(Try tab, Advanced settings)" -> "(Advanced settings)"; a message
    never sends the reader to the tab they are on. `here` None: `text` as it is."""
    if not here or not text:
        return text or ""
    return text.replace(f" ({here})", "").replace(f"({here})", "").replace(f"({here}, ", "(")


def app_wording(text: str | None, *, markdown: bool = True,
                widgets: dict[str, tuple[str, str, bool]] | None = None, here: str | None = None) -> str:
    """`text` with the command line's flags and commands replaced by the app's widgets and buttons.

    E.g. "raise `--max-length` to 420" -> "raise **Max tokens per row** (Memory tab) to 420";
    "pass `--model DIR`" -> "pick DIR in the **Model** box at the top of the page";
    "`python -m pipeline build`" -> "**Build dataset** (Dataset tab)"; an aside "(on the command line: ...)"
    is dropped (the sentence names the app's widget already), an aside "(in the app: ...)" said plainly; a phrase naming an environment variable the app's
    user never set is said in their words (`ENVIRONMENT_PHRASES`). Flags and commands with no
    counterpart in the app (`--workspace`, `hf download ...`) are left as they are. With
    `markdown=False` (table cells, the log box: plain text) the result has no `**` or backticks.
    `widgets` names the widget of a flag where the message's own tab holds it (`BUILD_WIDGETS`),
    over `SETTING_WIDGETS`; `here`: the tab the message is shown on, which it does not name (`not_here`).
    """
    if not text:
        return ""
    if not markdown:  # a table cell or log line: no room for "Why?"
        return app_wording(text, widgets=widgets, here=here).split("\n\n<details>")[0].replace("**", "").replace("`", "")
    table = {**SETTING_WIDGETS, **(widgets or {})}
    text = _IN_THE_APP.sub(r": \1", _APP_ASIDE.sub("", _COMMAND_LINE_ONLY.sub("", str(text))))
    for phrase, words in ENVIRONMENT_PHRASES.items():
        text = text.replace(phrase, words)
    whys = []
    for pattern, words, why in ENVIRONMENT_FIXES:
        text, count = pattern.subn(words, text)
        whys += [why] * bool(count)
    text = _PASS_MODEL.sub(lambda m: f"pick {m.group(1)} in the **Model** box at the top of the page", str(text))
    text = _RESUME_COMMAND.sub(_resume_command, text)
    text = _BACKTICKED_COMMAND.sub(_command, text)
    text = _BARE_COMMAND.sub(_command, text)
    text = _BACKTICKED_FLAGS.sub(lambda m: _backticked_flags(m, table), text)
    text = _BARE_FLAG.sub(lambda m: _bare_flag(m, table), text)
    text = not_here(_NEXT_SETTING.sub(r"\1, \2", text), here)
    return text + "".join(f"\n\n<details><summary>Why?</summary>\n\n{why}\n\n</details>" for why in whys)  # "**A: 1** (tab) **B: 2** (tab)" -> "..., **B: 2** (tab)"


# --------------------------------------------------------------------------------------------
# the training log

_LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d (\d\d:\d\d:\d\d)(?:[,.]\d+)? (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: (.*)$")
_PROGRESS_BAR = re.compile(r"(?:[A-Z][A-Za-z ]*:)?\s*\d+%\|[^|\r\n]*\|[^\]\r\n]*\]")  # tqdm's bars
_LONG_FLOAT = re.compile(r"(?<![\w.])(-?\d+\.\d{5,})(?![\d])")
_LOGGED_MIB = re.compile(r"\b(peak) (\d+(?:\.\d+)?) MiB\b")  # a step line of a run trained before the GiB log line
_LOGGED_LOSS = re.compile(r"\b(loss) (-?\d+\.\d+)\b")  # a step's loss: one rounding (`format_loss`) on every screen
_LEVEL_MARK = {"WARNING": "⚠ ", "ERROR": "✗ ", "CRITICAL": "✗ "}
_STEP_LINE = re.compile(  # `pipeline.training.progress`'s line per step; lr and grad norm stay in train.log
    r"^step (\d+)/(\d+) loss (\S+) lr \S+ grad_norm \S+ peak(?: so far)? ([\d.]+ [GM]iB|–) eta (\S+) s$")
_EVAL_LINE = re.compile(r"^step (\d+)/(\d+) eval_loss (\S+)$")


def _step_words(message: str) -> str | None:
    """A training step's log line in a teacher's words ("step 5 of 33: loss 2.345, memory so far 1.03 GiB,
    about 23 s left"; the learning rate and gradient norm only in train.log), or None for another line."""
    match = _STEP_LINE.match(message.strip())
    if match:
        step, steps, loss, peak, eta = match.groups()
        if peak.endswith("MiB"):  # a run trained before the GiB log line: the panel's unit
            peak = format_gib(float(peak.split()[0]) * MIB)
        parts = [f"loss {format_loss(float(loss))}" if _is_number(loss) else None,
                 f"memory so far {peak}" if peak != "–" else None,
                 f"about {format_seconds(float(eta))} left" if _is_number(eta) and float(eta) > 0 else None]
        return f"step {step} of {steps}: " + ", ".join(part for part in parts if part)
    match = _EVAL_LINE.match(message.strip())
    if match:
        step, steps, loss = match.groups()
        return f"step {step} of {steps}: eval loss {format_loss(float(loss))}"  # the chart's and panel's word
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.lower() not in ("nan", "inf", "-inf", "none")


def _number(value: float) -> str:
    return f"{value:.4g}"


def _json_words(data: dict) -> str:
    """A logged JSON object in words: `key value` pairs, bytes in GiB with two decimals (`format_gib`, as the
    Train tab's memory panel prints them), counters in plain words."""
    words = []
    for key, value in data.items():
        name = key.replace("_", " ")
        if key == "memory_kind":
            words.append(memory_counter_words(value))
            continue
        if key.endswith("_bytes") and isinstance(value, (int, float)):
            value = format_gib(value)
            name = name[: -len(" bytes")]
        elif isinstance(value, float) and key.endswith("loss"):
            value = format_loss(value)  # as the Past runs table shows a loss
        elif isinstance(value, float):
            value = _number(value)
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value[:4]) + (" …" if len(value) > 4 else "")
        elif isinstance(value, dict):  # e.g. the preflight's worst case: its own words, in brackets
            value = f"({_json_words(value)})"
        words.append(f"{name} {value}")
    return "; ".join(words)


_STOP_FILE = re.compile(r"\bSTOP file found\b|\s*\(STOP file\)|\bthe STOP file\b")
"""The trainer's words for the file Stop writes, which the app's user never sees: Stop in their words."""


def _stop_words(match: re.Match) -> str:
    return {"STOP file found": "Stop was asked for", "the STOP file": "Stop"}.get(match.group(0).strip(), "")


def stop_words(text: str | None) -> str:
    """`text` (a run's note or log line) without the STOP file the app's user never saw: "STOP file found at
    step 3" -> "Stop was asked for at step 3", "stopped by request (STOP file)" -> "stopped by request"."""
    return _STOP_FILE.sub(_stop_words, text or "")


def _readable_message(message: str, here: str | None = None) -> str:
    step = _step_words(message)
    if step is not None:
        return step
    start = message.find(" {")
    if start >= 0 and message.rstrip().endswith("}"):
        try:
            data = json.loads(message[start + 1:])
        except ValueError:
            data = None
        if isinstance(data, dict) and len(data) > 8:  # the run's settings: in config.json and the Next run line
            message = f"{message[:start]} ({len(data)} values, in the run's config.json)"
        elif isinstance(data, dict):
            message = f"{message[:start].rstrip(':')}: {_json_words(data)}"
    message = _LOGGED_MIB.sub(lambda m: f"{m.group(1)} {format_gib(float(m.group(2)) * MIB)}", message)
    message = message.replace("grad_norm", "grad norm").replace("eval_loss", "eval loss")
    message = _LOGGED_LOSS.sub(lambda m: f"{m.group(1)} {format_loss(float(m.group(2)))}", message)
    message = app_wording(stop_words(message), markdown=False, here=here)
    return _LONG_FLOAT.sub(lambda m: _number(float(m.group(1))), message)


def readable_log(text: str, lines: int = 12, here: str | None = None) -> str:
    """The last `lines` lines of a `train.log` / `process.log` text, readable: `HH:MM:SS message`,
    ⚠ before warnings and ✗ before errors, logged JSON as words, memory in GiB as the Train tab's panel
    shows it (an older log's "peak 1059.8 MiB" too: one quantity, one unit), long floats to 4 digits, the app's
    words for command-line flags (`app_wording`), and no progress-bar fragments (tqdm's
    carriage-return lines). `here`: the tab the log box is on, which its lines do not name (`app_wording`)."""
    out: list[str] = []
    for raw in re.split(r"[\r\n]+", _PROGRESS_BAR.sub("", text or "")):
        line = raw.rstrip()
        if not line.strip():
            continue
        match = _LOG_LINE.match(line)
        if match:
            clock, level, message = match.groups()
            out.append(f"{clock}  {_LEVEL_MARK.get(level, '')}{_readable_message(message, here)}")
        else:
            out.append(_readable_message(line, here))
    return "\n".join(out[-lines:])


def app_lines(texts: Iterable[str]) -> list[str]:
    """`app_wording` of each text."""
    return [app_wording(text) for text in texts]
