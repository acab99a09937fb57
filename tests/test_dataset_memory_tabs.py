"""The Dataset chart and the Memory estimate agree with what they say, and the app's words name real widgets.

- The Dataset tab's length chart counts train and eval rows and says so (stacked, with a legend).
- The Memory tab's row length (the longest train row) differs from Max length (a build sets it to the
  longest row of train and eval); when they differ the tab says why.
- Every widget, button and tab that `ui.wording` names instead of a command-line flag exists on the page.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gradio as gr
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import app as app_module  # noqa: E402
from ui import common  # noqa: E402
from ui.tutor_app import TutorApp  # noqa: E402
from ui.wording import BUILD_WIDGETS, BUTTONS, COMMANDS, SETTING_WIDGETS, app_wording  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model_dir):
    """The sample pack built with the tiny model (8 rows: train and eval): (app, build outputs)."""
    ui = TutorApp(tmp_path_factory.mktemp("tabs") / "ws")
    ui.load_sample_pack()
    return ui, ui.build_dataset(str(tiny_model_dir), 0.25, 42, 1024)


@pytest.mark.slow
def test_length_chart_counts_train_and_eval_rows_and_says_so(built):
    ui, (summary, speakers, figure, excluded, exports, memory_max) = built
    report = __import__("json").loads((ui.ws.dataset_dir / "build_report.json").read_text(encoding="utf-8"))
    ax = figure.axes[0]
    assert "train and eval" in ax.get_title()
    containers = {container.get_label(): container for container in ax.containers}
    assert set(containers) >= {"train rows", "eval rows"}
    counted = {name: int(sum(bar.get_height() for bar in containers[f"{name} rows"])) for name in ("train", "eval")}
    assert counted == {"train": report["splits"]["train"], "eval": report["splits"]["eval"]}
    assert counted["eval"] > 0, "the sample pack's build has eval rows"
    longest_train = max(report["length_stats"]["row_tokens"])
    assert "(train and eval)" in summary and f"longest train row {longest_train}" in summary


@pytest.mark.slow
def test_memory_tab_explains_its_row_length_when_max_length_differs(built, tiny_model_dir):
    ui, (*_outputs, memory_max) = built
    values = {name: getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS}
    values.update(model=str(tiny_model_dir), device="cpu", max_length=memory_max["value"] + 20)
    figure, verdict, *_rest = ui.estimate(0, *[values[name] for name in common.CONFIG_FIELDS])
    report = __import__("json").loads((ui.ws.dataset_dir / "build_report.json").read_text(encoding="utf-8"))
    longest_train = max(report["length_stats"]["row_tokens"])
    title = figure.axes[0].get_title()
    assert f"longest train row: {longest_train} tokens" in title
    assert f"<summary>Why {longest_train} tokens and not {values['max_length']}?</summary>" in verdict  # asked for
    assert "test recordings" in verdict
    values.update(max_length=longest_train)
    verdict = ui.estimate(0, *[values[name] for name in common.CONFIG_FIELDS])[1]
    assert "tokens and not" not in verdict, "nothing to explain about the row length when the two agree"


def _page_words(demo: gr.Blocks) -> list[str]:
    """Every label, button text and tab name on the page."""
    words = []
    for block in demo.blocks.values():
        for attribute in ("label", "value"):
            value = getattr(block, attribute, None)
            if isinstance(value, str) and value and (attribute == "label" or isinstance(block, gr.Button)):
                words.append(value)
    return words


def test_the_app_words_name_widgets_that_exist(tmp_path):
    words = _page_words(app_module.build_ui(TutorApp(tmp_path / "ws")))
    tabs = {word.split("·")[-1].strip() for word in words if "·" in word}
    for flag, (label, where, _switch) in [*SETTING_WIDGETS.items(), *BUILD_WIDGETS.items()]:
        assert any(word.startswith(label) for word in words), f"--{flag}: no widget labelled {label!r}"
        tab = where.split(" tab")[0].split(",")[0]
        assert where == "top of the page" or tab in tabs, f"--{flag}: no tab {tab!r}"
    for name, (label, _where) in {**BUTTONS, **COMMANDS}.items():
        assert any(word.startswith(label) for word in words), f"{name}: no button or table {label!r}"


def test_what_the_build_leaves_out_names_the_dataset_tabs_max_tokens_box(tmp_path, tiny_model_dir):
    """The build's limit is the Dataset tab's "Max tokens per row": its excluded rows, its note and its
    errors send the teacher there, not to the Memory tab's training limit (which does not change what a
    build keeps)."""
    ui = TutorApp(tmp_path / "ws")
    ui.load_sample_pack()
    summary, _speakers, _figure, excluded, _exports, _memory = ui.build_dataset(str(tiny_model_dir), 0.25, 42, 380)
    reasons = " ".join(excluded["reason"].tolist())
    assert "tokens > Longest row to keep: 380" in reasons, reasons
    assert "Memory tab" not in reasons
    assert "longer than **Longest row to keep: 380**" in summary and "Max length" not in summary
    failed = ui.build_dataset(str(tiny_model_dir), 0.25, 42, 300)[0]
    assert failed.startswith("**✗") and "Longest row to keep" in failed and "Memory tab" not in failed, failed
    # Shown on the Dataset tab, none of them sends the teacher to the Dataset tab (issue 32's leftovers, item 11).
    for text in (reasons, summary, failed):
        assert "Dataset tab" not in text and "Dataset** tab" not in text, text
    assert app_wording("raise `--max-length` to 420", widgets=BUILD_WIDGETS) == (
        "raise **Longest row to keep** (Dataset tab) to 420")


def test_app_wording_examples():
    assert app_wording("`--max-length 300` excludes every train row; raise it") == (
        "**Max tokens per row: 300** (Memory tab) excludes every train row; raise it")
    assert app_wording("try --batch-size 1 --grad-accum 8 (same effective batch)") == (
        "try **Batch size: 1** (Memory tab), **Gradient accumulation: 8** (Memory tab) (same effective batch)")
    assert app_wording("see `python -m pipeline estimate`") == "see **Estimate** (Memory tab)"
    assert app_wording("use --no-vision-tower") == "use **Load the vision tower** off (Memory tab)"
    assert app_wording("`--workspace` and `hf download x --local-dir DIR`") == (
        "`--workspace` and `hf download x --local-dir DIR`"), "no app counterpart: unchanged"
    assert app_wording("pass `--model DIR`", markdown=False) == "pick DIR in the Model box at the top of the page"


def test_left_out_rows_are_not_counted_among_a_kinds_rows(tmp_path):
    """"read aloud: 9 rows (train 6, eval 3, excluded 1)" read as if 1 of the 9 was left out: it is a 10th, and
    a kind's recordings count it, as the Samples tab does."""
    ui = TutorApp(tmp_path / "ws")
    report = {"splits": {"train": 6, "eval": 3}, "split_method": "speaker", "seed": 42, "excluded": [
        {"id": "s-1", "reason": "feedback is empty"}], "length_stats": {}, "path": "x", "model": "m",
        "kinds": {"read_aloud": {"rows": 9, "train": 6, "eval": 3, "excluded": 1}}}
    summary = ui.dataset._dataset_outputs(report)[0]
    assert "**read aloud:** 10 recordings (6 to train on, 3 to test with, 1 left out)" in summary
    report["kinds"]["read_aloud"]["excluded"] = 0
    assert "**read aloud:** 9 recordings (6 to train on, 3 to test with)" in ui.dataset._dataset_outputs(report)[0]


