"""Imports and audio on inputs made like the faulty files people have (issue 21, items 1-6 and 12a).

Each test builds its input in a temp folder: JSON Lines holding Unicode line breaks, a `datasets`
Parquet with embedded audio, other tools' chat layouts (LLaMA-Factory, ms-swift, sharegpt, alpaca,
OpenAI `input_audio`), DC offsets and out-of-phase stereo, a WAV whose header says it holds nothing,
a 10-minute MP3, and a Python that lacks the project's packages.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipeline.data.audio import MAX_DURATION_S, load_audio
from pipeline.data.importers import detect_format, import_folder
from pipeline.data.samples import SampleLibrary
from pipeline.errors import AudioError, ClipTooLongError, ImportFormatError

RATE = 16000


def voice(seconds: float = 1.2, freq: float = 220.0, rate: int = RATE, amplitude: float = 0.3) -> np.ndarray:
    """A voiced tone with harmonics and a syllable-rate envelope, float32 (n,)."""
    t = np.arange(int(seconds * rate)) / rate
    wave = sum(np.sin(2 * np.pi * freq * k * t) / k for k in (1, 2, 3)) / 1.84
    return (amplitude * wave * (0.55 + 0.45 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)


def wav(samples: np.ndarray, rate: int = RATE, subtype: str = "PCM_16") -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format="WAV", subtype=subtype)
    return buffer.getvalue()


def write_wav(path: Path, freq: float, seconds: float = 1.2) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(wav(voice(seconds, freq)))
    return path


# --------------------------------------------------------------------------- 1. JSON Lines and Unicode line breaks
BREAKS = ["\u2028", "\u2029", "\u0085"]  # LINE SEPARATOR, PARAGRAPH SEPARATOR, NEXT LINE: valid raw inside JSON strings


def test_chat_jsonl_with_unicode_line_breaks_in_a_value_imports_every_line(tmp_path):
    source = tmp_path / "chat"
    lines = []
    for number, brk in enumerate(BREAKS):
        write_wav(source / f"c{number}.wav", 200 + 60 * number)
        lines.append(json.dumps({"kind": "free_speech", "messages": [
            {"role": "user", "content": [{"type": "audio", "path": f"c{number}.wav"},
                                         {"type": "text", "text": "Describe your town"}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"Good vowels.{brk}Next: stress{brk}the verb."}]}]},
            ensure_ascii=False))
    (source / "chat.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = import_folder(tmp_path / "ws", source / "chat.jsonl")
    assert report.skipped == []
    assert len(report.imported) == 3
    feedbacks = sorted(s.feedback for s in SampleLibrary(tmp_path / "ws").list())
    assert any("\u2028" in f for f in feedbacks)


def test_progress_jsonl_with_unicode_line_breaks_is_read_and_trimmed_whole(tmp_path):
    from pipeline.fileio import read_jsonl
    from pipeline.training.run_folder import trim_progress_to_step

    path = tmp_path / "progress.jsonl"
    rows = [{"step": 1, "note": "a\u2028b"}, {"step": 2, "note": "c\u2029d\u0085e"}, {"step": 3, "note": "f"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert read_jsonl(path) == rows
    assert trim_progress_to_step(path, 2) == 1
    assert read_jsonl(path) == rows[:2]


# --------------------------------------------------------------------------- 2. metadata values as file names
def test_datasets_parquet_with_embedded_audio_imports_from_bytes_and_skips_bad_rows(tmp_path, capsys):
    import pandas as pd

    from pipeline.data.cli import import_main as main

    root = tmp_path / "hf"
    root.mkdir()
    write_wav(root / "on_disk.wav", 330)
    huge = "x" * 5000  # a value no file system takes as a name
    audio = [
        {"bytes": wav(voice(1.2, 210)), "path": "clip_a.wav"},       # embedded (what `datasets` writes)
        {"bytes": b"\x00garbage" * 20000, "path": "clip_b.wav"},     # embedded but not audio: skipped
        {"bytes": None, "path": "on_disk.wav"},                       # not embedded: resolved as a file
        {"bytes": None, "path": huge},                                # a path too long for any file system
        {"bytes": wav(voice(1.2, 260)), "path": None},                # embedded, no name
    ]
    frame = pd.DataFrame({"audio": audio, "sentence": ["one", "two", "three", "four", "five"]})
    frame.to_parquet(root / "metadata.parquet")
    assert main(["--workspace", str(tmp_path / "ws"), "--source", str(root), "--json"]) == 0
    out = capsys.readouterr()
    assert len(out.out) + len(out.err) < 4000, "raw values (audio bytes, a 5000-character name) were printed"
    report = json.loads(out.out)
    texts = sorted(SampleLibrary(tmp_path / "ws").get(row["id"]).target_text for row in report["rows"])
    assert texts == ["five", "one", "three"]
    reasons = {entry["file"]: entry["reason"] for entry in report["skipped"]}
    assert len(reasons) == 2
    assert all(len(f) < 300 and len(r) < 600 for f, r in reasons.items())
    assert any("clip_b.wav" in f for f in reasons)
    assert any("name" in r and "long" in r for r in reasons.values())


def test_a_hugging_face_download_of_parquet_shards_imports_from_the_embedded_bytes(tmp_path):
    """The layout `datasets` pushes to the hub: `data/<split>-0000n-of-0000m.parquet`, no metadata file,
    an `audio` struct holding the bytes beside a `file_name` that names a file not shipped."""
    import pandas as pd

    root = tmp_path / "download"
    (root / "data").mkdir(parents=True)
    for split, freq in (("train", 220), ("test", 300)):
        pd.DataFrame({"file_name": [f"orig/{split}.wav"], "audio": [{"bytes": wav(voice(1.2, freq)), "path": f"{split}.wav"}],
                      "sentence": [f"the {split} sentence"]}).to_parquet(root / "data" / f"{split}-00000-of-00001.parquet")
    report = import_folder(tmp_path / "ws", root)
    assert report.format == "audiofolder" and report.skipped == []
    assert sorted(s.target_text for s in SampleLibrary(tmp_path / "ws").list()) == ["the test sentence", "the train sentence"]


def test_a_csv_file_name_cell_too_long_for_the_file_system_skips_only_that_row(tmp_path):
    root = tmp_path / "src"
    write_wav(root / "a.wav", 300)
    write_wav(root / "b.wav", 350)
    (root / "metadata.csv").write_text(
        f"file_name,sentence\na.wav,first\n{'clips/' + 'y' * 3000}.wav,second\nb.wav,third\n", encoding="utf-8")
    report = import_folder(tmp_path / "ws", root)
    assert sorted(report.imported) == ["a", "b"]
    assert len(report.skipped) == 1 and len(report.skipped[0]["file"]) < 300


# --------------------------------------------------------------------------- 3. other tools' layouts
def _llamafactory_rows(folder: Path) -> list[dict]:
    write_wav(folder / "media" / "a.wav", 240)
    write_wav(folder / "media" / "b.wav", 280)
    write_wav(folder / "media" / "c.wav", 320)
    return [
        {"messages": [{"role": "user", "content": "<audio>Describe your last holiday."},
                      {"role": "assistant", "content": "Clear vowels; stress the second syllable of HOLIDAY."}],
         "audios": ["media/a.wav"]},
        {"messages": [{"role": "system", "content": "You are a tutor."},
                      {"role": "user", "content": "<audio>"},
                      {"role": "assistant", "content": "Say BEAR with an open EH."},
                      {"role": "user", "content": "Like this? <audio>"},
                      {"role": "assistant", "content": "Yes."}],
         "audios": ["media/b.wav", "media/c.wav"]},
    ]


def _sharegpt(rows: list[dict]) -> list[dict]:
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    return [{"conversations": [{"from": names[m["role"]], "value": m["content"]} for m in row["messages"]],
             "audios": row["audios"]} for row in rows]


@pytest.mark.parametrize("layout", ["llamafactory-json", "ms-swift-jsonl", "sharegpt-json", "sharegpt-jsonl"])
def test_llamafactory_and_ms_swift_audio_layouts_import(tmp_path, layout):
    folder = tmp_path / "data"
    rows = _llamafactory_rows(folder)
    if layout.startswith("sharegpt"):
        rows = _sharegpt(rows)
    if layout.endswith("-json"):
        path = folder / "train.json"
        path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    else:
        path = folder / "train.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert detect_format(path) == "chat"
    report = import_folder(tmp_path / "ws", path)
    assert report.skipped == []
    assert sorted(row["kind"] for row in report.rows) == ["dialogue", "free_speech"]
    samples = {s.kind: s for s in SampleLibrary(tmp_path / "ws").list()}
    assert samples["free_speech"].prompt == "Describe your last holiday."
    assert "HOLIDAY" in samples["free_speech"].feedback
    dialogue = samples["dialogue"]
    assert len(dialogue.clip_files) == 2
    assert [t.get("text") for t in dialogue.turns if t["role"] == "tutor"] == ["Say BEAR with an open EH.", "Yes."]
    assert [t.get("text") for t in dialogue.turns if t["role"] == "learner"] == [None, "Like this?"]


def test_alpaca_and_openai_input_audio_layouts_import(tmp_path):
    folder = tmp_path / "data"
    write_wav(folder / "a.wav", 250)
    data = base64.b64encode(wav(voice(1.2, 300))).decode("ascii")
    rows = [
        {"instruction": "<audio>Describe your town.", "input": "", "output": "Good linking.", "audios": ["a.wav"]},
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
                                                    {"type": "text", "text": "Describe your school."}]},
                      {"role": "assistant", "content": "Stress SCHOOL."}]},
    ]
    (folder / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    report = import_folder(tmp_path / "ws", folder / "mixed.jsonl")
    assert report.skipped == []
    prompts = sorted(s.prompt for s in SampleLibrary(tmp_path / "ws").list())
    assert prompts == ["Describe your school.", "Describe your town."]


@pytest.mark.parametrize("row,words", [
    ({"messages": [{"role": "user", "content": "<audio>Hi"}, {"role": "assistant", "content": "Hello"}], "audios": []},
     ["1 `<audio>`", "0"]),
    ({"messages": [{"role": "user", "content": "<image>What is this?"}, {"role": "assistant", "content": "A cat"}],
      "images": ["cat.png"]}, ["image", "recording"]),
    ({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]},
     ["sharegpt", "text only", "audios"]),
    ({"prompt": "Hi", "completion": "Hello"}, ["prompt", "completion", "messages"]),
])
def test_layouts_not_imported_are_named_with_how_to_convert(tmp_path, row, words):
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    report = import_folder(tmp_path / "ws", path)
    assert report.imported == []
    reason = report.skipped[0]["reason"]
    for word in words:
        assert word in reason, reason
    assert "no `messages` list" not in reason and "has no recording" not in reason


# --------------------------------------------------------------------------- 4. levels on the raw mix
def test_quiet_noise_with_a_dc_offset_is_silent_not_speech():
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(2 * RATE) * 10 ** (-75 / 20) + 0.02
    with pytest.raises(AudioError, match="silent"):
        load_audio(wav(noise.astype(np.float32), subtype="FLOAT"))


def test_speech_with_a_dc_offset_is_measured_without_it():
    speech = voice(1.5, amplitude=0.05)  # about -32 dBFS over its loudest window
    plain = load_audio(wav(speech, subtype="FLOAT")).report.level_dbfs
    offset = load_audio(wav(speech + 0.3, subtype="FLOAT")).report.level_dbfs
    assert abs(offset - plain) < 0.5


def test_out_of_phase_stereo_is_not_called_silent_and_the_cancellation_is_reported():
    speech = voice(1.5)  # about -21 dBFS over its loudest window
    clip = load_audio(wav(np.stack([speech, -speech], axis=1)))
    assert clip.report.level_dbfs > -30
    assert any("phase" in w for w in clip.report.warnings)
    assert np.max(np.abs(clip.samples)) > 0.2
    # A silent second channel halves the mix (-6 dB): that is a mix, not a cancellation.
    one_sided = load_audio(wav(np.stack([speech, np.zeros_like(speech)], axis=1)))
    assert not any("phase" in w for w in one_sided.report.warnings)


# --------------------------------------------------------------------------- 5. a header that contradicts the file
def _zero_data_size(data: bytes, riff_too: bool = False) -> bytes:
    data = bytearray(data)
    at = data.find(b"data")
    data[at + 4:at + 8] = struct.pack("<I", 0)
    if riff_too:
        data[4:8] = struct.pack("<I", 0)
    return bytes(data)


@pytest.mark.parametrize("riff_too", [False, True], ids=["data-size-0", "riff-and-data-size-0"])
def test_a_wav_whose_header_says_no_data_is_read_by_the_other_decoder(tmp_path, riff_too):
    data = _zero_data_size(wav(voice(2.0)), riff_too)
    path = tmp_path / "cut_off.wav"
    path.write_bytes(data)
    for source in (path, data):
        clip = load_audio(source)
        assert clip.duration_s == pytest.approx(2.0, abs=0.01)


# --------------------------------------------------------------------------- 6. long files: the container first
def _long_mp3(path: Path, seconds: float = 600.0) -> Path:
    import av

    rate = 16000
    t = np.arange(int(seconds * rate)) / rate
    x = (0.3 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mp3", rate=rate)
        stream.bit_rate = 32000
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(x[None, :], format="flt", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def _peak_bytes(call) -> tuple[object, int]:
    """The call's result (or its AudioError) and the peak of Python-traced memory while it ran, bytes
    (numpy's arrays included). A short clip through both decoders first, so the modules they import
    on first use (scipy, av) are not counted."""
    load_audio(wav(voice(1.0)))
    load_audio(wav(voice(1.0)), name="warm-up.m4a")
    import av  # noqa: F401 - imported on first use by the PyAV decoder

    tracemalloc.start()
    try:
        try:
            result = call()
        except AudioError as error:
            result = error
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def long_mp3(tmp_path_factory) -> Path:
    return _long_mp3(tmp_path_factory.mktemp("long") / "lecture.mp3")


# 30 s of 16 kHz mono is 1.8 MiB in float32 (the level checks make a few float64 copies of it);
# the whole 10 minutes is 36.6 MiB in float32 alone, so a bound of 20 MiB fails any whole-file decode.
KEPT_BYTES_BOUND = 20 * 2**20


@pytest.mark.parametrize("by_pyav", [False, True], ids=["soundfile", "pyav"])
@pytest.mark.slow
def test_a_long_mp3_is_refused_from_its_container_without_decoding_it_all(long_mp3, tmp_path, by_pyav):
    assert long_mp3.stat().st_size < 3 * 2**20
    path = long_mp3
    if by_pyav:
        path = tmp_path / "lecture.m4a"
        path.write_bytes(long_mp3.read_bytes())
    result, peak = _peak_bytes(lambda: load_audio(path))
    assert isinstance(result, ClipTooLongError)
    assert result.duration_s == pytest.approx(600, abs=1)
    assert "600" in str(result)
    assert peak < KEPT_BYTES_BOUND


@pytest.mark.parametrize("source", ["mp3", "mp3-by-pyav", "wav"])
@pytest.mark.slow
def test_trim_decodes_only_what_it_keeps(long_mp3, tmp_path, source):
    path = long_mp3
    if source == "mp3-by-pyav":  # an .m4a name goes to FFmpeg first, which reads the MP3 inside
        path = tmp_path / "lecture.m4a"
        path.write_bytes(long_mp3.read_bytes())
    if source == "wav":
        path = tmp_path / "long.wav"
        with sf.SoundFile(str(path), "w", samplerate=RATE, channels=1, subtype="PCM_16") as out:
            for _ in range(20):  # 10 minutes in 30 s blocks
                out.write(voice(30.0))
    result, peak = _peak_bytes(lambda: load_audio(path, trim=True))
    assert not isinstance(result, Exception), result
    assert result.duration_s == pytest.approx(MAX_DURATION_S, abs=0.01)
    assert result.report.trimmed and result.report.source_duration_s == pytest.approx(600, abs=1)
    assert peak < KEPT_BYTES_BOUND


# --------------------------------------------------------------------------- 12a. a Python without the packages
def test_a_python_without_the_audio_packages_is_named_not_called_damaged(tmp_path, monkeypatch, capsys):
    from pipeline.__main__ import main

    root = tmp_path / "src"
    write_wav(root / "a.wav", 300)
    (root / "a.txt").write_text("Hello there", encoding="utf-8")
    for module in ("soundfile", "av"):
        monkeypatch.setitem(sys.modules, module, None)  # `import soundfile` raises ModuleNotFoundError
    code = main(["import", "--workspace", str(tmp_path / "ws"), "--source", str(root)])
    err = capsys.readouterr().err
    assert code == 1
    assert "damaged" not in err and "cut short" not in err
    assert "soundfile" in err and sys.executable in err and ".venv/bin/python" in err
