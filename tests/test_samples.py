"""The sample library: add/edit/delete/list, NFC text, duplicates, atomic manifest, CLI listing."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest
import soundfile as sf

from pipeline.data import samples as samples_module
from pipeline.errors import AudioError, SampleError
from pipeline.data.samples import Sample, SampleLibrary, make_sample_id


def clip(seconds: float = 1.0, freq: float = 220.0, rate: int = 16000) -> tuple[int, np.ndarray]:
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * freq * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    return rate, np.round(x * 32767).astype(np.int16)


@pytest.fixture
def library(tmp_path):
    return SampleLibrary(tmp_path / "ws")


def test_add_stores_normalized_audio_and_manifest(library):
    sample = library.add(clip(1.0, rate=48000), "Read this.", "Good.", speaker="kate", sample_id="kate 01")
    assert sample.id == "kate-01"
    path = library.audio_path(sample)
    assert path == library.workspace.audio_dir / "kate-01.wav"
    info = sf.info(str(path))
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    assert sample.duration_s == pytest.approx(1.0)
    assert sample.checks["source_rate_hz"] == 48000
    manifest = json.loads(library.workspace.manifest_path.read_text())
    assert manifest["version"] == 1 and [s["id"] for s in manifest["samples"]] == ["kate-01"]
    assert library.get("kate-01") == sample
    (audio,) = library.load_clips(sample)
    assert audio.dtype == np.float32 and audio.shape == (16000,)


def test_text_is_stored_nfc(library):
    nfd_text = unicodedata.normalize("NFD", "Le café est très bon")
    nfd_feedback = unicodedata.normalize("NFD", "Très bien; « é » ouvert")
    assert nfd_text != unicodedata.normalize("NFC", nfd_text)
    sample = library.add(clip(), nfd_text, nfd_feedback, speaker=unicodedata.normalize("NFD", "Zoë"))
    stored = json.loads(library.workspace.manifest_path.read_text(encoding="utf-8"))["samples"][0]
    for key, value in (("target_text", "Le café est très bon"), ("feedback", "Très bien; « é » ouvert"), ("speaker", "Zoë")):
        assert stored[key] == value and unicodedata.is_normalized("NFC", stored[key])
    updated = library.update(sample.id, feedback=unicodedata.normalize("NFD", "Bravo, très clair"))
    assert updated.feedback == "Bravo, très clair"


def test_duplicate_audio_reported_with_existing_id(library):
    first = library.add(clip(freq=300), "One", "ok", sample_id="first")
    with pytest.raises(SampleError, match=r"same audio as sample `first`"):
        library.add(clip(freq=300), "Other text", "ok")
    added, skipped = library.add_many(
        [
            {"audio": clip(freq=300), "target_text": "x", "file": "again.wav"},
            {"audio": clip(freq=310), "target_text": "y", "file": "new.wav"},
            {"audio": clip(freq=310), "target_text": "z", "file": "new-copy.wav"},
        ]
    )
    assert [s.target_text for s in added] == ["y"]
    assert [(s["file"], "same audio as sample" in s["reason"]) for s in skipped] == [
        ("again.wav", True),
        ("new-copy.wav", True),
    ]
    assert f"`{added[0].id}`" in skipped[1]["reason"]
    assert len(library.list()) == 2 and library.list()[0] == first


ADD_ERRORS = [
    ("empty-target", dict(target_text="   "), SampleError, r"target sentence .*holds only spaces"),
    ("none-target", dict(target_text=None), SampleError, r"target sentence .*is empty"),
    ("silent-audio", dict(audio=(16000, np.zeros(16000, np.int16))), AudioError, r"silent"),
    ("no-audio", dict(audio=None), AudioError, r"No audio received"),
    ("bad-scores", dict(scores=[1, 2]), SampleError, r"`scores` must be a dict"),
]


@pytest.mark.parametrize("case,override,error,message", ADD_ERRORS, ids=[c[0] for c in ADD_ERRORS])
def test_add_rejects_bad_input_and_changes_nothing(library, case, override, error, message):
    library.add(clip(freq=500), "Existing", "fine", sample_id="keep")
    before = library.workspace.manifest_path.read_bytes()
    kwargs = {"audio": clip(), "target_text": "Hello", "feedback": "ok", **override}
    with pytest.raises(error, match=message):
        library.add(kwargs.pop("audio"), kwargs.pop("target_text"), **kwargs)
    assert library.workspace.manifest_path.read_bytes() == before
    assert sorted(p.name for p in library.workspace.audio_dir.iterdir()) == ["keep.wav"]


def test_empty_feedback_allowed(library):
    sample = library.add(clip(), "Hello", "")
    assert sample.feedback == "" and library.get(sample.id).feedback == ""


def test_ids_are_unique_and_file_safe(library):
    a = library.add(clip(freq=200), "a", sample_id="Zoë/take 1")
    b = library.add(clip(freq=210), "b", sample_id="Zoë/take 1")
    c = library.add(clip(freq=220), "c")
    assert (a.id, b.id) == ("Zoe-take-1", "Zoe-take-1-2")
    assert c.id.startswith("s-") and len(c.id) == 12
    assert make_sample_id("..//") == "sample"


def test_update_and_delete(library):
    sample = library.add(clip(), "Hello", "", speaker="a")
    scores = {"accuracy": 7, "words": []}
    updated = library.update(sample.id, feedback="Nice", scores=scores, speaker="")
    assert (updated.feedback, updated.scores, updated.speaker) == ("Nice", scores, None)
    assert library.get(sample.id) == updated
    with pytest.raises(SampleError, match=r"Cannot edit audio_file of a sample; editable fields are target_text, "):
        library.update(sample.id, audio_file="x.wav")
    with pytest.raises(SampleError, match="cannot be empty"):
        library.update(sample.id, target_text=" ")
    with pytest.raises(SampleError, match="No sample with id `nope`"):
        library.update("nope", feedback="x")
    path = library.audio_path(sample)
    removed = library.delete(sample.id)
    assert removed.id == sample.id and not path.exists() and library.list() == []
    with pytest.raises(SampleError, match="No sample with id"):
        library.delete(sample.id)


def test_failed_manifest_write_keeps_old_manifest_and_removes_new_audio(library, monkeypatch):
    library.add(clip(freq=500), "Existing", "fine", sample_id="keep")
    before = library.workspace.manifest_path.read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(samples_module, "atomic_write_json", disk_full)
    with pytest.raises(OSError):
        library.add_many([{"audio": clip(freq=f), "target_text": "t"} for f in (600, 700)])
    assert library.workspace.manifest_path.read_bytes() == before
    assert sorted(p.name for p in library.workspace.audio_dir.iterdir()) == ["keep.wav"]


def test_damaged_manifest_is_a_clear_error(library):
    library.workspace.ensure()
    library.workspace.manifest_path.write_text("{not json")
    with pytest.raises(SampleError, match=r"cannot be read .*Restore it"):
        library.list()


def test_sample_roundtrip_dict():
    sample = Sample(id="a", audio_file="audio/a.wav", target_text="t", scores={"x": 1}, checks={"peak": 0.5})
    assert Sample.from_dict({**sample.to_dict(), "future_field": 1}) == sample
    with pytest.raises(SampleError, match="lacks"):
        Sample.from_dict({"id": "a"})


def test_progress_callback(library):
    calls = []
    library.add_many([{"audio": clip(freq=f), "target_text": "t"} for f in (200, 300, 400)], progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_cli_lists_samples_as_json(library, capsys):
    from pipeline.__main__ import main

    library.add(clip(), "Hello there", "Good", speaker="kate", scores={"accuracy": 8})
    assert main(["samples", "--workspace", str(library.workspace.root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["count"] == 1
    row = out["samples"][0]
    assert {"id", "target_text", "feedback", "speaker", "scores", "checks"} <= set(row)
    assert (row["target_text"], row["speaker"], row["scores"]) == ("Hello there", "kate", {"accuracy": 8})
    assert row["checks"]["source_rate_hz"] == 16000
    assert main(["samples", "--workspace", str(library.workspace.root)]) == 0
    assert "1 sample in" in capsys.readouterr().out


def test_saving_with_neither_audio_nor_text_names_every_missing_part(tmp_path):
    from pipeline.data.samples import SampleLibrary
    from pipeline.errors import SampleError

    with pytest.raises(SampleError) as caught:
        SampleLibrary(tmp_path).add(None, "", "", require_feedback=True)
    message = str(caught.value)
    assert "target sentence" in message and "feedback" in message and "No audio" in message
    assert not (tmp_path / "samples" / "manifest.jsonl").exists() or not SampleLibrary(tmp_path).list()
