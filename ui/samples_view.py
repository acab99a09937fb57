"""The Samples tab's text and tables: a clip's checks, the library's table and summary, an import's report,
the editor's labels, the recording session's progress, the sample pack's attribution.

Pure formatting of what `pipeline.data` returns (an `AudioReport`, `Sample`s, an `ImportReport`, a
`Session`; dicts or objects alike): a Markdown string, an HTML snippet or a `pandas.DataFrame`. No gradio,
no file reading, no pipeline call; the handlers in `ui/samples_tab.py`, `ui/samples_kinds.py` and
`ui/samples_session.py` read the library and lay these out.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from pipeline.units import plural
from ui.counts import some_ids
from ui.fields import get_field
from ui.wording import levels_aside, why_levels


def dbfs(amplitude: float | None) -> str:
    """Linear amplitude in [0, 1] -> decibels relative to full scale, `20*log10(a)` (`"-23.1 dBFS"`)."""
    if amplitude is None:
        return "–"
    if amplitude <= 0:
        return "-inf dBFS"
    return f"{20 * math.log10(amplitude):.1f} dBFS"


def clipping_words(fraction: float) -> str:
    """The share of a clip's samples at full scale, in words: "none at full scale" for 0 (a figure of
    0.00 % read as a measurement of something), else "0.12 % of samples at full scale"."""
    if fraction <= 0:
        return "none at full scale"
    return f"{fraction * 100:.2f} % of samples at full scale"


def source_words(rate_hz: float | None, channels: int | None) -> str:
    """A clip's source format in the unit of what it becomes (16 kHz mono): "44.1 kHz, 2 channels" (it said
    "16000 Hz, 1 channel(s) → 16 kHz mono", one rate in two units on one line)."""
    rate = f"{rate_hz / 1000:g} kHz" if rate_hz else "–"
    return f"{rate}, {plural(channels, 'channel') if channels else '– channels'}"


def checks_markdown(report: Any, *, title: str = "Check results", problems: Sequence[str] = ()) -> str:
    """Markdown table of an `AudioReport` (dict or object): duration, loudness, clipping, silence.

    Each line shows the measured value and a mark: ✓ passed, ⚠ passed with the library's warning.
    (A clip that fails a check never gets here: `load_audio` raises `AudioError` with the reason.)
    `problems`: what else stops the sample from being saved (blank texts); they head the panel as
    "✗ Not ready to save" and replace "All checks passed".
    """
    duration = get_field(report, "duration_s")
    peak = get_field(report, "peak")
    level = get_field(report, "level_dbfs")
    clipped = float(get_field(report, "clipped_fraction") or 0.0)
    warnings = [str(w) for w in (get_field(report, "warnings") or [])]
    rate = get_field(report, "source_rate_hz")
    channels = get_field(report, "channels")

    def mark(*starts: str) -> str:
        """⚠ when one of the library's warnings of this check is there (each check's warnings begin with
        its own words, `pipeline.data.audio`), else ✓: a mark only for something to act on."""
        hit = any(w.lower().lstrip().startswith(start) for w in warnings for start in starts)
        return "⚠" if hit else "✓"

    quiet = mark('quiet', 'dc offset') == "⚠"
    loudness = "–" if not isinstance(level, (int, float)) else "quiet: speak closer" if quiet else "clear speech level"
    levels = [f"speech level {level:.1f} dBFS in the loudest 0.25 s; peak {dbfs(peak)}"] \
        if isinstance(level, (int, float)) else []
    shown = [levels_aside(w) for w in warnings]  # a warning's words; its figures go behind "Why?"
    levels += [aside for _words, asides in shown for aside in asides if "at its loudest" not in aside]  # said above
    lines = [
        f"**{title}**",
        "",
        "| check | measured | |",
        "|---|---|---|",
        f"| duration | {clip_seconds(duration)} (0.3–30 s is heard) | {mark('trimmed', 'short', 'long')} |"
        if isinstance(duration, (int, float)) else "| duration | – | |",
        f"| loudness / silence | {loudness} | {mark('quiet', 'dc offset')} |",
        f"| clipping | {clipping_words(clipped)} | {mark('slightly clipped', 'too loud', 'near full scale')} |",
        f"| source | {source_words(rate, channels)} → 16 kHz mono | {mark('low sample rate', 'the channels')} |",
    ]
    if warnings:
        lines += ["", *[f"- ⚠ {words}" for words, _asides in shown]]
    elif not problems:
        lines += ["", "All checks passed."]
    if problems:
        lines = [f"**✗ Not ready to save:** {' '.join(problems)}", "", *lines]
    return "\n".join(lines) + why_levels(levels)


def clip_seconds(duration_s: float | None) -> str:
    """A clip's length as the Samples tab writes it everywhere: two decimals (`"3.35 s"`), the rounding of the
    checks' duration and of the library's "seconds" column, so a save's status never says 3.4 s beside 3.35 s."""
    return f"{float(duration_s or 0.0):.2f} s"


