"""Every importer on small fixtures made in code, the real speechocean762 subset, and failure safety."""

from __future__ import annotations

import csv
import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipeline.data import audio as audio_module
from pipeline.errors import ImportFormatError
from pipeline.conversation.feedback import parse_feedback
from pipeline.data.importers import detect_format, import_folder
from pipeline.data.samples import SampleLibrary

REPO_ROOT = Path(__file__).resolve().parents[1]


def tone(freq: float, seconds: float = 0.8, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def write_audio(path: Path, freq: float, rate: int = 16000, fmt: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".m4a":
        import av

        x = tone(freq, rate=rate)
        with av.open(str(path), mode="w", format="ipod") as out:
            stream = out.add_stream("aac", rate=rate)
            stream.layout = "mono"
            for start in range(0, len(x), 1024):
                frame = av.AudioFrame.from_ndarray(x[None, start : start + 1024], format="fltp", layout="mono")
                frame.sample_rate = rate
                frame.pts = start
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode(None):
                out.mux(packet)
    else:
        sf.write(str(path), tone(freq, rate=rate), rate, format=fmt)
    return path


def speechocean_scores(word_text: str, accuracy: int = 3) -> dict:
    return {
        "accuracy": 6, "completeness": 10, "fluency": 8, "prosodic": 7, "total": 6, "text": f"A {word_text}",
        "words": [
            {"text": "A", "accuracy": 10, "stress": 10, "total": 10, "phones": ["AH0"], "phones-accuracy": [2]},
            {"text": word_text, "accuracy": accuracy, "stress": 10, "total": 4, "phones": ["K", "AE0", "T"],
             "phones-accuracy": [2, 0.2, 2],
             "mispronunciations": [{"canonical-phone": "AE", "index": 1, "pronounced-phone": "EH"}]},
        ],
    }


# ----------------------------------------------------------------------------- fixtures in code
def make_kaldi(root: Path, split_folders: bool = True) -> Path:
    """speechocean762-like: train/ and test/ data folders, WAVE/, resource/scores.json."""
    scores = {}
    layout = {"train": [("u1001", "0001", "A CAT", 300), ("u1002", "0001", "A HAT", 310)],
              "test": [("u2001", "0002", "A BAT", 320)]}
    for split, utts in layout.items():
        data = root / split if split_folders else root
        data.mkdir(parents=True, exist_ok=True)
        with open(data / "wav.scp", "a") as scp, open(data / "text", "a") as text, open(data / "utt2spk", "a") as u2s:
            for utt, spk, sentence, freq in utts:
                write_audio(root / "WAVE" / f"SPEAKER{spk}" / f"{utt}.WAV", freq, fmt="WAV")
                scp.write(f"{utt}\tWAVE/SPEAKER{spk}/{utt}.WAV\n")
                text.write(f"{utt}\t{sentence}\n")
                u2s.write(f"{utt} {spk}\n")
                scores[utt] = speechocean_scores(sentence.split()[1])
    (root / "resource").mkdir(exist_ok=True)
    (root / "resource" / "scores.json").write_text(json.dumps(scores))
    return root


def make_audiofolder(root: Path, delimiter: str = ",", bom: bool = False, header=("file_name", "target_text", "feedback")) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = [("a.wav", "Hello, there; friend", "Good"), ("sub/b.flac", "Bonjour", ""), ("c.wav", "Missing file", "x")]
    write_audio(root / "a.wav", 300, rate=44100)
    write_audio(root / "sub" / "b.flac", 330, rate=22050)
    with open(root / "metadata.csv", "w", encoding="utf-8-sig" if bom else "utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return root


def make_ljspeech(root: Path) -> Path:
    (root / "wavs").mkdir(parents=True)
    lines = ['LJ001-0001|Printing, in the "only sense|Printing, in the "only sense',
             "LJ001-0002|in being comparatively modern.|in being comparatively modern.",
             "LJ001-0003|no audio for this one|no audio for this one"]
    write_audio(root / "wavs" / "LJ001-0001.wav", 300, rate=22050)
    write_audio(root / "wavs" / "LJ001-0002.wav", 310, rate=22050)
    (root / "metadata.csv").write_text("\n".join(lines) + "\n")
    return root


def make_commonvoice(root: Path) -> Path:
    (root / "clips").mkdir(parents=True)
    header = "client_id\tpath\tsentence_id\tsentence\tsentence_domain\tup_votes\tdown_votes\tage\tgender\taccents\tvariant\tlocale\tsegment\n"
    rows = [("spk-a", "common_voice_fr_1.mp3", "Il fait beau."), ("spk-b", "common_voice_fr_2.mp3", "Où est la gare ?"),
            ("spk-a", "common_voice_fr_3.mp3", 'Un "guillemet" seul')]
    for i, (_, name, _) in enumerate(rows[:2]):
        write_audio(root / "clips" / name, 300 + 20 * i, rate=48000, fmt="MP3")
    body = "".join(f"{c}\t{p}\tsid\t{s}\t\t2\t0\t\t\t\t\tfr\t\n" for c, p, s in rows)
    (root / "train.tsv").write_text(header + body)
    (root / "invalidated.tsv").write_text(header + "spk-z\tcommon_voice_fr_9.mp3\tsid\tBad\t\t0\t3\t\t\t\t\tfr\t\n")
    return root


def make_sidecar_folder(root: Path) -> Path:
    write_audio(root / "kate" / "01.wav", 300)
    (root / "kate" / "01.txt").write_text("The cat sat.\n")
    (root / "kate" / "01.feedback.txt").write_text("Scores (0-10): accuracy 8\nWords to practise: none\n")
    write_audio(root / "kate" / "02.m4a", 320, rate=44100)
    (root / "kate" / "02.txt").write_text(unicodedata.normalize("NFD", "Crème brûlée"), encoding="utf-8")
    write_audio(root / "top.wav", 340)
    (root / "top.txt").write_text("On top.")
    write_audio(root / "lonely.wav", 360)  # no sidecar
    (root / "notes.txt").write_text("not a sidecar")
    return root


# ----------------------------------------------------------------------------- table of importers
IMPORT_CASES = [
    # (id, builder, format, expected {id: (target_text, feedback-check, speaker)}, skipped file names)
    ("kaldi-splits", make_kaldi, "kaldi",
     {"u1001": ("A CAT", "CAT 3/10 (AE as EH)", "0001"), "u1002": ("A HAT", "HAT 3/10", "0001"),
      "u2001": ("A BAT", "BAT 3/10", "0002")}, []),
    ("kaldi-single-folder", lambda r: make_kaldi(r, split_folders=False), "kaldi",
     {"u1001": ("A CAT", "Advice:", "0001"), "u1002": ("A HAT", "Advice:", "0001"), "u2001": ("A BAT", "Advice:", "0002")}, []),
    ("audiofolder-comma", make_audiofolder, "audiofolder",
     {"a": ("Hello, there; friend", "Good", None), "sub-b": ("Bonjour", "", None)}, ["c.wav"]),
    ("audiofolder-bom-semicolon", lambda r: make_audiofolder(r, ";", bom=True), "audiofolder",
     {"a": ("Hello, there; friend", "Good", None), "sub-b": ("Bonjour", "", None)}, ["c.wav"]),
    ("audiofolder-tab-spaced-headers", lambda r: make_audiofolder(r, "\t", header=(" File Name ", " Sentence", "Feedback ")),
     "audiofolder", {"a": ("Hello, there; friend", "Good", None), "sub-b": ("Bonjour", "", None)}, ["c.wav"]),
    ("ljspeech", make_ljspeech, "ljspeech",
     {"LJ001-0001": ('Printing, in the "only sense', "", None), "LJ001-0002": ("in being comparatively modern.", "", None)},
     ["wavs/LJ001-0003.wav"]),
    ("commonvoice", make_commonvoice, "commonvoice",
     {"common_voice_fr_1": ("Il fait beau.", "", "spk-a"), "common_voice_fr_2": ("Où est la gare ?", "", "spk-b")},
     ["clips/common_voice_fr_3.mp3"]),
    ("sidecar-folder", make_sidecar_folder, "folder",
     {"kate-01": ("The cat sat.", "Words to practise: none", "kate"), "kate-02": ("Crème brûlée", "", "kate"),
      "top": ("On top.", "", None)}, ["lonely.wav"]),
]


@pytest.mark.parametrize("case,build,fmt,expected,skipped", IMPORT_CASES, ids=[c[0] for c in IMPORT_CASES])
def test_importers(tmp_path, case, build, fmt, expected, skipped):
    source = build(tmp_path / "src")
    assert detect_format(source) == fmt
    progress = []
    report = import_folder(tmp_path / "ws", source, "auto", progress=lambda d, t: progress.append((d, t)))
    assert report.format == fmt
    assert sorted(report.imported) == sorted(expected)
    assert [s["file"] for s in report.skipped] == skipped
    assert all(s["reason"] for s in report.skipped)
    assert progress and progress[-1][0] == progress[-1][1]
    library = SampleLibrary(tmp_path / "ws")
    for sample_id, (target, feedback, speaker) in expected.items():
        sample = library.get(sample_id)
        assert sample.target_text == target
        assert unicodedata.is_normalized("NFC", sample.target_text)
        assert (feedback in sample.feedback) if feedback else sample.feedback == ""
        assert sample.speaker == speaker
        info = sf.info(str(library.audio_path(sample)))
        assert (info.samplerate, info.channels) == (16000, 1)
    # Importing the same folder again adds nothing and names the existing samples.
    again = import_folder(tmp_path / "ws", source, fmt)
    assert again.imported == []
    duplicates = [s for s in again.skipped if "same audio as sample" in s["reason"]]
    assert len(duplicates) == len(expected)


def test_kaldi_keeps_structured_scores(tmp_path):
    import_folder(tmp_path / "ws", make_kaldi(tmp_path / "src"))
    sample = SampleLibrary(tmp_path / "ws").get("u1001")
    assert sample.scores["words"][1]["mispronunciations"][0]["pronounced-phone"] == "EH"
    parsed = parse_feedback(sample.feedback)
    assert parsed.total == 6 and parsed.phone_errors == [("CAT", "AE", "EH")]


def test_kaldi_bad_entries_are_skipped_not_fatal(tmp_path):
    root = make_kaldi(tmp_path / "src")
    with open(root / "train" / "wav.scp", "a") as scp:
        scp.write("u1003 WAVE/SPEAKER0001/u1003.WAV\n")  # missing file
        scp.write("u1004 sox in.wav -t wav - |\n")  # command pipe
        scp.write("u1005 WAVE/SPEAKER0001/u1005.WAV\n")  # no text line
        scp.write("u1006 WAVE/SPEAKER0001/u1006.WAV\n")  # corrupt audio
    write_audio(root / "WAVE" / "SPEAKER0001" / "u1005.WAV", 500, fmt="WAV")
    (root / "WAVE" / "SPEAKER0001" / "u1006.WAV").write_bytes(b"RIFF....WAVEjunk" * 10)
    with open(root / "train" / "text", "a") as text:
        text.write("u1006 A DOG\n")
    report = import_folder(tmp_path / "ws", root)
    assert sorted(report.imported) == ["u1001", "u1002", "u2001"]
    reasons = {s["file"]: s["reason"] for s in report.skipped}
    assert "was not found" in reasons["train/wav.scp:u1003"]
    assert "command pipe" in reasons["train/wav.scp:u1004"]
    assert "no line in `text`" in reasons["WAVE/SPEAKER0001/u1005.WAV"]
    assert "damaged or cut short" in reasons["WAVE/SPEAKER0001/u1006.WAV"]


def test_scores_found_in_parent_folder(tmp_path):
    corpus = make_kaldi(tmp_path / "corpus")
    report = import_folder(tmp_path / "ws", corpus / "test", "kaldi")
    assert report.imported == ["u2001"]
    assert "BAT 3/10" in SampleLibrary(tmp_path / "ws").get("u2001").feedback
    # Kaldi recipe layout: corpus/data/train, paths and scores relative to corpus/ (two levels up).
    (corpus / "data").mkdir()
    (corpus / "train").rename(corpus / "data" / "train")
    report = import_folder(tmp_path / "ws2", corpus / "data" / "train", "kaldi")
    assert sorted(report.imported) == ["u1001", "u1002"] and report.skipped == []
    assert "CAT 3/10" in SampleLibrary(tmp_path / "ws2").get("u1001").feedback


def test_missing_column_lists_columns_found(tmp_path):
    source = make_audiofolder(tmp_path / "src", ";", bom=True, header=("\ufeffFichier", "Phrase", "Retour"))
    with pytest.raises(ImportFormatError, match=r"no column for the audio file name.*columns found: Fichier, Phrase and Retour"):
        import_folder(tmp_path / "ws", source)
    source2 = make_audiofolder(tmp_path / "src2", header=("file_name", "words", "feedback"))
    with pytest.raises(ImportFormatError, match=r"no column for the target text.*target_text.*columns found: file_name, words and feedback"):
        import_folder(tmp_path / "ws", source2)


def test_audiofolder_jsonl_with_nfd_scores_and_bad_line(tmp_path):
    root = tmp_path / "src"
    write_audio(root / "x.wav", 300)
    write_audio(root / "y.wav", 320)
    nfd = unicodedata.normalize("NFD", "Ça été très élégant")
    lines = [json.dumps({"file_name": "x.wav", "sentence": nfd, "speaker": "zoë", "transcription": "ca ete"}),
             "{broken json",
             json.dumps({"file_name": "y.wav", "text": "A CAT", "scores": json.dumps(speechocean_scores("CAT"))})]
    (root / "metadata.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = import_folder(tmp_path / "ws", root)
    assert report.format == "audiofolder" and sorted(report.imported) == ["x", "y"]
    assert report.skipped[0]["file"] == "metadata.jsonl:2"
    library = SampleLibrary(tmp_path / "ws")
    x = library.get("x")
    assert x.target_text == "Ça été très élégant" and unicodedata.is_normalized("NFC", x.target_text)
    assert x.transcript == "ca ete" and x.speaker == "zoë"
    y = library.get("y")
    assert y.scores["total"] == 6 and "CAT 3/10 (AE as EH)" in y.feedback


def test_audiofolder_parquet(tmp_path):
    import pandas as pd

    root = tmp_path / "src"
    write_audio(root / "p.wav", 300)
    pd.DataFrame({"file_name": ["p.wav"], "transcription": ["Parquet works"]}).to_parquet(root / "metadata.parquet")
    report = import_folder(tmp_path / "ws", root)
    assert report.imported == ["p"]
    assert SampleLibrary(tmp_path / "ws").get("p").target_text == "Parquet works"


def test_failing_import_leaves_manifest_byte_identical(tmp_path, monkeypatch):
    workspace = tmp_path / "ws"
    import_folder(workspace, make_ljspeech(tmp_path / "lj"))
    manifest = SampleLibrary(workspace).workspace.manifest_path
    before = manifest.read_bytes()
    audio_before = sorted(p.name for p in manifest.parent.joinpath("audio").iterdir())

    # 1. A layout error is raised before anything is touched.
    bad = make_audiofolder(tmp_path / "bad", header=("name", "sentence", "feedback"))
    with pytest.raises(ImportFormatError):
        import_folder(workspace, bad)
    assert manifest.read_bytes() == before

    # 2. A crash in the middle of an import (after some clips were stored) rolls back.
    real_load = audio_module.load_audio
    calls = {"n": 0}

    def crash_on_third(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise MemoryError("simulated crash")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(audio_module, "load_audio", crash_on_third)
    with pytest.raises(MemoryError):
        import_folder(workspace, make_kaldi(tmp_path / "kaldi"))
    assert calls["n"] == 3
    assert manifest.read_bytes() == before
    assert sorted(p.name for p in manifest.parent.joinpath("audio").iterdir()) == audio_before

    # 3. An import where every file is skipped does not rewrite the manifest.
    monkeypatch.undo()
    import_folder(workspace, tmp_path / "lj")
    assert manifest.read_bytes() == before


DETECT_ERRORS = [
    ("missing", lambda p: p / "nope", r"does not exist"),
    ("file", lambda p: (p / "f.csv").write_text("x") and p / "f.csv", r"is a file"),
    ("empty", lambda p: (p / "empty").mkdir() or p / "empty", r"no known layout.*folder is empty"),
    ("only-text", lambda p: (p / "t").mkdir() or (p / "t" / "readme.md").write_text("x") and p / "t", r"Found: readme.md"),
]


@pytest.mark.parametrize("case,make,message", DETECT_ERRORS, ids=[c[0] for c in DETECT_ERRORS])
def test_detect_errors(tmp_path, case, make, message):
    with pytest.raises(ImportFormatError, match=message):
        detect_format(make(tmp_path))


def test_unknown_format(tmp_path):
    with pytest.raises(ImportFormatError, match="Unknown import format `xls`"):
        import_folder(tmp_path / "ws", make_ljspeech(tmp_path / "lj"), "xls")


def test_real_speechocean_subset(tmp_path, speechocean_dir):
    report = import_folder(tmp_path / "ws", speechocean_dir)
    assert report.format == "kaldi" and len(report.imported) == 60 and report.skipped == []
    library = SampleLibrary(tmp_path / "ws")
    samples = library.list()
    assert len(samples) == 60
    assert {s.speaker for s in samples} == {"0001", "0003", "0005"}
    grey = library.get("000050083")
    assert grey.target_text == "KATE'S GOT SOME GREY"
    assert "GREY 0/10 (G as F, R unclear, EY as IH)" in grey.feedback
    parsed = parse_feedback(grey.feedback)
    assert parsed.flagged_words == ["GREY"]
    assert parsed.phone_errors == [("GREY", "G", "F"), ("GREY", "R", "<unk>"), ("GREY", "EY", "IH")]
    assert grey.scores["words"][3]["text"] == "GREY" and grey.scores["total"] == 5
    assert all(s.feedback and s.scores for s in samples)


def test_cli_import_json_and_sample_pack(tmp_path, capsys):
    from pipeline.__main__ import main

    pack = REPO_ROOT / "sample_data" / "speechocean762-pack"
    assert (pack / "README.md").read_text().count("speechocean762") >= 2
    ws = str(tmp_path / "ws")
    assert main(["import", "--workspace", ws, "--source", str(pack), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["imported"] == 8 and len(out["ids"]) == 8 and out["skipped"] == [] and out["format"] == "kaldi"
    assert "000050083" in out["ids"]
    # Human summary, and a second import is all duplicates (not a failure).
    assert main(["import", "--workspace", ws, "--source", str(pack)]) == 0
    assert "Imported 0 of 8 clips" in capsys.readouterr().out
    # Nothing importable -> exit 1 with the reasons.
    lonely = tmp_path / "lonely"
    write_audio(lonely / "a.wav", 300)
    assert main(["import", "--workspace", ws, "--source", str(lonely), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["imported"] == 0 and "a.txt" in out["skipped"][0]["reason"]
    # A layout error -> exit 1 with one JSON error object.
    assert main(["import", "--workspace", ws, "--source", str(tmp_path / "missing"), "--json"]) == 1
    assert "does not exist" in json.loads(capsys.readouterr().out)["error"]


# ----------------------------------------------------------------------------- metadata from other systems
FOREIGN_FORMS = [
    # How another system may name `clips/kate/w{i}.wav` (relative to the metadata's folder `corpus/`).
    "clips\\kate\\w{i}.wav",                                  # Windows separators (the reported case)
    ".\\clips\\kate\\w{i}.wav",                               # Windows, explicit current folder
    "./clips/kate/w{i}.wav",                                  # POSIX, explicit current folder
    "C:\\Users\\ann\\corpus\\clips\\kate\\w{i}.wav",          # absolute, Windows machine
    "/home/ann/corpus/clips/kate/w{i}.wav",                   # absolute, another Linux machine
    "Clips/Kate/W{i}.WAV",                                    # case as a Mac or Windows forgives it
    "file:///C:/Users/ann/corpus/clips/kate/w{i}.wav",        # a file URI
    "\\\\nas\\share\\corpus\\clips\\kate\\w{i}.wav",          # a Windows network share
    "corpus/clips/kate/w{i}.wav",                             # relative to the folder above
]


def _foreign_audiofolder(root: Path) -> tuple[Path, int]:
    corpus = root / "corpus"
    rows = []
    for i, form in enumerate(FOREIGN_FORMS):
        write_audio(corpus / "clips" / "kate" / f"w{i}.wav", 200 + 25 * i)
        rows.append((form.format(i=i), f"Sentence {i}.", "Good."))
    # A name stored in NFD (as macOS writes it), named in NFC by the metadata.
    write_audio(corpus / "clips" / unicodedata.normalize("NFD", "zoë.wav"), 900)
    rows.append((unicodedata.normalize("NFC", "clips\\zoë.wav"), "Zoë.", "Good."))
    with open(corpus / "metadata.csv", "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([("file_name", "sentence", "feedback"), *rows])
    return corpus, len(rows)


def _foreign_kaldi(root: Path) -> tuple[Path, int]:
    corpus = root / "corpus"
    corpus.mkdir(parents=True)
    forms = ["C:\\data\\so762\\WAVE\\SPEAKER0001\\u{i}.WAV", "WAVE\\SPEAKER0001\\u{i}.WAV",
             "/mnt/old-disk/so762/WAVE/SPEAKER0001/u{i}.WAV", "wave/speaker0001/u{i}.wav", "./WAVE/SPEAKER0001/u{i}.WAV"]
    with open(corpus / "wav.scp", "w", newline="") as scp, open(corpus / "text", "w", newline="") as text:
        for i, form in enumerate(forms):
            write_audio(corpus / "WAVE" / "SPEAKER0001" / f"u{i}.WAV", 300 + 25 * i, fmt="WAV")
            scp.write(f"u{i} {form.format(i=i)}\r\n")  # CRLF, as a Windows editor saves it
            text.write(f"u{i} SENTENCE {i}\r\n")
    return corpus, len(forms)


def _foreign_commonvoice(root: Path) -> tuple[Path, int]:
    corpus = root / "cv"
    forms = ["clips\\cv_{i}.mp3", "C:\\cv-corpus\\fr\\clips\\cv_{i}.mp3", "CV_{i}.MP3", "cv_{i}"]
    rows = ["client_id\tpath\tsentence"]
    for i, form in enumerate(forms):
        write_audio(corpus / "clips" / f"cv_{i}.mp3", 300 + 25 * i, rate=48000, fmt="MP3")
        rows.append(f"spk\t{form.format(i=i)}\tPhrase {i}.")
    (corpus / "train.tsv").write_text("\n".join(rows) + "\n")
    return corpus, len(forms)


def _foreign_ljspeech(root: Path) -> tuple[Path, int]:
    corpus = root / "lj"
    (corpus / "wavs").mkdir(parents=True)
    write_audio(corpus / "wavs" / "lj001-0001.WAV", 300, rate=22050, fmt="WAV")  # case differs from the id
    write_audio(corpus / "wavs" / "LJ001-0002.wav", 330, rate=22050)
    (corpus / "metadata.csv").write_text("LJ001-0001|One.|One.\r\nLJ001-0002|Two.|Two.\r\n")
    return corpus, 2


def _foreign_folder(root: Path) -> tuple[Path, int]:
    corpus = root / "folder"
    write_audio(corpus / "kate" / "w0.wav", 300)
    (corpus / "kate" / "W0.TXT").write_text("Upper-case sidecar.")   # as a Windows tool names it
    (corpus / "kate" / "W0.FEEDBACK.TXT").write_text("Good.")
    write_audio(corpus / "kate" / "w1.wav", 330)
    (corpus / "kate" / "w1.txt").write_text("Plain sidecar.")
    return corpus, 2


@pytest.mark.parametrize("build", [_foreign_audiofolder, _foreign_kaldi, _foreign_commonvoice, _foreign_ljspeech, _foreign_folder],
                         ids=["audiofolder", "kaldi", "commonvoice", "ljspeech", "folder"])
def test_metadata_written_on_another_system_resolves(tmp_path, build):
    """Issue 11 #3: `clips\\kate\\w0.wav` from a Windows metadata.csv imported nothing ("audio file not found")."""
    source, expected = build(tmp_path / "src")
    report = import_folder(tmp_path / "ws", source)
    assert len(report.imported) == expected and report.skipped == [], report.skipped
    library = SampleLibrary(tmp_path / "ws")
    assert len({s.audio_sha256 for s in library.list()}) == expected  # each row found its own file
    if build is _foreign_folder:
        assert {s.target_text for s in library.list()} == {"Upper-case sidecar.", "Plain sidecar."}
        assert {s.feedback for s in library.list()} == {"Good.", ""}


def test_a_case_only_ambiguity_is_never_guessed(tmp_path):
    from pipeline.data.paths import PathResolver, listed_parts

    (tmp_path / "a.wav").write_bytes(b"x")
    (tmp_path / "A.wav").write_bytes(b"y")
    resolver = PathResolver([tmp_path])
    assert resolver.resolve("a.wav") == tmp_path / "a.wav"  # exact wins
    assert resolver.resolve("A.WAV") is None  # two candidates differ only in case: not guessed
    assert listed_parts("\\\\server\\share\\x\\y.wav") == (["x", "y.wav"], True)
    assert listed_parts("..\\up\\z.wav") == (["..", "up", "z.wav"], False)


def _voiced_wav(path: Path) -> Path:
    t = np.arange(32000) / 16000
    sf.write(str(path), (0.3 * np.sin(2 * np.pi * 150 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32),
             16000, subtype="PCM_16")
    return path


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig"])
def test_metadata_saved_as_unicode_text_imports_with_its_accents(tmp_path, encoding):
    """Excel's "Unicode Text" and some Windows editors save UTF-16 with a byte-order mark: refused before
    with the codec's own words ("'utf-8' codec can't decode byte 0xff in position 0")."""
    source = tmp_path / "clips"
    source.mkdir()
    _voiced_wav(source / "a.wav")
    text = "file_name,sentence,feedback\r\na.wav,Café au lait,Très bien\r\n"
    (source / "metadata.csv").write_bytes(("\ufeff" + text).encode(encoding) if encoding == "utf-16-be" else text.encode(encoding))
    report = import_folder(tmp_path / "ws", source)
    assert len(report.imported) == 1, report.skipped
    (sample,) = SampleLibrary(tmp_path / "ws").list()
    assert (sample.target_text, sample.feedback) == ("Café au lait", "Très bien")


def test_a_legacy_code_page_file_imports_with_its_accents(tmp_path):
    """Excel's default "CSV (Comma delimited)" is Windows-1252: refused until issue 44, read now (every program's
    kind, and the refusal of a file in no readable encoding: tests/test_spreadsheet_csv.py)."""
    source = tmp_path / "clips"
    source.mkdir()
    _voiced_wav(source / "a.wav")
    (source / "metadata.csv").write_bytes("file_name,sentence,feedback\na.wav,Café au lait,Très bien\n".encode("cp1252"))
    report = import_folder(tmp_path / "ws", source)
    assert len(report.imported) == 1, report.skipped
    (sample,) = SampleLibrary(tmp_path / "ws").list()
    assert (sample.target_text, sample.feedback) == ("Café au lait", "Très bien")


def test_a_sidecar_saved_by_an_ansi_editor_imports_with_its_accents(tmp_path):
    """A new user's finding: a clip's `.txt` had to be UTF-8 while the CSV beside it could be Windows-1252."""
    source = tmp_path / "clips"
    source.mkdir()
    _voiced_wav(source / "a.wav")
    (source / "a.txt").write_bytes("Café au lait".encode("cp1252"))  # Notepad's "ANSI"
    report = import_folder(tmp_path / "ws", source)
    assert len(report.imported) == 1, report.skipped
    assert [s.target_text for s in SampleLibrary(tmp_path / "ws").list()] == ["Café au lait"]


def test_a_session_list_saved_as_unicode_text_is_read(tmp_path):
    from pipeline.data.session import parse_items
    from pipeline.errors import SampleError

    listing = tmp_path / "list.txt"
    listing.write_bytes("Café au lait\r\nThe cat sat.\r\n".encode("utf-16"))
    assert parse_items(None, listing) == ["Café au lait", "The cat sat."]
    listing.write_bytes("Café au lait\n".encode("cp1252"))
    with pytest.raises(SampleError, match=r"not UTF-8 text \(from line 1, after 'Caf'\)") as caught:
        parse_items(None, listing)
    assert "codec" not in str(caught.value)