def _clip_token_texts(model: str, clip_tokens: str) -> list[str]:
    """The tab's three texts that say what a clip costs (the build's summary, the chart's axis, the text
    under Max tokens per row), for a build of `model`."""
    from ui import dataset_tab, dataset_view

    report = {"splits": {"train": 6, "eval": 2}, "split_method": "speaker", "seed": 42, "excluded": [],
              "max_length": 512, "path": "WS/dataset", "model": model,
              "length_stats": {"count": 8, "min": 355, "median": 370, "p90": 389, "max": 389, "row_tokens": [355, 389]}}
    figure = dataset_view.length_histogram_bins([{"lo": 350, "hi": 360, "count": 1}, {"lo": 380, "hi": 390, "count": 1}],
                                                512, 389, [355, 389], clip_tokens=clip_tokens)
    return [dataset_view.summary_markdown(report, (), clip_tokens), figure.axes[0].get_xlabel(),
            dataset_tab.max_length_info(model)]


def test_the_dataset_tab_gives_one_figure_for_a_clips_tokens():
    """Issue 32 rule 1: the text under Max tokens per row and the build's summary said "each clip takes ~190",
    the chart's axis "~192 audio positions"; one figure now, everywhere on the tab."""
    import re

    from ui import dataset_tab

    clip_tokens = dataset_tab.clip_tokens_text("google/gemma-3n-E2B-it")
    assert clip_tokens == "~192"
    texts = _clip_token_texts("google/gemma-3n-E2B-it", clip_tokens)
    figures = {figure for text in texts for figure in re.findall(r"~\d+", text)}
    assert figures == {"~192"}, texts


