"""The Samples tab's checks as a new user meets them: "Check clip" says what Save will do.

- "Check clip" honours the "Trim clips longer than 30 s" box, as Save does.
- Blank text (spaces, line breaks, invisible characters) fails the check and the save, not only the
  dataset build.
- A file that is not audio (or a damaged one) is named for what it is, with the accepted formats,
  and never shows decoder internals (temporary paths, errno numbers, decoder names).
"""

from __future__ import annotations

import gzip
import io
import sys
import zipfile
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import soundfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.conversation.messages import is_blank  # noqa: E402
from pipeline.data.audio import load_audio  # noqa: E402
from pipeline.data.audio_decode import ACCEPTED_FORMATS  # noqa: E402
from pipeline.data.samples import SampleLibrary  # noqa: E402
from pipeline.errors import AudioError, ClipTooLongError  # noqa: E402
from tests.test_app_handlers import (  # noqa: E402
    assert_failed,
    manifest_bytes,
    speech_like,
    write_wav,
)
from ui.tutor_app import TutorApp  # noqa: E402

RATE = 16000


@pytest.fixture()
def ui(tmp_path) -> TutorApp:
    """A TutorApp on a fresh workspace holding one saved sample (so the manifest exists)."""
    ui = TutorApp(tmp_path / "ws")
    status, _table, _cleared = ui.save_sample(write_wav(tmp_path / "first.wav", speech_like(seed=1)),
                                              "The cat sat.", "Clear and accurate.", "spk1")
    assert "Saved sample" in status
    return ui


# ------------------------------------------------------------------------------------------- trim


def test_check_clip_honours_the_trim_box_like_save(ui, tmp_path):
    clip = write_wav(tmp_path / "long.wav", np.tile(speech_like(1.0, seed=3), 40))  # 40 s
    refused = ui.check_clip(clip, "The cat sat.", "Good.", False)
    assert_failed(refused, "40.0 s", "30 s", "Trim clips longer than 30 s")
    assert "import" not in refused.lower(), "the Samples form is not an import"
    checked = ui.check_clip(clip, "The cat sat.", "Good.", True)
    assert "✗" not in checked and "30.00 s" in checked and "trimmed from 40.0 s" in checked
    # The check on upload (and when the box is ticked) follows the box too; no recording: nothing shown.
    assert "trimmed from 40.0 s" in ui.check_recording(clip, True)
    assert_failed(ui.check_recording(clip, False), "40.0 s")
    assert ui.check_recording(None, True) == gr.skip()
    # Save does what the check said.
    assert_failed(ui.save_sample(clip, "The cat sat.", "Good.", "", False), "Trim clips longer than 30 s")
    status, table, _ = ui.save_sample(clip, "The cat sat.", "Good.", "", True)
    assert "Saved sample" in status and "(30.00 s)" in status and len(table) == 2


def test_too_long_clip_in_an_import_names_the_import_trim_option(ui, tmp_path):
    folder = tmp_path / "long"
    folder.mkdir()
    write_wav(folder / "long.wav", np.tile(speech_like(1.0, seed=4), 35))
    (folder / "long.txt").write_text("A long one.", encoding="utf-8")
    summary, table, _samples = ui.import_folder(str(folder), "auto", False)
    reason = {row[0]: row[2] for row in table.value["data"]}["long.wav"]
    assert "35.0 s" in reason and "Trim clips longer than 30 s" in reason and "--trim" not in reason


# ------------------------------------------------------------------------------------------- blank text

BLANKS = {
    "empty": "",
    "spaces": "     ",
    "tabs and line breaks": " \t\n\r\n ",
    "no-break and ideographic spaces": "\u00a0\u2007\u3000",
    "zero-width characters": "\u200b\u200c\u200d\u2060",
    "byte-order mark": "\ufeff",
    "braille blank and Hangul filler": "\u2800\u3164",
}


@pytest.mark.parametrize("blank", list(BLANKS.values()), ids=list(BLANKS))
def test_blank_feedback_fails_the_check_and_the_save(ui, tmp_path, blank):
    clip = write_wav(tmp_path / "new.wav", speech_like(2.0, seed=5))
    before = manifest_bytes(ui)
    checked = ui.check_clip(clip, "The cat sat.", blank, False)
    assert checked.startswith("**✗ Not ready to save:**") and "tutor feedback" in checked
    assert "All checks passed" not in checked and "dBFS" in checked, "the audio checks still show"
    assert_failed(ui.save_sample(clip, "The cat sat.", blank, ""), "tutor feedback", "left out of training")
    checked = ui.check_clip(clip, blank, "Good.", False)
    assert checked.startswith("**✗ Not ready to save:**") and "target sentence" in checked
    assert_failed(ui.save_sample(clip, blank, "Good.", ""), "target sentence")
    assert manifest_bytes(ui) == before
    assert is_blank(blank)