def saved_markdown(sample: Any, after: str = ".") -> str:
    """The status after a save: the sample's id and length (`clip_seconds`), `after` (what else to say, from
    its punctuation on), then its checks (`checks_markdown`)."""
    return (f"Saved sample **{get_field(sample, 'id')}** ({clip_seconds(get_field(sample, 'duration_s'))}){after}\n\n"
            + checks_markdown(get_field(sample, "checks"), title="Saved clip"))


def samples_frame(samples: Iterable[Any]):
    """Table of saved samples for the library view: one row per `Sample` (dict or object).

    Columns: id, speaker, duration (s, two decimals as `clip_seconds` writes it, "3.00"), target sentence, feedback (first 80 characters), warnings.
    """
    import pandas as pd

    rows = []
    for sample in samples:
        checks = get_field(sample, "checks") or {}
        warnings = get_field(checks, "warnings") or []
        feedback = get_field(sample, "feedback") or ""
        rows.append(
            {
                "id": get_field(sample, "id"),
                "speaker": get_field(sample, "speaker") or "",
                # text, not a number: the table would write 3.00 as "3" beside "2.58" (one rounding, `clip_seconds`)
                "seconds": clip_seconds(get_field(sample, "duration_s")).removesuffix(" s"),
                "target sentence": _sample_title(sample),
                "feedback": feedback if len(feedback) <= 80 else feedback[:79] + "…",
                "warnings": "; ".join(levels_aside(str(w))[0] for w in warnings),
            }
        )
    columns = ["id", "speaker", "seconds", "target sentence", "feedback", "warnings"]
    return pd.DataFrame(rows, columns=columns)


def _sample_title(sample: Any) -> str:
    """The sentence of a read-aloud sample; "[free speech] prompt" or "[dialogue] N turns..." for the other kinds."""
    kind = get_field(sample, "kind") or "read_aloud"
    if kind == "read_aloud":
        return get_field(sample, "target_text") or ""
    title = getattr(sample, "title", None) or get_field(sample, "prompt") or ""
    return f"[{kind.replace('_', ' ')}] {title}"


def import_report_frame(report: Any):
    """Per-file table of an `ImportReport`: the skipped files with the reason first, then the imported ids (the
    table is short on screen: skipped rows after many imported ones were out of sight)."""
    import pandas as pd

    kinds = {r["id"]: r["kind"] for r in get_field(report, "rows") or [] if r["kind"] != "read_aloud"}
    rows = [{"file / sample": get_field(item, "file"), "result": "skipped", "reason": get_field(item, "reason")}
            for item in get_field(report, "skipped") or []]
    rows += [{"file / sample": sid, "result": f"imported ({kinds[sid].replace('_', ' ')})" if sid in kinds else "imported",
              "reason": ""} for sid in get_field(report, "imported") or []]
    return pd.DataFrame(rows, columns=["file / sample", "result", "reason"])


IMPORT_FORMAT_WORDS = {
    "kaldi": "a speech-research corpus of sentences read aloud (Kaldi)",
    "audiofolder": "a folder of clips with a table of their sentences (audiofolder)",
    "ljspeech": "a list of clips and their sentences (LJSpeech)",
    "commonvoice": "a Common Voice download (Common Voice)",
    "folder": "clips with a text file of the sentence beside each (folder)",
    "chat": "a file of conversations with the tutor (chat JSON)",
}
"""How the import summary names each layout `pipeline.data.importers.detect_format` reads
(`pipeline.data.importers.FORMATS`): what the teacher gave first, the format's name in brackets."""


def import_summary(report: Any, source: str) -> str:
    """One Markdown line: how many recordings (library samples: a dialogue of several clips is one, as the
    library summary counts them) were imported and skipped from `source`, and what it was read as
    (`IMPORT_FORMAT_WORDS`; a format not listed there is named as it is)."""
    imported = len(get_field(report, "imported") or [])
    skipped = len(get_field(report, "skipped") or [])
    fmt = get_field(report, "format")
    fmt_text = f", read as {IMPORT_FORMAT_WORDS.get(fmt, fmt)}" if fmt else ""
    line = f"Imported **{plural(imported, 'recording')}** from `{source}`{fmt_text}; skipped **{skipped}**."
    if skipped:
        line += " The table below lists the skipped files first, each with why it was left out."
    return line + "".join(f"\n\n⚠ {note}" for note in get_field(report, "notes") or [])


