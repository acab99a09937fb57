"""Dataset build: conversation format, split, token lengths, exclusions, atomic save, command line."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from pipeline.conversation import messages as conv
from pipeline.model import tokens
from pipeline.model.loading import load_processor
from pipeline.data import dataset as ds
from pipeline.data.cli import build_main
from pipeline.data.audio import decode_wav
from pipeline.errors import DatasetError
from pipeline.workspace import Workspace

RATE = 16000


def tone(seconds: float = 1.0, freq: float = 220.0, seed: int = 0) -> np.ndarray:
    """A 16 kHz float32 tone plus a little noise (distinct per seed, so hashes differ)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * freq * t) + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.fixture(scope="module")
def processor(tiny_model_dir):
    return load_processor(str(tiny_model_dir))


def make_library(root: Path, specs: list[tuple[str, str | None, str, str]]) -> Workspace:
    """specs: (sample_id, speaker, target_text, feedback)."""
    from pipeline.data.samples import SampleLibrary

    ws = Workspace(root)
    library = SampleLibrary(ws)
    for index, (sample_id, speaker, target, feedback) in enumerate(specs):
        library.add((RATE, tone(0.8 + 0.05 * index, 200 + 10 * index, seed=index)), target, feedback, speaker=speaker, sample_id=sample_id)
    return ws


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# ------------------------------------------------------------------------------ conversation


def test_messages_have_system_user_audio_text_and_assistant():
    audio = tone()
    messages = conv.build_messages("The cat sat.", "Total 7/10.", audio)
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[0]["content"] == [{"type": "text", "text": conv.SYSTEM_PROMPT}]
    audio_block, text_block = messages[1]["content"]
    assert audio_block["type"] == "audio" and audio_block["audio"] is audio
    assert text_block == {"type": "text", "text": conv.user_prompt("The cat sat.")}
    assert "The cat sat." in text_block["text"]
    assert messages[2]["content"] == [{"type": "text", "text": "Total 7/10."}]
    # inference: no assistant turn, and no array gives a bare placeholder
    prompt = conv.build_messages("The cat sat.")
    assert [m["role"] for m in prompt] == ["system", "user"]
    assert prompt[1]["content"][0] == {"type": "audio"}


def test_system_prompt_asks_for_the_template_that_parse_feedback_reads():
    from pipeline.conversation.feedback import parse_feedback

    assert "pronunciation tutor" in conv.SYSTEM_PROMPT
    parsed = parse_feedback(conv.SYSTEM_PROMPT)
    assert parsed.scores == {"accuracy": 6.0, "fluency": 7.0, "prosody": 7.0, "total": 5.0}
    assert parsed.flagged_words == ["GREY"]
    assert [(e.phone, e.heard) for e in parsed.words[0].phones] == [("G", "K"), ("R", "<unk>")]
    assert parsed.advice


def test_nfd_text_becomes_nfc():
    nfd = unicodedata.normalize("NFD", "Un café très naïf")
    assert nfd != unicodedata.normalize("NFC", nfd)
    messages = conv.build_messages(nfd, unicodedata.normalize("NFD", "Très bien"))
    assert unicodedata.normalize("NFC", "Un café très naïf") in messages[1]["content"][1]["text"]
    assert messages[2]["content"][0]["text"] == unicodedata.normalize("NFC", "Très bien")


@pytest.mark.parametrize("target, feedback", [("  ", "ok"), ("The cat.", "   ")])
def test_empty_text_raises(target, feedback):
    with pytest.raises(DatasetError, match="empty"):
        conv.build_messages(target, feedback)


# ------------------------------------------------------------------------------ split


def rows_for(speakers: dict[str, int]) -> list[tuple[str, str]]:
    return [(f"{spk}-{i:02d}", spk) for spk, n in speakers.items() for i in range(n)]


def test_split_is_speaker_disjoint_and_reproducible():
    rows = rows_for({"a": 10, "b": 12, "c": 8, "d": 10, "e": 9})
    first = ds.split_ids(rows, eval_fraction=0.2, seed=7)
    assert first.method == "speaker"
    speaker_of = dict(rows)
    train_speakers = {speaker_of[i] for i in first.train}
    eval_speakers = {speaker_of[i] for i in first.eval}
    assert train_speakers and eval_speakers and not train_speakers & eval_speakers
    assert sorted(first.train + first.eval) == sorted(i for i, _ in rows)
    # same seed and rows in another order: same split
    again = ds.split_ids(list(reversed(rows)), eval_fraction=0.2, seed=7)
    assert (again.train, again.eval) == (first.train, first.eval)
    # the eval share is close to the fraction (whole speakers of 8-12 rows each)
    assert 5 <= len(first.eval) <= 15
    # different seeds choose different speakers at least once
    choices = {tuple(ds.split_ids(rows, eval_fraction=0.2, seed=s).eval) for s in range(10)}
    assert len(choices) > 1


