"""Typed errors raised by `pipeline/`; `app.py` turns them into `gr.Error` in one place.

Every message names the offending value, what was expected and how to fix it, e.g.
"Clip `kate_03.m4a` is 41.2 s; Gemma hears at most 30 s (3n and 4 alike). Trim it or split it."
A value of unbounded size (a metadata cell, embedded audio bytes) is shown through `shorten`.
"""

SHOWN_CHARS = 120
"""The most characters of a value a message shows (`shorten`)."""


def shorten(value: object, limit: int = SHOWN_CHARS) -> str:
    """`value` as a message shows it: bytes as their size ("<160,044 bytes>"), text as is, anything
    else as `repr`, cut to `limit` characters with an ellipsis and the full length ("...", 5,000
    characters). A message never prints a value of unbounded size (a cell holding audio bytes)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value):,} bytes>"
    if isinstance(value, dict):
        text = "{" + ", ".join(f"{shorten(k, 40)}: {shorten(v, 40)}" for k, v in list(value.items())[:6]) + "}"
    else:
        text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: max(1, limit - 30)]}... ({len(text):,} characters)"


def in_words(items, limit: int = 8, empty: str = "nothing") -> str:
    """Names joined as a sentence says them, never a Python list: `["a", "b", "c"]` -> "a, b and c";
    more than `limit` -> "a, b, ... and 5 more"; none -> `empty`. Each item is `shorten`ed to 60 characters."""
    names = [shorten(item, 60) for item in items]
    if not names:
        return empty
    if len(names) > limit:
        return ", ".join(names[:limit]) + f" and {len(names) - limit} more"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def cause_words(error: BaseException) -> str:
    """What went wrong in `error`, said in words rather than as Python writes it: a `KeyError('x')` (which
    prints as "KeyError: 'x'") -> "the entry `x` is missing"; an `IndexError` -> "an entry is missing (...)";
    an error with no message -> its kind in words ("a ZeroDivisionError, with no message"); any other ->
    its message, after its kind when the message alone says little ("ValueError: bad value")."""
    if isinstance(error, KeyError):
        key = error.args[0] if error.args else "?"
        return f"the entry `{shorten(key, 60)}` is missing"
    text = str(error).strip()
    if isinstance(error, IndexError):
        return f"an entry is missing ({text or 'index out of range'})"
    if not text:
        return f"a {type(error).__name__}, with no message"
    if isinstance(error, (OSError, PipelineError)):
        return text
    return f"{type(error).__name__}: {text}"


class PipelineError(Exception):
    """Base class of every error a person can act on (bad input, missing files, no memory)."""


class AudioError(PipelineError):
    """Audio that cannot be decoded or fails a check (too short/long, silent, clipped, NaN)."""


class ClipTooLongError(AudioError):
    """A clip longer than Gemma 3n hears (30 s) and trimming was not asked for.

    `duration_s` is the clip's length in seconds. The message says to trim or split it; each place
    that offers a trim option (the Samples tab's box, `import --trim`) adds its own hint.
    """

    def __init__(self, message: str, duration_s: float):
        super().__init__(message)
        self.duration_s = float(duration_s)


class SampleError(PipelineError):
    """A sample library operation failed (unknown id, duplicate audio, empty text, bad manifest)."""


class ImportFormatError(PipelineError):
    """A source folder or metadata file is not in the expected layout (lists what was found)."""


class DatasetError(PipelineError):
    """The dataset cannot be built or loaded (no samples, nothing trainable, missing folder)."""


class ModelLoadError(PipelineError):
    """The model or processor cannot be loaded (not logged in, gated, offline, missing timm, disk)."""


class ModelAccessError(ModelLoadError):
    """Hugging Face refused a model's files to this person: no token for a gated model, a token it does not
    accept, or an account that has not accepted the model's licence. The fix is on the person's account,
    not in a file; `python -m pipeline get-model` exits with code 2 for it."""


class HubUnreachableError(ModelLoadError):
    """Hugging Face cannot be asked from here: offline mode is on, or no connection (a network error). Nothing
    is wrong with the model or the account; a person only needs to know when they ask for a download."""


class DownloadCancelled(ModelLoadError):
    """A model download was cancelled (Cancel, or its job's `CANCEL` file); what was fetched is kept."""


class BaseModelMismatchError(ModelLoadError):
    """An adapter (or a resumed run) meets a base model other than the one it was trained on; the message
    says what differs (config values, weight fingerprint) and what to do."""


class ConfigError(PipelineError):
    """A training/estimate setting is out of range; the message names the flag and the fix."""


class TrainingError(PipelineError):
    """Training cannot start or failed (empty dataset, a run already active, out of memory)."""


class EvaluationError(PipelineError):
    """An evaluation cannot run or was cancelled (no eval rows, another evaluation running, Cancel)."""


class ScoringError(PipelineError):
    """The classical scorer cannot do what was asked (no map to score with, too few scored clips to fit,
    an unknown scorer map file); a clip it cannot score is not an error but an answer with a reason."""


class ExportError(PipelineError):
    """An export or an import cannot be made (not enough disk, no adapter, a run that does not fit here)."""


class ImportRunError(ExportError):
    """A run trained elsewhere that cannot be imported. The message is the command line's (it names the run
    folder's files); `reason` says which refusal it is, one of `IMPORT_REFUSALS`, and `facts` holds the values
    the app words it with in a teacher's terms (`path`, and by reason `runs`, `status`, `name`, `model`)."""

    IMPORT_REFUSALS = ("nothing_there", "cannot_unpack", "not_a_run", "several_runs", "no_adapter", "name_taken",
                       "other_base_model")

    def __init__(self, message: str, reason: str, **facts):
        if reason not in self.IMPORT_REFUSALS:
            raise ValueError(f"unknown import refusal {reason!r}; expected one of {self.IMPORT_REFUSALS}")
        super().__init__(message)
        self.reason = reason
        self.facts = facts


def missing_package_message(error: ImportError) -> str:
    """The message for a package this Python lacks: which package, which Python is running, and the
    two fixes (the project's `.venv/bin/python`, or installing requirements.txt into this Python).

    An `ImportError` is never a fault of the user's files: `pipeline/` lets it through (an audio
    decoder's missing package is not "a damaged file"), and the command line words it here."""
    import sys

    name = (getattr(error, "name", None) or "").split(".")[0]
    python = f"{sys.executable} (Python {sys.version.split()[0]})"
    if isinstance(error, ModuleNotFoundError) and name:
        problem = f"the package `{name}` is not installed in the Python running this command, {python}"
    else:  # `from x import y` failed: another version of x than requirements.txt pins
        problem = (f"a package in the Python running this command, {python}, is not the version this project "
                   f"needs ({shorten(str(error), 200)})")
    return (f"{problem}. Run the command with the project's Python, `.venv/bin/python -m pipeline ...` (the "
            "virtual environment the README's Quick start makes), or install the packages into this one: "
            f"`{sys.executable} -m pip install -r requirements.txt`.")