def test_a_gemma4_clips_tokens_follow_its_length_on_every_figure_of_the_dataset_tab(tiny_gemma4_dir):
    """Issue 30: Gemma 4's audio costs ceil(ms / 40) tokens (25 per second, at most 750) plus its two markers,
    so the tab says so for a Gemma 4 model (hub id or folder), never Gemma 3n's ~192; the one computation is the
    family's (`ModelFamily.clip_tokens`), which counts the tokens the processor gives a clip."""
    from pipeline.model.catalog import FAMILIES
    from pipeline.model.gemma4 import audio_tokens
    from pipeline.model.loading import load_processor
    from ui import dataset_tab

    for model in ("google/gemma-4-E2B-it", str(tiny_gemma4_dir)):
        clip_tokens = dataset_tab.clip_tokens_text(model)
        assert clip_tokens == "~25 per second of audio, at most 752"
        for text in _clip_token_texts(model, clip_tokens):
            assert clip_tokens in text and "~192" not in text, text
    family = FAMILIES["gemma4"]
    processor = load_processor(str(tiny_gemma4_dir))
    for seconds in (1.0, 3.35, 30.0):
        span = family.audio_span(processor, seconds)
        assert len(processor.tokenizer(span, add_special_tokens=False)["input_ids"]) == family.clip_tokens(seconds)
    assert family.clip_tokens(30.0) == audio_tokens(30.0) + 2 == 752


def test_a_dataset_built_for_the_other_model_family_says_so_on_dataset_and_train(tmp_path):
    """Issue 32 leftovers: switching Gemma 3n <-> Gemma 4 did not flag the dataset built for the other family
    (its token counts and left-out rows are that family's). The Dataset tab and the Train tab's "Next run" line
    say which family it was built for and point to Build dataset; the same family says nothing. The note follows
    the model box (its change, the tab's opening, the page load and a build refresh it)."""
    from tests.studio_app import app_with_built_lengths

    ui = app_with_built_lengths(tmp_path / "ws")  # its build report: built for google/gemma-3n-E2B-it
    gemma4 = "google/gemma-4-E2B-it"
    note = ui.dataset.model_note(gemma4)
    assert note.startswith("⚠ The dataset was built for **Gemma 3n**, and the model picked is **Gemma 4**"), note
    assert "**Build dataset**" in note and "build it again for Gemma 4" in note
    assert ui.dataset.model_note("google/gemma-3n-E4B-it") == ""  # another size of the same family: fine
    assert ui.dataset.model_note(str(tmp_path / "no-such-folder")) == ""  # unknown: nothing to say
    values = {name: getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS}
    summary = ui.train.settings_summary(*[{**values, "model": gemma4}[n] for n in common.CONFIG_FIELDS], remember=False)
    assert note.replace("**Build dataset**", "**Build dataset** (Dataset tab)") in summary, "Train names the tab"
    assert "built for" not in ui.train.settings_summary(*[values[n] for n in common.CONFIG_FIELDS], remember=False)

    triggers = _triggers(app_module.build_ui(ui), "model_note", "dataset-model-note")
    assert {("model", "change"), ("tab-dataset", "select")} <= triggers, triggers


def _triggers(demo, handler: str, elem_id: str) -> set[tuple[str | None, str]]:
    """The (widget elem_id, event) pairs of `demo` whose handler named `handler` updates the widget `elem_id`."""
    widget = next(block._id for block in demo.blocks.values() if getattr(block, "elem_id", None) == elem_id)
    return {(getattr(demo.blocks.get(target), "elem_id", None), event) for dep in demo.fns.values()
            if getattr(dep.fn, "__name__", "") == handler and any(o._id == widget for o in dep.outputs)
            for target, event in dep.targets}