def test_a_learner_whose_name_is_written_in_several_ways_stays_on_one_side():
    """A new user's finding: "Kate", "kate" and "KATE" were three learners, two in train and one in the test set."""
    rows = [(f"k{i}", name) for i, name in enumerate(["Kate", "kate", "KATE", "Kate ", " kate"])]
    rows += [(f"t{i}", name) for i, name in enumerate(["Tom", "tom", "Tom"])] + [(f"a{i}", "Ann") for i in range(4)]
    for seed in range(6):
        split = ds.split_ids(rows, eval_fraction=0.3, seed=seed)
        for group in ("k", "t", "a"):
            sides = {side for side, ids in (("train", split.train), ("eval", split.eval))
                     for i in ids if i.startswith(group)}
            assert len(sides) == 1, (seed, group, split)
    assert "KATE and Kate and kate are taken as one learner" in " ".join(split.notes)


def test_split_keeps_a_speaker_on_each_side_even_with_a_large_fraction():
    rows = rows_for({"a": 3, "b": 3})
    split = ds.split_ids(rows, eval_fraction=0.9, seed=1)
    assert split.train and split.eval
    assert {i[0] for i in split.train}.isdisjoint({i[0] for i in split.eval})


def test_single_speaker_falls_back_to_sample_split_and_says_so():
    rows = rows_for({"solo": 10})
    split = ds.split_ids(rows, eval_fraction=0.2, seed=3)
    assert split.method == "sample"
    assert len(split.eval) == 2 and len(split.train) == 8
    assert any("one speaker" in note for note in split.notes)


def test_unknown_speakers_fall_back_to_sample_split_and_say_so():
    rows = [(f"x{i}", None) for i in range(5)]
    split = ds.split_ids(rows, eval_fraction=0.2, seed=3)
    assert split.method == "sample" and len(split.eval) == 1
    assert any("No sample has a speaker" in note and "sample by sample" in note for note in split.notes)


def test_mixed_known_and_unknown_speakers_notes_the_unknown():
    rows = rows_for({"a": 5, "b": 5}) + [("u1", ""), ("u2", None)]
    split = ds.split_ids(rows, eval_fraction=0.3, seed=0)
    assert split.method == "speaker"
    assert any("2 samples have no speaker (u1, u2)" in note for note in split.notes), "the note names them"
    assert sorted(split.train + split.eval) == sorted(i for i, _ in rows)


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_bad_eval_fraction_raises(fraction):
    with pytest.raises(DatasetError, match="eval-fraction"):
        ds.split_ids(rows_for({"a": 3}), eval_fraction=fraction)


def test_length_stats_of_an_older_report_load():
    old = {"count": 2, "min": 300, "median": 310.0, "mean": 310.0, "p90": 320, "max": 320, "histogram": [],
           "row_tokens": [300, 320], "max_clip_s": 4.0}  # written before answer lengths were recorded
    stats = ds.LengthDistribution.from_dict(old)
    assert stats.row_tokens == [300, 320] and stats.answer_tokens == [] and stats.max_answer_tokens == 0


def test_length_stats():
    stats = ds.LengthDistribution.from_lengths([300, 310, 320, 330, 340, 350, 360, 370, 380, 500])
    assert (stats.min, stats.max, stats.median, stats.p90) == (300, 500, 340, 380)
    # "half take at most 252.5 tokens": a token count is whole; the lower median is a row's own length
    assert isinstance(stats.median, int) and f"{stats.median:g}" == "340"
    assert sum(b["count"] for b in stats.histogram) == 10
    assert stats.histogram[0]["lo"] == 300 and stats.histogram[-1]["hi"] > 500


# ------------------------------------------------------------------------------ token lengths