KIND_WORDS = (("read_aloud", "read aloud", "read aloud"), ("free_speech", "free speech answer", None),
              ("dialogue", "dialogue", None))
"""Each kind as the library's summary counts it: (kind, one, many)."""


EMPTY_LIBRARY = "No recordings yet: record one below, or **Load the sample pack** to try everything first."
"""How to start, said once on the Samples tab: its headline at the top says it (the pack's button and the
recorder are below it); the summary above the empty table says nothing (`ui.samples_tab.SamplesHandlers.library_details`)."""


def library_markdown(samples: Sequence[Any]) -> str:
    """The library in a teacher's words, above its table (`samples`: `pipeline.data.samples.Sample`s):
    recordings, learners, how many of each kind (`KIND_WORDS`), and which samples cannot be trained on yet
    (no feedback) or have no learner; how to start when there are none (`EMPTY_LIBRARY`, Markdown)."""
    if not samples:
        return EMPTY_LIBRARY
    learners = {s.speaker for s in samples if s.speaker}
    kinds = [plural(sum(1 for s in samples if s.kind == kind), word, many)
             for kind, word, many in KIND_WORDS if any(s.kind == kind for s in samples)]
    lines = [f"**{plural(len(samples), 'recording')} from {plural(len(learners), 'learner')}**: {', '.join(kinds)}."]
    no_feedback = sorted(s.id for s in samples if not s.has_answer)
    if no_feedback:
        lines.append(f"⚠ No tutor feedback yet, so left out of training: {some_ids(no_feedback, 8, code=True)}.")
    no_speaker = sorted(s.id for s in samples if not s.speaker)
    if no_speaker and learners:
        lines.append(f"⚠ No learner (speaker) set, so they may land in both the training and the test set: "
                     f"{some_ids(no_speaker, 8, code=True)}. Click one below and type its speaker.")
    return "\n\n".join(lines)


EDIT_LABELS = {
    "read_aloud": ("Target sentence", "Tutor feedback"),
    "free_speech": ("Prompt (the question the learner answered)", "Tutor feedback"),
    "dialogue": ("Dialogue", "Turns (to change them, save a new dialogue in the dialogue editor)"),
}
"""The editor's two text boxes for a sample of each kind."""


def dialogue_text(turns: list[dict]) -> str:
    """A dialogue's turns to read in the editor: "Learner: [clip] text" / "Tutor: text", one per line."""
    lines = []
    for turn in turns:
        if turn.get("role") == "tutor":
            lines.append(f"Tutor: {turn.get('text') or ''}")
        else:
            said = turn.get("text") or turn.get("transcript") or ""
            lines.append("Learner: " + " ".join(part for part in ("[clip]" if turn.get("audio_file") else "", said) if part))
    return "\n".join(lines)


def session_markdown(session: Any) -> tuple[str, str]:
    """(progress Markdown, current item HTML) of a recording session (`pipeline.data.session.Session`, or None:
    no session yet), for the Recording session's progress line and the item to record."""
    if session is None:
        return "No session yet: paste the sentences or prompts, then **Start session**.", ""
    what = "Read aloud" if session.kind == "read_aloud" else "Answer the prompt"
    if session.done:
        item = "<div class='session-item'>All items are done. Go <b>Back</b> to re-record one, or start a new list.</div>"
    else:
        item = f"<div class='session-item'><small>{what}:</small><br><b>{html.escape(session.current)}</b></div>"
    speaker = f" · speaker **{session.speaker}**" if session.speaker else ""
    return f"**{session.progress()}**{speaker}", item


def sample_pack_attribution(pack_dir: Path) -> str:
    """Where the sample pack's clips come from (speechocean762, with its licence) and how to import its free-speech
    answers and dialogues too (`pack_dir`: the pack's folder, `ui.samples_tab.SAMPLE_PACK_DIR`); Markdown."""
    return (
        "*Sample pack:* 8 real recordings of 3 young Mandarin-speaking learners from **speechocean762** "
        "(Junbo Zhang et al., Interspeech 2021, arXiv:2104.01378; free for commercial and non-commercial use), "
        "with feedback written from the experts' scores. Details: `sample_data/speechocean762-pack/README.md`.\n\n"
        "The pack holds read-aloud clips only. To try **free speech** and **dialogues** too (Samples, Try, Judge), "
        f"import its examples: open **Import a folder** (just above this report), type `{pack_dir / 'tutoring.jsonl'}` and press "
        "**Import** (3 tutoring dialogues and 2 free-speech answers over the same clips; the two-clip dialogue is "
        "608 tokens, left out at the default 512 tokens per row: the Dataset tab says how to keep it)."
    )