def test_a_message_never_sends_the_reader_to_the_tab_it_is_on():
    """Issue 32's leftovers, item 11: "build one on the Dataset tab" shown on the Dataset tab. `here` (a
    handlers object's tab, read by `ui_errors`) drops the pointer; other tabs keep it; a command-line message's
    own pointer to the app ("(the app's Dataset tab, Build dataset)") is not said twice."""
    from pipeline.errors import DatasetError

    said = "No dataset: run `python -m pipeline build --workspace /w` (the app's Dataset tab, Build dataset)."
    assert app_wording(said) == "No dataset: run **Build dataset** (Dataset tab)."
    assert app_wording(said, here="Dataset tab") == "No dataset: run **Build dataset**."
    assert app_wording("raise `--learning-rate`", here="Train tab") == "raise **Learning rate** (Advanced settings)"

    class Handlers:
        here = "Dataset tab"

        @common.ui_errors(message_at=0, outputs=2)
        def build(self):
            raise DatasetError(said)

    class Elsewhere(Handlers):
        here = "Train tab"

    assert "Dataset tab" not in Handlers().build()[0] and "**Build dataset**" in Handlers().build()[0]
    assert "**Build dataset** (Dataset tab)" in Elsewhere().build()[0]


def test_the_memory_answer_and_the_speakers_table_say_what_the_other_tabs_say(tmp_path):
    """The new-user pass after the merges: with Gemma 4 picked and a dataset built for Gemma 3n, Dataset and Train
    warned but the Memory tab answered "✓ Yes, it fits" from the other family's lengths, saying nothing; the
    Dataset tab's speakers table named the "eval" split that every other screen calls test recordings."""
    from tests.studio_app import app_with_built_lengths
    from ui.dataset_view import speakers_frame

    ui = app_with_built_lengths(tmp_path / "ws")  # built for google/gemma-3n-E2B-it
    values = {name: getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS}
    for model, warned in (("google/gemma-4-E2B-it", True), ("google/gemma-3n-E2B-it", False)):
        verdict = ui.memory.estimate(8, *[{**values, "model": model, "device": "cuda"}[n] for n in common.CONFIG_FIELDS])[1]
        assert ("The dataset was built for **Gemma 3n**" in verdict) == warned, verdict[:300]
    note = ui.dataset.model_note("google/gemma-4-E2B-it")
    assert "**Build dataset**" in note and "Dataset tab" not in note, "the Dataset tab's note does not name itself"
    assert list(speakers_frame({"train": ["a", "b"], "eval": ["c"]})["split"]) == ["train", "test"]


def test_samples_dataset_and_train_give_one_count_of_recordings_with_a_left_out_row(tmp_path, tiny_model_dir):
    """New-user pass: Samples said "65 recordings from 3 learners", the Dataset tab and the Train headline "64
    recordings ...: 42 to train on, 22 to test the tutor with (1 more left out)": the left-out recording was
    not counted. A recording is one library sample (a dialogue of several clips too); every screen counts all."""
    import re

    from pipeline.data.samples import SampleLibrary

    ui = TutorApp(tmp_path / "ws")
    ui.load_sample_pack()
    library = SampleLibrary(ui.ws)
    left_out = library.list()[0]
    library.update(left_out.id, feedback="")  # no tutor feedback: the build leaves it out
    total = len(library.list())
    samples_line = ui.samples.library_summary().splitlines()[0]
    ui.build_dataset(str(tiny_model_dir), 0.25, 42, 1024)
    dataset_line, train_line = ui.dataset.headline(), ui.train.headline()
    for line in (samples_line, dataset_line, train_line):
        assert re.match(rf"\*\*{total} recordings from \d learners\*\*", line), line
    learners = re.match(r"\*\*\d+ recordings from (\d) learners", samples_line).group(1)
    assert f"from {learners} learners" in dataset_line and f"from {learners} learners" in train_line
    train, test, out = map(int, re.search(r"(\d+) to train on, (\d+) to test the tutor with, (\d+) left out",
                                          dataset_line).groups())
    assert (train + test + out, out) == (total, 1), dataset_line
    assert "more left out" not in dataset_line + train_line
    summary = ui.dataset.dataset_on_load()[0]
    kinds = re.findall(r"\*\*[a-z ]+:\*\* (\d+) recordings", summary)
    assert sum(map(int, kinds)) == total, summary