@pytest.mark.parametrize(
    "target, feedback",
    [
        ("The cat sat on the mat.", "Accuracy 7/10. GREY: /EY/ sounded like /AY/. Keep your lips wide."),
        (unicodedata.normalize("NFD", "Un café très naïf, s'il vous plaît."), "Très bien ! Prosodie 8/10."),
        ("Short.", None),
    ],
)
def test_token_count_equals_full_processor_rendering(processor, target, feedback):
    messages = conv.build_messages(target, feedback, tone(2.0))
    generation = feedback is None
    full = processor.apply_chat_template(
        messages, tokenize=True, return_dict=True, add_generation_prompt=generation
    )
    expected = len(full["input_ids"][0])
    counter = tokens.TokenCounter(processor)
    assert counter.count([messages], add_generation_prompt=generation) == [expected]
    # the audio takes <start_of_audio> + 188 soft tokens + <end_of_audio> (+ the blank lines)
    ids = list(full["input_ids"][0])
    assert ids.count(processor.tokenizer.convert_tokens_to_ids(processor.audio_token)) == tokens.AUDIO_SOFT_TOKENS


# ------------------------------------------------------------------------------ build


SPECS = [
    ("a1", "anna", "The cat sat on the mat.", "Accuracy 8/10. Good."),
    ("a2", "anna", "A grey day.", "Accuracy 6/10. GREY: /EY/ heard as /AY/."),
    ("b1", "ben", "We see the sea.", "Accuracy 9/10."),
    ("b2", "ben", "She sells shells.", "Accuracy 5/10. SHELLS sounded like SELLS."),
    ("c1", "chen", "Red lorry, yellow lorry.", "Accuracy 4/10. LORRY: /L/ and /R/ swapped."),
    ("c2", "chen", "Thank you.", "Accuracy 7/10."),
    ("d1", "dora", "Good morning.", ""),  # no feedback: excluded
]