def test_check_clip_passes_when_everything_is_filled_in(ui, tmp_path):
    clip = write_wav(tmp_path / "new.wav", speech_like(2.0, seed=6))
    checked = ui.check_clip(clip, "The cat sat.", "Say 'cat' with a short a.", False)
    assert "✗" not in checked and "All checks passed" in checked


def test_visible_text_is_not_blank():
    for text in ("ok", " a ", "—", "…", "\u200bx", "4/10"):
        assert not is_blank(text), text


def test_editing_in_blank_feedback_saves_with_a_warning(ui):
    sample_id = ui.samples_table().iloc[0]["id"]
    status, table = ui.update_sample(sample_id, "The cat sat.", "\u200b  ", "spk1")
    assert "Saved changes" in status and "⚠" in status and "leaves this sample out" in status
    assert SampleLibrary(ui.ws).get(sample_id).feedback == ""  # stored as missing, so the build lists it


def test_library_stores_invisible_feedback_as_missing(tmp_path):
    library = SampleLibrary(tmp_path / "ws")
    sample = library.add(write_wav(tmp_path / "a.wav", speech_like(seed=7)), "The cat sat.", "\u200b\ufeff")
    assert sample.feedback == ""
    with pytest.raises(Exception) as excinfo:
        library.add(write_wav(tmp_path / "b.wav", speech_like(seed=8)), "\u2800", "Good.")
    assert "target sentence" in str(excinfo.value)


# ------------------------------------------------------------------------------------------- not audio


def _wav_bytes(seconds: float = 1.0) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, speech_like(seconds, seed=9), RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _flac_bytes() -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, speech_like(3.0, seed=10), RATE, format="FLAC")
    return buffer.getvalue()


def _png_bytes() -> bytes:
    from matplotlib.figure import Figure

    buffer = io.BytesIO()
    Figure(figsize=(1, 1)).savefig(buffer, format="png")
    return buffer.getvalue()


def _zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", "hello")
    return buffer.getvalue()


# (case, file name, bytes, words the message must hold)
NOT_AUDIO = [
    ("text renamed .wav", "notes.wav", b"Kate's got some grey.\nSay GREY with a G.\n", ["not audio", "text"]),
    ("utf-16 text", "notes16.wav", "Kate's got some grey.".encode("utf-16"), ["not audio", "text"]),
    ("web page as .mp3", "page.mp3", b"<!DOCTYPE html><html><body>Sign in</body></html>", ["web page"]),
    ("image as .wav", "photo.wav", _png_bytes(), ["image (PNG)"]),
    ("PDF as .m4a", "lesson.m4a", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n" + bytes(range(256)) * 4, ["PDF"]),
    ("zip as .ogg", "clips.ogg", _zip_bytes(), ["ZIP archive"]),
    ("gzip as .flac", "clip.flac", gzip.compress(b"x" * 5000), ["gzip"]),
    ("random bytes as .mp3", "noise.mp3", np.random.default_rng(0).bytes(6000), ["not in an audio format"]),
    ("truncated WAV", "cut.wav", _wav_bytes()[:30], ["WAV file", "damaged or cut short"]),
    ("truncated FLAC", "cut.flac", _flac_bytes()[:2000], ["FLAC file", "damaged or cut short"]),
]
INTERNALS = ("errno", "soundfile", "pyav", "avcodec", "libsndfile", "/tmp", "\\", "Error opening", "Invalid data")


@pytest.mark.parametrize("case,name,data,words", NOT_AUDIO, ids=[case[0] for case in NOT_AUDIO])
def test_a_file_that_is_not_audio_is_named_for_what_it_is(ui, tmp_path, case, name, data, words):
    path = tmp_path / "upload" / name
    path.parent.mkdir()
    path.write_bytes(data)
    before = manifest_bytes(ui)
    for message in (ui.check_clip(str(path), "The cat sat.", "Good.", False),
                    ui.save_sample(str(path), "The cat sat.", "Good.", "")[0],
                    ui.try_feedback(str(path), "The cat sat.", "any-run", 16)[1]):
        assert message.startswith("**✗"), message
        for word in [name, *words]:
            assert word in message, f"{word!r} not in {message!r}"
        if "damaged" not in message:
            assert ACCEPTED_FORMATS in message
        lowered = message.lower()
        assert not any(bit.lower() in lowered for bit in INTERNALS), message
        assert str(tmp_path) not in message
    assert manifest_bytes(ui) == before
    with pytest.raises(AudioError) as excinfo:  # raw bytes (an upload without a name) say the same
        load_audio(data)
    assert all(word in str(excinfo.value) for word in words) and "errno" not in str(excinfo.value).lower()


def test_too_long_clip_is_its_own_error_with_its_length(tmp_path):
    with pytest.raises(ClipTooLongError) as excinfo:
        load_audio(write_wav(tmp_path / "long.wav", np.tile(speech_like(1.0, seed=11), 31)))
    assert excinfo.value.duration_s == pytest.approx(31.0) and "import" not in str(excinfo.value)