def test_a_test_share_far_from_the_held_out_share_says_why_and_an_empty_tab_says_no_dataset_once(tmp_path):
    """New-user pass: "Held-out share 0.2" gave 22 of 64 (34 %) with no word why (whole learners go to the
    test set); the empty Dataset tab said "No dataset yet" and "Nothing built yet" one above the other."""
    from ui import dataset_view

    ui = TutorApp(tmp_path / "ws")
    assert ui.dataset.headline().startswith("No dataset yet")
    assert ui.dataset.library_changes() == "", "the headline says it once"
    report = {"splits": {"train": 42, "eval": 22}, "split_method": "speaker", "seed": 42, "eval_fraction": 0.2,
              "speakers": {"train": ["a", "b"], "eval": ["c"]}, "excluded": [], "length_stats": {}, "path": "x",
              "model": "m"}
    summary = dataset_view.summary_markdown(report)
    # "kept" read as kept for training: the 34 % are the recordings set apart for testing (new-user pass item 4)
    assert "34 % of the recordings set apart for testing, not the **Held-out share** of 0.2 (20 %)" in summary, summary
    assert "whole learners go to the test set" in summary and "1 learner of 3 is the nearest" in summary
    near = {**report, "splits": {"train": 50, "eval": 14}}
    assert "Held-out share" not in dataset_view.summary_markdown(near), "14 of 64 (22 %) is near enough: no note"


def test_gemma4_picked_leaves_no_gemma3n_text_behind(tmp_path, tiny_model_dir, tiny_gemma4_dir):
    """New-user pass: with the tiny Gemma 4 picked the note at the top said "Pick google/gemma-3n-E2B-it for a
    real tutor", and the Dataset tab's "Max tokens per row" was seen saying "each clip takes ~192" (Gemma 3n's)
    beside a Gemma 4 build's "~25 per second of audio". Every text that depends on the family follows the model
    picked: the real model named is the family's; the clip cost follows the picker when it changes (a reopened
    page's restored model too: checked in a browser) and when the tab opens."""
    ui = TutorApp(tmp_path / "ws")
    note = ui.state.describe_model(str(tiny_gemma4_dir))
    assert "google/gemma-4-E2B-it" in note and "gemma-3n" not in note, note
    assert "google/gemma-3n-E2B-it" in ui.state.describe_model(str(tiny_model_dir))
    info = ui.dataset.max_length_update(str(tiny_gemma4_dir))["info"]
    assert "~25 per second of audio, at most 752" in info and "~192" not in info, info

    triggers = _triggers(app_module.build_ui(ui), "max_length_update", "build-max-length")
    assert {("model", "change"), ("tab-dataset", "select")} <= triggers, triggers


def test_the_builds_limit_and_the_trainings_limit_have_two_names():
    """New-user pass: "Max tokens per row" was the Dataset tab's build limit (512) and the Memory tab's training
    limit (382, set by the build) at once, three values for one name. The build's box is "Longest row to keep",
    and its help says the build sets the Memory tab's box."""
    from ui.dataset_tab import BUILD_MAX_LENGTH_LABEL, max_length_info
    from ui.wording import BUILD_WIDGETS

    assert BUILD_MAX_LENGTH_LABEL == "Longest row to keep" == BUILD_WIDGETS["max-length"][0]
    assert "Max tokens per row" not in BUILD_MAX_LENGTH_LABEL and "Max tokens per row" in max_length_info(None)


def test_after_a_first_build_nothing_is_said_of_a_last_build():
    """New-user pass item 4: right after the very first build the tab said "The library has not changed since the
    last build."; a first build has no last build to speak of. After a later build the sentence stays."""
    from pipeline.data.build_changes import library_changes
    from ui.dataset_view import library_changes_markdown

    first = {"sample_digests": {}, "row_ids": {"train": [], "eval": []}, "split_changes": None}
    assert library_changes([], first)["first_build"] and library_changes_markdown(library_changes([], first)) == ""
    later = {**first, "split_changes": {"moved": False}}
    assert library_changes_markdown(library_changes([], later)) == "The library has not changed since the last build."
    old = {k: v for k, v in first.items() if k != "split_changes"}  # a report from before the field: as before
    assert library_changes_markdown(library_changes([], old)) == "The library has not changed since the last build."