def test_build_saves_speaker_disjoint_splits_and_lists_exclusions(tmp_path, tiny_model_dir, processor):
    from datasets import load_from_disk

    long_answer = "Listen again and repeat slowly. " * 60
    ws = make_library(tmp_path / "ws", SPECS + [("e1", "eve", "Hello there.", long_answer)])
    report = ds.build_dataset(ws, str(tiny_model_dir), eval_fraction=0.25, seed=1, max_length=512)

    assert report.path == str(ws.dataset_dir)
    assert report.split_method == "speaker"
    reasons = {e["id"]: e["reason"] for e in report.excluded}
    assert set(reasons) == {"d1", "e1"}
    assert "feedback is empty" in reasons["d1"]
    assert "--max-length 512" in reasons["e1"] and "would be cut" in reasons["e1"]
    assert report.splits["train"] + report.splits["eval"] == 6
    assert report.splits["eval"] >= 1
    assert not set(report.speakers["train"]) & set(report.speakers["eval"])

    loaded = load_from_disk(report.path)
    assert set(loaded) == {"train", "eval"}
    assert loaded["train"].column_names == list(ds.COLUMNS)
    row = loaded["train"][0]
    audio = decode_wav(row["audio_wav"])
    assert audio.dtype == np.float32 and audio.ndim == 1 and 0.7 * RATE < audio.size < 1.2 * RATE
    # every kept row's num_tokens is what the full processor gives for its conversation
    counter = tokens.TokenCounter(processor)
    for split in loaded.values():
        for r in split:
            assert r["num_tokens"] <= 512
            messages = conv.build_messages(r["target_text"], r["feedback"], decode_wav(r["audio_wav"]))
            assert counter.count([messages]) == [r["num_tokens"]]
    full = processor.apply_chat_template(
        conv.build_messages(row["target_text"], row["feedback"], audio), tokenize=True, return_dict=True
    )
    assert len(full["input_ids"][0]) == row["num_tokens"]

    stats = report.length_stats
    assert stats["count"] == 6 and stats["min"] <= stats["median"] <= stats["p90"] <= stats["max"] <= 512
    assert sum(b["count"] for b in stats["histogram"]) == 6
    kept = sorted(r["num_tokens"] for split in loaded.values() for r in split)
    assert report.lengths == kept and kept[0] == stats["min"] and kept[-1] == stats["max"]
    assert stats["row_tokens"] == sorted(loaded["train"]["num_tokens"])
    # answer_tokens: what pipeline.training.collate.build_labels supervises on the real collated batch
    # (the answer + <end_of_turn>), row by row, paired with row_tokens
    from pipeline.model.tokens import IGNORE_INDEX
    from pipeline.training.collate import ChatCollator

    batch = ChatCollator(processor)(list(loaded["train"]))
    supervised = (batch["labels"] != IGNORE_INDEX).sum(dim=1).tolist()
    assert sorted(zip(loaded["train"]["num_tokens"], supervised)) == list(zip(stats["row_tokens"], stats["answer_tokens"]))
    assert stats["max_answer_tokens"] == max(supervised) > 1
    end_turn = processor.tokenizer.convert_tokens_to_ids("<end_of_turn>")
    for row_labels in batch["labels"]:  # the supervised span ends with <end_of_turn>
        assert row_labels[row_labels != IGNORE_INDEX][-1] == end_turn
    assert stats["max_clip_s"] == pytest.approx(max(loaded["train"]["duration_s"]), abs=1e-3)
    assert 0.7 < stats["max_clip_s"] < 1.3
    on_disk = ds.load_build_report(ws)
    assert on_disk["splits"] == report.splits and on_disk["excluded"] == report.excluded

    for name in ("train.jsonl", "eval.jsonl", "train.parquet", "eval.parquet"):
        assert (ws.exports_dir / name).exists(), name
    lines = (ws.exports_dir / "train.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == report.splits["train"]
    first = json.loads(lines[0])
    assert Path(first["audio_path"]).exists() and first["messages"][2]["role"] == "assistant"
    import pyarrow.parquet as pq

    table = pq.read_table(ws.exports_dir / "eval.parquet")
    assert table.num_rows == report.splits["eval"] and "audio_wav" in table.column_names

    # same library, same seed: same split; the reloaded dataset is the same object graph
    again = ds.build_dataset(ws, processor, eval_fraction=0.25, seed=1, max_length=512)
    assert again.speakers == report.speakers
    assert ds.load_built_dataset(ws)["eval"]["id"] == loaded["eval"]["id"]


def test_prompt_longer_than_max_length_is_excluded_with_its_reason(tmp_path, processor):
    ws = make_library(tmp_path / "ws", SPECS[:3])
    with pytest.raises(DatasetError, match="None of the 3 samples") as info:
        ds.build_dataset(ws, processor, max_length=100)
    assert "no room for the answer" in str(info.value)


def test_failed_build_keeps_the_previous_dataset(tmp_path, processor, monkeypatch):
    from pipeline.data.samples import SampleLibrary

    ws = make_library(tmp_path / "ws", SPECS[:4])
    ds.build_dataset(ws, processor, eval_fraction=0.5, seed=0)
    before = tree_digest(ws.dataset_dir)

    # 1) a crash while saving (disk full, killed): the old dataset stays, no temp folder is left
    library = SampleLibrary(ws)
    library.add((RATE, tone(1.0, 300, seed=99)), "New clip.", "Accuracy 5/10.", speaker="zoe", sample_id="z1")

    def broken_save(self, path, *args, **kwargs):
        Path(path).mkdir(parents=True, exist_ok=True)  # the staging folder is made before the save
        (Path(path) / "half-written.arrow").write_bytes(b"\0" * 10)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("datasets.DatasetDict.save_to_disk", broken_save)
    with pytest.raises(OSError):
        ds.build_dataset(ws, processor, eval_fraction=0.5, seed=0)
    monkeypatch.undo()
    assert tree_digest(ws.dataset_dir) == before
    assert not [p for p in ws.root.iterdir() if p.name.startswith(".dataset-tmp-")]

    # 2) nothing trainable: a clear error, the old dataset stays
    for sample in library.list():
        library.update(sample.id, feedback="")
    with pytest.raises(DatasetError, match="previous dataset"):
        ds.build_dataset(ws, processor)
    assert tree_digest(ws.dataset_dir) == before
    assert len(ds.load_built_dataset(ws)["train"]) + len(ds.load_built_dataset(ws)["eval"]) == 4


def test_empty_library_and_missing_dataset_give_clear_errors(tmp_path, processor):
    with pytest.raises(DatasetError, match="empty"):
        ds.build_dataset(tmp_path / "ws", processor)
    with pytest.raises(DatasetError, match="python -m pipeline build"):
        ds.load_built_dataset(tmp_path / "ws")


def test_eval_fraction_zero_saves_an_empty_eval_split_that_loads(tmp_path, tiny_model_dir, processor):
    ws = make_library(tmp_path / "ws", SPECS)
    report = ds.build_dataset(ws, processor, eval_fraction=0.0)
    assert report.splits == {"train": 6, "eval": 0} and report.split_method == "none"
    assert any("--eval-fraction 0" in note for note in report.notes)
    data = ds.load_built_dataset(ws)
    assert len(data["train"]) == 6 and len(data["eval"]) == 0
    assert data["eval"].column_names == list(ds.COLUMNS) and data["eval"].features == data["train"].features


def test_a_dataset_saved_with_a_zero_shard_split_still_loads_and_a_broken_one_is_a_dataset_error(tmp_path, processor):
    ws = make_library(tmp_path / "ws", SPECS)
    ds.build_dataset(ws, processor, eval_fraction=0.0)
    data = ds.load_built_dataset(ws)
    data.save_to_disk(str(tmp_path / "old"))  # datasets' default: zero shards for the empty eval split
    assert not list((tmp_path / "old" / "eval").glob("*.arrow"))
    report = (ws.dataset_dir / ds.BUILD_REPORT_NAME).read_bytes()
    import shutil

    shutil.rmtree(ws.dataset_dir)
    shutil.copytree(tmp_path / "old", ws.dataset_dir)
    (ws.dataset_dir / ds.BUILD_REPORT_NAME).write_bytes(report)
    again = ds.load_built_dataset(ws)
    assert len(again["train"]) == 6 and len(again["eval"]) == 0 and again["eval"].column_names == list(ds.COLUMNS)

    (ws.dataset_dir / "train" / "state.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(DatasetError, match="cannot be read.*python -m pipeline build"):
        ds.load_built_dataset(ws)


def test_command_line_json(tmp_path, tiny_model_dir, capsys):
    ws = make_library(tmp_path / "ws", SPECS)
    code = build_main(
        ["--workspace", str(ws.root), "--model", str(tiny_model_dir), "--eval-fraction", "0.3", "--seed", "5", "--json"]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == str(ws.dataset_dir)
    assert sum(out["splits"].values()) == 6
    assert [(e["id"], bool(e["reason"])) for e in out["excluded"]] == [("d1", True)]
    assert set(out["speakers"]) == {"train", "eval"}
    assert {"min", "median", "p90", "max", "histogram"} <= set(out["length_stats"])
    code = build_main(["--workspace", str(ws.root), "--model", str(tiny_model_dir)])
    assert code == 0 and "Dataset saved to" in capsys.readouterr().out


def test_real_speechocean_subset_builds_speaker_disjoint_and_reloads(tmp_path, speechocean_dir, processor):
    from datasets import load_from_disk

    from pipeline.data.importers import import_folder

    ws = Workspace(tmp_path / "ws")
    imported = import_folder(ws, speechocean_dir, format="kaldi")
    assert len(imported.imported) == 60 and not imported.skipped
    report = ds.build_dataset(ws, processor, eval_fraction=0.2, seed=42, max_length=2048)
    assert report.split_method == "speaker" and not report.excluded
    assert report.splits["train"] + report.splits["eval"] == 60
    assert report.speakers["train"] and report.speakers["eval"]
    assert not set(report.speakers["train"]) & set(report.speakers["eval"])

    loaded = load_from_disk(report.path)
    train_speakers = set(loaded["train"]["speaker"])
    eval_speakers = set(loaded["eval"]["speaker"])
    assert train_speakers == set(report.speakers["train"]) and not train_speakers & eval_speakers
    row = next(r for split in loaded.values() for r in split if r["id"].endswith("000050083"))
    assert "GREY" in row["feedback"]
    scores = json.loads(row["scores"])
    assert any(w["text"] == "GREY" for w in scores["words"])
    # the stored audio is the clip, 16 kHz, same length as the original
    import soundfile

    original, rate = soundfile.read(speechocean_dir / "WAVE" / "SPEAKER0005" / "000050083.WAV", dtype="float32")
    audio = decode_wav(row["audio_wav"])
    assert rate == 16000 and audio.shape == original.shape
    assert np.max(np.abs(audio - original)) < 1e-3
    # a second build with the same seed gives the same split
    again = ds.build_dataset(ws, processor, eval_fraction=0.2, seed=42, max_length=2048)
    assert again.speakers == report.speakers and again.splits == report.splits


def test_a_swap_cut_short_by_a_crash_is_recovered_on_load(tmp_path, processor):
    ws = make_library(tmp_path / "ws", SPECS[:4])
    ds.build_dataset(ws, processor, eval_fraction=0.5, seed=0)
    before = tree_digest(ws.dataset_dir)
    # what a power cut between the two renames of the swap leaves behind
    staging = ws.root / ".dataset-tmp-crashed"
    staging.mkdir()
    ws.dataset_dir.rename(staging / "previous")
    assert not ws.dataset_dir.exists()
    data = ds.load_built_dataset(ws)
    assert len(data["train"]) + len(data["eval"]) == 4
    assert tree_digest(ws.dataset_dir) == before
    assert ds.load_build_report(ws)["splits"] == {"train": len(data["train"]), "eval": len(data["eval"])}


def test_a_build_says_how_the_library_changed_and_which_learners_moved(tmp_path, tiny_model_dir, processor):
    """Before a build: added, edited and deleted samples since the last one; after: which learners
    changed sides between the training and test sets, and what changed that decides the split."""
    from pipeline.data.build_changes import split_changes
    from pipeline.data.samples import SampleLibrary

    specs = [(f"{who}{k}", who, f"Sentence {who} {k}.", "Good.") for who in ("ann", "bob", "cal", "dan") for k in (1, 2)]
    before = [(i, who) for i, who, _, _ in specs]
    after = [r for r in before if r[0] != "bob2"] + [(f"eve{k}", "eve") for k in range(3)]
    # a seed whose split changes when eve (3 recordings) joins and bob2 leaves (the split is then drawn again)
    seed = next(s for s in range(50) if set(ds.split_ids(before, eval_fraction=0.25, seed=s).eval)
                - set(ds.split_ids(after, eval_fraction=0.25, seed=s).eval))
    ws = make_library(tmp_path / "ws", specs)
    assert ds.library_changes(ws) is None, "nothing built yet"
    first = ds.build_dataset(ws, processor, eval_fraction=0.25, seed=seed, max_length=512)
    assert first.split_changes is None and set(first.sample_digests) == {s[0] for s in specs}
    assert ds.library_changes(ws) == {"added": [], "edited": [], "deleted": [], "changed": False, "edits_known": True,
                                      "built_at": first.built_at, "first_build": True}
    library = SampleLibrary(ws)
    library.update("ann1", feedback="Better: stress the first word.")
    library.delete("bob2")
    for k in range(3):
        library.add((RATE, tone(1.0, 400 + 10 * k, seed=50 + k)), f"Eve {k}.", "Fine.", speaker="eve", sample_id=f"eve{k}")
    changes = ds.library_changes(ws)
    assert (changes["added"], changes["edited"], changes["deleted"]) == (["eve0", "eve1", "eve2"], ["ann1"], ["bob2"])
    assert changes["changed"]

    report = ds.build_dataset(ws, processor, eval_fraction=0.25, seed=seed, max_length=512)
    assert ds.library_changes(ws)["changed"] is False, "the new build takes the library as it is"
    assert ds.library_changes(ws)["first_build"] is False, "a second build has a last build to speak of"
    moved = report.split_changes
    assert moved["moved"] and set(moved["to_eval"]) | set(moved["to_train"]) <= {"ann", "bob", "cal", "dan"}, moved
    assert "eve" not in moved["to_eval"] + moved["to_train"], "eve is new: she did not move"
    assert not moved["rows_to_eval"] and not moved["rows_to_train"], "every row has a learner: said per learner"
    assert "1 new learner: eve" in moved["reasons"] and "3 rows added and 1 left out or deleted" in moved["reasons"]
    assert "moved to" in report.summary() and "why: 1 new learner: eve" in report.summary()
    # the pure comparison: learners and unnamed rows that changed sides between two reports
    old = {"row_ids": {"train": ["a1", "b1", "u1"], "eval": ["c1"]}, "speakers": {"train": ["a", "b"], "eval": ["c"]},
           "seed": 1, "eval_fraction": 0.2}
    new = {"row_ids": {"train": ["b1", "c1"], "eval": ["a1", "u1"]}, "speakers": {"train": ["b", "c"], "eval": ["a"]},
           "seed": 2, "eval_fraction": 0.2}
    result = split_changes(old, new, {"a1": "a", "b1": "b", "c1": "c", "u1": None})
    assert (result["to_eval"], result["to_train"], result["rows_to_eval"]) == (["a"], ["c"], ["u1"])
    assert result["reasons"] == ["the split seed changed (1 -> 2)"]
