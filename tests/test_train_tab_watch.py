"""The Train tab as a new user watches a run: a clock that never goes back, a readable log of the last
lines, plain words for the memory counter, the run's own settings next to the "Next run" line, a Past
runs table whose numbers stay readable, failures in the app's words, and Resume without a choice.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import gradio as gr
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import app as app_module  # noqa: E402
from pipeline.training.run_folder import run_clock  # noqa: E402
from pipeline.training.runs import request_stop, run_status, wait_for_run  # noqa: E402
from tests.test_app_handlers import assert_failed  # noqa: E402
from ui import common  # noqa: E402
from ui import train_view as view  # noqa: E402
from ui.train_tab import RUNS_COLUMN_WIDTHS  # noqa: E402
from ui.tutor_app import TutorApp  # noqa: E402
from ui.wording import readable_log  # noqa: E402


def _settings(model: str, **changes):
    values = {name: getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS}
    values.update(model=model, device="cpu", batch_size=1, grad_accum=1, max_steps=3, eval_steps=0, save_steps=1)
    values.update(changes)
    return [values[name] for name in common.CONFIG_FIELDS]


def _elapsed_s(progress_html: str) -> int:
    """Seconds of the "elapsed" figure of `view.progress_html` ("1 min 02 s", "37 s", "–" = 0)."""
    text = re.search(r"elapsed ([^·]+)·", progress_html).group(1).strip()
    if text == "–":
        return 0
    parts = dict((unit, int(value)) for value, unit in re.findall(r"(\d+) (h|min|s)\b", text))
    return parts.get("h", 0) * 3600 + parts.get("min", 0) * 60 + parts.get("s", 0)


# ------------------------------------------------------------------------------------------- the clock


def test_the_clock_never_goes_back_from_loading_to_the_first_step():
    """The new user's case: 1 min 37 s shown while loading, then 1 min 02 s at step 1; later (issue 32)
    the loading counter went back to 1 s when the trainer wrote its start. The clock is the time since
    Start, loading included (the trainer's `elapsed_s` counts from its process's start too)."""
    t0 = 1_000_000.0
    elapsed, loading = run_clock([], t0, True, t0 + 97)
    assert (elapsed, loading) == (97.0, 97.0), "while loading: the loading time is the elapsed time"
    step1 = [{"step": 1, "elapsed_s": 98.0, "time": t0 + 98}]  # the trainer's clock: since its process started
    shown = [run_clock(step1, t0, True, now)[0] for now in (t0 + 98, t0 + 99, t0 + 130)]
    assert shown == sorted(shown) and shown[0] == 98.0 and run_clock(step1, t0, True, t0 + 99)[1] is None
    step2 = step1 + [{"step": 2, "elapsed_s": 131.0, "time": t0 + 131}]
    assert run_clock(step2, t0, True, t0 + 131)[0] >= shown[-1]
    # The last step is logged: the clock stops there while the adapter is saved, so the ended run's
    # figure (its last line) is not below what was shown while it saved.
    saving = [run_clock(step2, t0, True, t0 + 140, max_steps=2)[0], run_clock(step2, t0, False, t0 + 150)[0]]
    assert saving == [131.0, 131.0]
    # The same when Stop ends a run early: the step finished after STOP was written is the last.
    assert run_clock(step2, t0, True, t0 + 140, max_steps=10, stop_requested_at=t0 + 120)[0] == 131.0
    assert run_clock(step2, t0, True, t0 + 140, max_steps=10)[0] == 140.0, "no STOP: it ticks on"
    # A failure counts the time up to the failure.
    assert run_clock(step2, t0, False, t0 + 500, failed_at=t0 + 141) == (141.0, None)


def test_a_judging_line_does_not_send_the_clock_back_to_loading():
    """--keep-best logs a `judge` line (no elapsed_s) after an evaluation: the progress line said
    "elapsed 0 s · stopping (loading the model and checking the longest batch: 46 s)" after step 1."""
    t0 = 3_000_000.0
    rows = [{"kind": "train", "step": 1, "elapsed_s": 6.5, "time": t0 + 30},
            {"kind": "eval", "step": 1, "elapsed_s": 8.5, "time": t0 + 32},
            {"kind": "judge", "step": 1, "criterion": "expert_agreement", "value": 0.0, "time": t0 + 50}]
    elapsed, loading = run_clock(rows, t0, True, t0 + 55, max_steps=3, stop_requested_at=t0 + 40)
    assert loading is None and elapsed == 8.5 + 23.0
    assert run_clock(rows, t0, False, t0 + 60) == (8.5, None), "a stopped run shows its clock, not '–'"


def test_a_resumed_run_keeps_its_clock_while_it_loads_again():
    t0 = 2_000_000.0
    before = [{"step": 3, "elapsed_s": 40.0, "time": t0 - 600}]  # logged by the first process
    elapsed, loading = run_clock(before, t0, True, t0 + 25)  # the resumed process is loading
    assert elapsed == 65.0 and loading == 25.0
    after = before + [{"step": 4, "elapsed_s": 70.0, "time": t0 + 30}]  # its loading counted in its clock
    assert run_clock(after, t0, True, t0 + 31) == (71.0, None)


def test_right_after_resume_the_clock_starts_from_the_new_process(tmp_path):
    """The new-user pass: for one tick after Resume the clock showed the previous process's time plus
    everything since its last line, because result.json was still the previous process's."""
    from pipeline.training.run_folder import process_started_at

    t0 = 2_000_000.0
    (tmp_path / "pid.json").write_text(json.dumps({"pid": 1, "started_at": t0}))
    previous = {"status": "stopped", "started_at": t0 - 900}
    assert process_started_at(previous, tmp_path) == t0
    before = [{"step": 3, "elapsed_s": 40.0, "time": t0 - 600}]
    assert run_clock(before, process_started_at(previous, tmp_path), True, t0 + 5) == (45.0, 5.0)
    assert process_started_at({"status": "running", "started_at": t0 + 2}, tmp_path) == t0 + 2
    assert process_started_at({"status": "stopped", "started_at": t0 - 900}, tmp_path / "gone") == t0 - 900


# ------------------------------------------------------------------------------------------- the log

TRAIN_LOG = """\
2026-11-30 10:59:15,939 INFO pipeline.training.train: Starting run `t1` with settings {"model": "/ws/models/tiny", "device": "cpu", "quantization": "4bit", "lora_rank": 16, "lora_alpha": 32, "lora_dropout": 0.05, "lora_targets": "language", "batch_size": 1, "grad_accum": 1, "learning_rate": 0.0002}
2026-11-30 10:59:30,449 WARNING transformers.models.timm_wrapper.modeling_timm_wrapper: `attn_implementation='eager'` is not propagated to the wrapped `timm` model.
2026-11-30 10:59:57,948 INFO pipeline.training.train: Preflight on the longest batch: {"batch_rows": ["000050122"], "batch_tokens": 389, "loss": 7.628689765930176, "seconds": 22.703, "peak_memory_bytes": 1088507904, "memory_kind": "cpu_max_rss"}
2026-11-30 11:00:20,010 INFO pipeline.training.train: step 1/3 loss 7.628849506378174 lr 0.0 grad_norm 6.158710479736328 peak 1059.8 MiB eta 40.4 s
2026-11-30 11:00:29,566 INFO pipeline.training.train: step 2/3 loss 7.644067764282227 lr 0.0002 grad_norm 6.40974760055542 peak 1090.2 MiB eta 14.9 s
2026-11-30 11:00:58,281 INFO pipeline.training.train: Run `t1` completed at step 3.Writing model shards:   0%|          | 0/1 [00:00<?, ?it/s]\rWriting model shards: 100%|##########| 1/1 [00:00<00:00,  7.26it/s]
"""


def test_the_log_box_shows_the_last_lines_readably():
    text = readable_log(TRAIN_LOG, lines=4)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[-1] == "11:00:58  Run t1 completed at step 3."
    assert lines[0].startswith("10:59:57  Preflight on the longest batch: batch rows 000050122")
    assert "peak memory 1.01 GiB" in lines[0] and "memory (RAM) it held at once" in lines[0]
    assert lines[1] == "11:00:20  step 1 of 3: loss 7.629, memory so far 1.03 GiB, about 40 s left", lines[1]
    # Issue 32: the learning rate and gradient norm are the engineer's (they stay in train.log).
    assert "grad" not in text and " lr " not in text and "eta" not in text
    for raw in ("INFO", "pipeline.training", "{", "cpu_max_rss", "it/s", "2026-11-30", "7.628849506378174"):
        assert raw not in text, raw
    first = readable_log(TRAIN_LOG, lines=2_000).splitlines()
    assert first[0] == "10:59:15  Starting run t1 with settings (10 values, in the run's config.json)"
    assert first[1].startswith("10:59:30  ⚠ ")


def test_the_log_box_gives_memory_in_the_panels_unit():
    """Issue 32 (one quantity, one unit): the log showed the trainer's "peak 1059.8 MiB" beside the
    memory panel's "1.01 GiB". Old logs' step lines and small logged figures read in GiB too, as does the
    trainer's own line now."""
    text = readable_log(TRAIN_LOG, lines=2_000)
    assert "MiB" not in text
    assert "memory so far 1.03 GiB" in text and "memory so far 1.06 GiB" in text
    small = readable_log('2026-11-30 10:59:57,948 INFO pipeline.training.train: Preflight on the longest batch: '
                         '{"peak_memory_bytes": 1021000000, "memory_kind": "cpu_max_rss"}')
    assert "peak memory 0.95 GiB" in small and "MiB" not in small


def test_the_trainers_step_line_gives_its_peak_in_gib(tmp_path, caplog):
    """The trainer's own step line (train.log, which the CLI user reads too) says its peak in GiB, as the peak so
    far (the new-user pass read a last step line's "peak 1.01 GiB" as the run's peak, which the summary gave as
    1.02 GiB: a checkpoint save after the last step line can set it)."""
    from types import SimpleNamespace

    from pipeline.config import TrainConfig
    from pipeline.training.progress import progress_callback

    memory = SimpleNamespace(sample=lambda: None, to_dict=lambda: {
        "peak_bytes": 1_071_000_000, "phase_peak_bytes": {"step": 1_071_000_000}, "peak_phase": "step",
        "memory_kind": "cpu_max_rss"})
    callback = progress_callback({"progress": tmp_path / "progress.jsonl", "stop": tmp_path / "STOP"},
                                 TrainConfig(), memory, time.time())
    state = SimpleNamespace(global_step=1, max_steps=3, epoch=0.3)
    with caplog.at_level("INFO", logger="pipeline.training.train"):
        callback.on_log(None, state, None, logs={"loss": 7.6, "learning_rate": 2e-4, "grad_norm": 6.1})
    assert "peak so far 1.00 GiB eta" in caplog.text and "MiB" not in caplog.text
    assert "memory so far 1.00 GiB" in readable_log(caplog.records[-1].getMessage())


def test_failure_and_log_use_the_apps_words():
    reason = ("`org/x` is not in the Hugging Face cache; `hf download org/x --local-dir DIR` and pass `--model DIR`. "
              "A lower `--max-length 300` also helps; --resume continues from the last checkpoint.")
    panel = view.failure_markdown({"status": "failed", "reason": common.app_wording(reason)})
    assert "--model" not in panel and "--max-length" not in panel and "--resume" not in panel
    assert "pick DIR in the **Model** box" in panel and "**Max tokens per row: 300** (Memory tab)" in panel
    assert "`hf download org/x --local-dir DIR`" in panel, "a real shell step keeps its command"
    log = readable_log(f"2026-01-01 10:00:00,000 ERROR pipeline.training.train: Run failed: {reason}")
    assert log.startswith("10:00:00  ✗ Run failed") and "**" not in log and "`" not in log
    assert not any(flag in log for flag in ("--model", "--max-length", "--resume"))


def test_memory_counter_in_plain_words():
    text = view.train_memory_markdown({"phase_peak_bytes": {"step": 2**30}, "peak_phase": "step", "peak_bytes": 2**30,
                                      "memory_kind": "cpu_max_rss"}, {"total_bytes": 2**30, "run_peak_phase": "step"})
    assert "cpu_max_rss" not in text and "counter" not in text.lower()
    assert "measured as the most of the computer's memory (RAM) it held at once" in text
    from ui.memory_view import measured_markdown  # the Memory tab's calibration, in the same words

    measured = measured_markdown(2**30, 2**30, {"method": "CPU peak RSS (VmHWM reset before the step)"})
    assert "RSS" not in measured and "memory (RAM) it held at once" in measured


# ------------------------------------------------------------------------------------------- settings


def test_next_run_names_the_vision_tower_and_the_watched_run_shows_its_own_settings(tmp_path):
    ui = TutorApp(tmp_path / "ws")
    summary = ui.settings_summary(*_settings("google/gemma-3n-E2B-it", vision_tower=False, optimizer="adafactor"))
    assert "image part not loaded (vision tower)" in summary and "lightest updates (Adafactor)" in summary
    # A reload restores what the summary said (WS/settings.json), whatever the defaults are.
    restored = dict(zip(common.CONFIG_FIELDS, TutorApp(tmp_path / "ws").restore_settings()))
    assert restored["optimizer"]["value"] == "adafactor" and restored["vision_tower"]["value"] is False
    # The run being watched states its own settings, apart from the "Next run" line.
    run_dir = ui.ws.run_dir("r1")
    run_dir.mkdir(parents=True)
    config = common.config_from_values(_settings("google/gemma-3n-E2B-it", optimizer="adafactor")).to_dict()
    (run_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (run_dir / "result.json").write_text(json.dumps({"status": "stopped", "reason": "stopped by request"}))
    ui.settings_summary(*_settings("google/gemma-3n-E2B-it", optimizer="adamw"))  # the next run differs
    progress = ui.poll("r1", -1)[0]
    assert "This run: google/gemma-3n-E2B-it" in progress and "Adafactor" in progress and "AdamW" not in progress


def test_the_line_under_the_buttons_follows_the_run_to_its_end(tmp_path):
    """Issue 32 (a new user's pass): the run had completed and the progress said "status: completed", while
    the line under the buttons still said "Started t3n in its own process; the first step follows a check of
    the longest batch." (after a reload: "Re-attached to the running job t3n-b."). The watcher's tick
    replaces it once the run ends, and the words are a teacher's."""
    ui = TutorApp(tmp_path / "ws")
    run_dir = ui.ws.run_dir("t3n")
    run_dir.mkdir(parents=True)
    config = common.config_from_values(_settings("google/gemma-3n-E2B-it")).to_dict()
    (run_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for state, said in (("completed", "has finished"), ("stopped", "Resume"), ("failed", "did not finish")):
        (run_dir / "result.json").write_text(json.dumps({"status": state, "reason": "stopped by request"}))
        outputs = ui.poll("t3n", -1)
        assert len(outputs) == 13, "the status line is the tick's last output"
        status = outputs[-1]
        assert "t3n" in status and said in status and "Started" not in status and "process" not in status, status
    # The page wires the tick to the status line.
    demo = app_module.build_ui(TutorApp(tmp_path / "ws2"))
    ids = {getattr(block, "elem_id", None): block._id for block in demo.blocks.values()}
    ticks = [dep for dep in demo.fns.values() if ids["train-progress"] in [o._id for o in dep.outputs]
             and len(dep.outputs) > 7]
    assert ticks and all(ids["train-status"] == dep.outputs[-1]._id for dep in ticks)
    # While it trains, the line speaks of it as training, in a teacher's words.
    for line in (view.started_line("t3n"), view.started_line("t3n", resumed=True), view.started_line("t3n", picked_up=True)):
        assert "Re-attached" not in line and "job" not in line and "process" not in line, line


def test_a_resumed_run_keeps_its_peak_and_estimate_and_says_it_loads_again(tmp_path):
    """Issue 32 (a new user's pass): before Stop "it peaked at 1.03 GiB ... (98 %)"; after Resume "One training
    step: 1.03 GiB." with the estimate missing, then "it peaked at 1.01 GiB"; and while the model loaded again
    the progress said "step 5 of 33 · 15 % ... about 47 s left", frozen. A resumed run is one run: its peak is
    the largest of all its parts, its first estimate stays shown, and the reload is said and counted."""
    from types import SimpleNamespace

    from pipeline.training.run_folder import measured_memory
    from pipeline.training.train import _earlier_parts

    gib = 2**30
    first = {"phase_peak_bytes": {"load": int(0.5 * gib), "step": int(1.03 * gib)}, "peak_phase": "step",
             "peak_bytes": int(1.03 * gib), "memory_kind": "process RSS"}
    estimate = {"peak_bytes": int(1.05 * gib), "phase_bytes": {"step": int(1.0 * gib)}}
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"status": "stopped", "memory": first, "memory_estimate": estimate}))
    carried = _earlier_parts(path)
    assert carried["memory_estimate"] == estimate and carried["earlier_memory"]["peak_bytes"] == int(1.03 * gib)
    # The resumed process logs lower peaks: the run's peak stays the first part's.
    rows = [{"step": 6, "phase_peak_bytes": {"load": int(0.5 * gib), "step": int(1.01 * gib)}, "memory_kind": "process RSS"}]
    result = dict(carried, status="running")
    memory = measured_memory(rows, result)
    assert memory["peak_bytes"] == int(1.03 * gib) and memory["peak_phase"] == "step"
    ended = dict(result, memory=dict(rows[0], peak_bytes=int(1.01 * gib), peak_phase="step"))
    assert measured_memory(rows, ended)["peak_bytes"] == int(1.03 * gib)
    # Reloading after Resume: said, and the time left counts the loading still to come.
    run = SimpleNamespace(run="t3n-b", step=5, max_steps=33, elapsed_s=60.0, eta_s=47.0, loading_s=4.0,
                          state="running", settings=None)
    html = view.run_progress_html(run, expected_load_s=14.0)
    assert "loading the model again" in html and "about 57 s left" in html, html
    assert "about 47 s left" not in view.run_progress_html(run, expected_load_s=None)


def test_an_ended_runs_estimate_beside_the_memory_tabs_says_what_differs(tmp_path, monkeypatch):
    """Issue 32 (a new user's pass): Memory said "needs about 1.04 GiB", the 3-pass run with the same settings
    "the estimate for the whole run, made when it started, was 1.05 GiB". The same computation
    (`run_estimate` is `estimate_for_workspace`'s; passes change nothing), made at two moments: each run adds
    its measurements to this computer's calibration. Once the run has ended, its panel says the figure the
    Memory tab gives now and why it differs."""
    from pipeline.memory import run_compare

    gib = 2**30
    ui = TutorApp(tmp_path / "ws")
    run_dir = ui.ws.run_dir("t3n-b")
    run_dir.mkdir(parents=True)
    config = common.config_from_values(_settings("google/gemma-3n-E2B-it", epochs=3)).to_dict()
    (run_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    estimate = {"total_bytes": int(1.05 * gib), "step_bytes": int(1.0 * gib), "run_peak_phase": "step", "device": "cpu"}
    memory = {"phase_peak_bytes": {"step": int(1.03 * gib)}, "peak_phase": "step", "peak_bytes": int(1.03 * gib)}
    (run_dir / "result.json").write_text(json.dumps({"status": "completed", "memory": memory, "memory_estimate": estimate,
                                                     "finished_at": 1.0}))
    monkeypatch.setattr(run_compare, "run_estimate", lambda *a, **k: {"total_bytes": int(1.04 * gib)})
    panel = ui.poll("t3n-b", -1)[2]
    assert "was 1.05 GiB" in panel and "the Memory tab now estimates 1.04 GiB for the same settings" in panel, panel
    assert "measured since" in panel
    monkeypatch.setattr(run_compare, "run_estimate", lambda *a, **k: {"total_bytes": int(1.0501 * gib)})
    assert "Memory tab now" not in TutorApp(tmp_path / "ws").poll("t3n-b", -1)[2], "one figure: nothing to explain"


def test_events_before_the_page_restored_its_settings_neither_show_nor_save_the_defaults(tmp_path):
    """A reloaded page starts with the widgets' defaults (adamw); a tab click or a change event that runs
    before `restore_settings` has filled them in must not overwrite the saved settings (adafactor)."""
    ui = TutorApp(tmp_path / "ws")
    ui.settings_summary(*_settings("google/gemma-3n-E2B-it", optimizer="adafactor", vision_tower=False))
    saved = ui.settings_path.read_bytes()
    defaults = [getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS]
    assert ui.page_settings_summary(False, *defaults) == gr.skip()
    assert ui.settings_path.read_bytes() == saved, "the defaults were saved over the settings"
    restored = dict(zip(common.CONFIG_FIELDS, ui.restore_settings()))
    values = [restored[name].value if name == "model" else restored[name]["value"] for name in common.CONFIG_FIELDS]
    summary = ui.page_settings_summary(True, *values)
    assert "Adafactor" in summary and "image part not loaded" in summary
    # The page wires every settings event through the restored flag.
    demo = app_module.build_ui(TutorApp(tmp_path / "ws2"))
    handlers = [getattr(fn, "__name__", "") for dep in demo.fns.values() for fn in [dep.fn]]
    assert "page_settings_summary" in handlers and "settings_summary" not in handlers


def test_resume_or_stop_without_a_run_says_what_to_pick(tmp_path, capsys):
    ui = TutorApp(tmp_path / "ws")
    result = ui.resume_training("")
    assert_failed(result, "Stopped run to continue", message_at=1)
    assert_failed(ui.resume_training(None), "Stopped run to continue", message_at=1)
    assert_failed(ui.stop_training(""), "nothing to stop")
    assert "Traceback" not in capsys.readouterr().err


def test_past_runs_table_keeps_its_numbers_readable_with_a_long_note(tmp_path):
    long_reason = "The training process ended without writing its result " * 12
    table = view.runs_frame([{"run": "r", "state": "failed", "step": 3, "max_steps": 60, "reason": long_reason,
                             "result": {"final_loss": 7.61, "eval_loss": 7.62, "peak_memory_bytes": 2**30}}])
    note = table.iloc[0]["note"]
    assert len(note) <= view.NOTE_CHARS and note.endswith("…")
    # The page gives every column a width (the note wraps), so numbers never squeeze into vertical letters.
    demo = app_module.build_ui(TutorApp(tmp_path / "ws"))
    runs_df = next(block for block in demo.blocks.values() if getattr(block, "elem_id", None) == "runs-table")
    assert runs_df.column_widths == RUNS_COLUMN_WIDTHS and len(RUNS_COLUMN_WIDTHS) == len(table.columns)
    assert runs_df.wrap is True
    assert sum(float(width.rstrip("%")) for width in RUNS_COLUMN_WIDTHS) == pytest.approx(100)


# ------------------------------------------------------------------------------------------- real runs


@pytest.mark.slow
def test_a_run_whose_model_is_not_here_is_refused_at_start_in_app_words(tmp_path, tiny_model_dir, monkeypatch):
    """A hub id not on this computer (offline): Start refuses at once, before any process or run folder,
    and says so in the app's words (Get the model, never CLI flags or commands)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ui = TutorApp(tmp_path / "ws")
    ui.load_sample_pack()
    ui.build_dataset(str(tiny_model_dir), 0.2, 42, 1024)
    began = time.monotonic()
    outputs = ui.start_training("offline", *_settings("example-org/not-a-cached-model"))
    assert time.monotonic() - began < 30
    message = outputs[1]
    assert "not on this computer" in message and "Get the model" in message, message
    assert "--model" not in message and "python -m" not in message and "pass `" not in message, message
    assert not (ui.ws.runs_dir / "offline").exists()


@pytest.mark.slow
def test_watching_a_real_run_clock_log_and_memory(tmp_path, tiny_model_dir):
    """A real tiny run watched by the timer: elapsed never goes back, the log box ends with the newest line
    in plain words, the memory line says how it was measured."""
    ui = TutorApp(tmp_path / "ws")
    ui.load_sample_pack()
    ui.build_dataset(str(tiny_model_dir), 0.2, 42, 1024)
    ui.start_training("watched", *_settings(str(tiny_model_dir), max_steps=3))
    shown, states, logs = [], [], []
    try:
        deadline = time.time() + 400
        while time.time() < deadline:
            progress, _curves, memory, log, _failure, _seen, timer, *_lists = ui.poll("watched", -1)
            shown.append(_elapsed_s(progress))
            states.append(re.search(r"status: <b>([^<]*)</b>", progress).group(1))
            logs.append(log if isinstance(log, str) else "")
            if not run_status(ui.ws, "watched")["alive"]:
                break
            time.sleep(0.7)
    finally:
        request_stop(ui.ws, "watched", wait=True, timeout_s=5)
    assert run_status(ui.ws, "watched")["state"] == "completed", states[-5:]
    assert shown == sorted(shown), f"elapsed went back: {shown}"
    assert any("loading the model" in state for state in states), states[:5]
    final_log = logs[-1].splitlines()
    assert final_log and "completed" in final_log[-1] and len(final_log) <= 12
    assert not any(raw in logs[-1] for raw in ("INFO", "{", "cpu_max_rss"))
    assert "memory (RAM) it held at once" in memory and "cpu_max_rss" not in memory
    assert isinstance(timer, gr.Timer)


def test_the_run_summary_names_its_settings_in_words():
    """Issue 32 item 4: "tiny-gemma3n · none · auto · LoRA r 16 (alpha 32) on language · batch 1 x 4 accumulation
    · adamw · lr 0.0002 linear", where "none" meant no quantization."""
    config = common.config_from_values(_settings("/ws/models/tiny-gemma3n", quantization="none", grad_accum=4,
                                                 device="auto"))
    words = view.settings_words(config.to_dict())
    for raw in (" · none · ", " · auto · ", "LoRA r ", "accumulation", " · adamw · ", " linear"):
        assert raw not in words, (raw, words)
    for said in ("full-size weights (no compression)", "on the best device here (auto)", "adapter rank 16, strength 32",
                 "4 recordings per step, 1 at a time", "standard updates (AdamW)", "lowered steadily to 0"):
        assert said in words, (said, words)
    # Leftover of issue 32: the machine-learning settings sit behind "Advanced", the lead is in a teacher's words.
    lead, shown = view.settings_lead(config.to_dict()), view.settings_markdown(config.to_dict())
    for term in ("adapter rank", "strength", "AdamW", "learning rate", "LoRA", "gradient checkpointing"):
        assert term not in lead and term not in shown.split("<details>")[0], (term, shown)
        assert term in shown.split("<details>")[1], (term, shown)


# ------------------------------------------------------------------------------------------- after Stop (issue 32 pass)


def _event_chains(demo, elem_id: str, event: str) -> list[set[str]]:
    """The elem_ids each event chain started by `event` of the block `elem_id` writes to (the event and its
    `.then` steps together), one set per chain."""
    ids = {block._id: getattr(block, "elem_id", None) for block in demo.blocks.values()}
    fns = list(demo.fns.values())
    chains = []
    for first in fns:
        if not any(ids.get(target) == elem_id and name == event for target, name in first.targets):
            continue
        written, frontier = set(), {first._id}
        while frontier:
            step = [fn for fn in fns if fn._id in frontier]
            written |= {getattr(block, "elem_id", None) for fn in step for block in fn.outputs}
            frontier = {fn._id for fn in fns if fn.trigger_after in frontier}
        chains.append(written)
    return chains


def _fake_run(ws, name: str, status: str, model: str, checkpoint: bool = True) -> None:
    from pipeline.fileio import atomic_write_json

    run = ws.runs_dir / name
    atomic_write_json(run / "result.json", {"run": name, "status": status, "model": model})
    atomic_write_json(run / "config.json", {"model": model})
    if checkpoint:
        atomic_write_json(run / "checkpoints" / "checkpoint-1" / "trainer_state.json", {})


def test_stop_offers_the_run_to_continue_at_once(tmp_path):
    """The new-user pass: right after Stop, "Stopped run to continue" stayed empty and Resume said no run was
    picked, until a reload. Stop now refreshes that list with the run picked; a stopping run is in it."""
    from ui.train_tab import resumable_runs

    ui = TutorApp(tmp_path / "ws")
    _fake_run(ui.ws, "week1", "stopped", "google/gemma-3n-E2B-it")
    choice = ui.train.resume_choices("week1")
    assert choice.choices == [("week1", "week1")] and choice.value == "week1"
    assert resumable_runs([{"run": "s", "state": "stopping", "has_checkpoint": False},
                           {"run": "c", "state": "completed", "has_checkpoint": True}]) == ["s"]
    demo = app_module.build_ui(ui)
    assert any("resume-choice" in chain for chain in _event_chains(demo, "stop-training", "click")), \
        "Stop leaves the list of runs to continue as it was"


def test_the_headline_counts_the_picked_models_tutors(tmp_path):
    """The new-user pass: "3 tutors trained" with only 1 for the picked model. The count is the picked
    model's, the other models' tutors said apart; the page's model picker feeds it."""
    ui = TutorApp(tmp_path / "ws")
    tiny = ui.tiny_model_dir
    tiny.mkdir(parents=True)
    _fake_run(ui.ws, "a", "completed", str(tiny))
    _fake_run(ui.ws, "b", "completed", "google/gemma-3n-E2B-it")
    _fake_run(ui.ws, "c", "stopped", str(tiny / "gemma4"))
    # the new-user pass after that: a stopped run counted as trained, then not while it resumed ("2 tutors", "1 tutor")
    assert "2 tutors trained so far, 1 stopped part-way (**Resume** continues it)." in ui.train.headline()
    line = ui.train.headline(str(tiny))
    assert "1 tutor of tiny-gemma3n trained so far (1 more of other models)." in line, line
    line = ui.train.headline(str(tiny / "gemma4"))
    assert "No tutor of gemma4 has finished training yet (2 tutors of other models), 1 stopped part-way" in line, line
    demo = app_module.build_ui(ui)
    model = next(block for block in demo.blocks.values() if getattr(block, "elem_id", None) == "model")
    assert any("train-headline" in {getattr(b, "elem_id", None) for b in fn.outputs} and model in fn.inputs
               for fn in demo.fns.values()), "the headline follows the model picker"


def test_a_model_picked_by_its_button_is_remembered_at_once(tmp_path):
    """The new-user pass: the model picked with "Create offline tiny test model" was forgotten after a reload
    (the picker went back to gemma-3n-E2B-it): it was remembered only by the "Next run" line worked out after
    the pick, which a reload can beat. The button remembers it itself, the other settings kept."""
    ui = TutorApp(tmp_path / "ws")
    values = {name: getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS}
    ui.remember_settings(common.config_from_values({**values, "lora_rank": 8}))
    picker, _note = ui.make_tiny_model(progress=None)
    assert ui.saved_settings()["model"] == picker.value == str(ui.tiny_model_dir)
    assert ui.saved_settings()["lora_rank"] == 8, "the other settings stay"
    restored = dict(zip(common.CONFIG_FIELDS, ui.restore_settings()))
    assert restored["model"].value == str(ui.tiny_model_dir)


def test_after_resume_then_stop_the_run_keeps_its_loss_clock_and_words(tmp_path):
    """The new-user pass, Resume then Stop (the resumed process stopped within its first step, before it logged
    a line): the final loss left the table, the clock went back by the resumed process's loading, the note named
    a "STOP file" and "Resume (Train tab)" on the Train tab, the bar said "step 0 of ?" while loading, and the
    loading guess came from the calibration's shorter probes instead of this workspace's runs."""
    from pipeline.fileio import atomic_write_json
    from pipeline.training.runs import measured_load_seconds
    from pipeline.training.train import _last_train_loss
    from ui.train_tab import _runs_frame

    t0 = 5_000_000.0
    rows = [{"kind": "train", "step": 3, "loss": 7.4813, "elapsed_s": 60.0, "time": t0 + 60}]
    shown_while_loading, _ = run_clock(rows, t0 + 100, True, t0 + 130)  # resumed at t0+100, loading 30 s
    ended, _ = run_clock(rows, t0 + 100, False, t0 + 200, ended_at=t0 + 140)
    assert shown_while_loading == 90.0 and ended == 100.0 >= shown_while_loading, "the clock never goes back"
    assert run_clock(rows, t0, False, t0 + 200, ended_at=t0 + 70) == (60.0, None), "a process that logged: its line"

    progress = tmp_path / "progress.jsonl"
    progress.write_text("\n".join(json.dumps(row) for row in rows + [{"kind": "eval", "step": 3, "eval_loss": 7.5}]))
    assert _last_train_loss(None, progress) == 7.4813 and _last_train_loss(7.2, progress) == 7.2

    note = _runs_frame([{"run": "r", "state": "stopped", "alive": False,
                         "reason": "stopped by request (STOP file); --resume continues"}]).iloc[0]["note"]
    assert "STOP" not in note and "Train tab" not in note and "Resume continues" in note, note
    log = readable_log("2026-11-30 11:00:20,010 INFO pipeline.training.progress: STOP file found at step 3: saving "
                       "a checkpoint and the adapter.", here="Train tab")
    assert "STOP" not in log and "Stop was asked for at step 3" in log, log

    loading = view.progress_html(0, None, 12, None, "running", loading=True)
    assert "loading the model" in loading and "step <b>0</b>" not in loading and "?" not in loading
    assert "step <b>4</b> of <b>10</b>" in view.progress_html(4, 10, 12, None, "running", loading=True)

    ui = TutorApp(tmp_path / "ws")
    settings = {"model": "m", "quantization": "none", "device": "cpu", "low_memory_heap": False}
    for name, seconds, model in (("a", 40.0, "m"), ("b", 44.0, "m"), ("c", 10.0, "other")):
        atomic_write_json(ui.ws.runs_dir / name / "result.json", {"run": name, "status": "completed",
                                                                   "load_seconds": seconds})
        atomic_write_json(ui.ws.runs_dir / name / "config.json", {**settings, "model": model})
    assert measured_load_seconds(ui.ws, settings) == {"seconds": 42.0, "measurements": 2}
    assert measured_load_seconds(ui.ws, {**settings, "quantization": "4bit"}) is None


def test_one_loss_one_rounding_and_the_runs_estimate_says_when_it_was_made():
    """The new-user pass: a loss read 7.4813 in the Past runs table and 7.517 in the log; the watched run's
    "1.06 GiB estimated" stood beside the Memory tab's 1.00 GiB for one step with nothing saying they were
    different moments. A loss has one rounding everywhere (`pipeline.units.format_loss`); the run's estimate is
    labelled as made when it started, and Why? says why the Memory tab's may differ."""
    from pipeline.units import format_loss

    table = view.runs_frame([{"run": "r", "state": "completed", "result": {"final_loss": 7.48132, "eval_loss": 7.51698}}])
    assert (table.iloc[0]["final loss"], table.iloc[0]["eval loss"]) == ("7.481", "7.517") == (
        format_loss(7.48132), format_loss(7.51698))
    log = readable_log("2026-11-30 11:00:20,010 INFO pipeline.training.train: step 3/3 loss 7.481320381164551 lr 0.0\n"
                       "2026-11-30 11:00:21,010 INFO pipeline.training.train: step 3/3 eval_loss 7.5170\n"
                       '2026-11-30 10:59:57,948 INFO pipeline.training.train: Preflight: {"loss": 7.628689765930176}')
    assert "loss 7.481 " in log and "eval loss 7.517" in log and "loss 7.629" in log, log
    checked = view.kept_markdown([{"kind": "judge", "step": 2, "criterion": "eval_loss", "value": 7.51698,
                                   "best_value": 7.48132, "best_step": 1, "clips": 2, "seconds": 4}], {})
    assert "eval loss 7.517 at step 2 (best 7.481 at step 1)" in checked, checked
    text = view.train_memory_markdown(
        {"phase_peak_bytes": {"step": 2**30}, "peak_phase": "step", "peak_bytes": 2**30, "memory_kind": "cpu_max_rss"},
        {"total_bytes": int(1.06 * 2**30), "run_peak_phase": "step", "step_bytes": int(1.06 * 2**30)})
    assert "1.06 GiB estimated for them when the run started" in text and "made when it started" in text, text
    assert "Memory tab estimates with what this computer has measured since" in text.split("Why?")[1]


def _app_forecasting(tmp_path, monkeypatch, load: dict):
    """An app whose workspace has a 400-token build and whose forecast is 10 steps of 20 s after `load`
    (`forecast_run`'s load record); returns (app, a 10-step config of model "m")."""
    from ui import train_tab

    ui = TutorApp(tmp_path / "ws")
    config = common.config_from_values({**{n: getattr(common.DEFAULTS, n) for n in common.CONFIG_FIELDS},
                                        "model": "m", "max_steps": 10})
    monkeypatch.setattr(train_tab, "built_report", lambda ws: {"length_stats": {"row_tokens": [400]}})
    monkeypatch.setattr("pipeline.calibration.forecast_run", lambda config, lengths, device: {
        "compute_dtype": "float32", "compute_dtype_reason": "", "steps": 10, "seconds": 20.0, "step": {"source": "run"},
        "load": load, "load_seconds": load["seconds"], "total_seconds": load["seconds"] + 20.0})
    return ui, config


def test_the_next_runs_loading_is_the_workspaces_measured_one(tmp_path, monkeypatch):
    """The new-user pass: the loading guess was half the real one (the calibration's probe). Once runs of these
    settings loaded in this workspace, the "Next run" forecast and the watched run's line use their median."""
    from pipeline.fileio import atomic_write_json

    ui, config = _app_forecasting(tmp_path, monkeypatch, {"seconds": 30.0, "date": "2026-12-01"})
    assert "loading about 30 s" in ui.train.forecast(config)
    atomic_write_json(ui.ws.runs_dir / "a" / "result.json", {"run": "a", "status": "completed", "load_seconds": 61.0})
    atomic_write_json(ui.ws.runs_dir / "a" / "config.json", config.to_dict())
    text = ui.train.forecast(config)
    assert "about **1 min 21 s** from Start" in text and "loading about 1 min 01 s" in text, text


def test_before_a_run_starts_the_bar_counts_nothing():
    """The new-user pass: before Start the bar read "step 0 of ? · 0 % · elapsed … · status: not started" beside
    "How long: … the last of its 33 steps". Before a run starts the bar says only that it has not started."""
    for html_text in (view.progress_html(0, 0, None, None, None), view.progress_html(0, None, None, None, "not started")):
        assert "status: <b>not started</b>" in html_text, html_text
        assert "step" not in html_text and "?" not in html_text and "elapsed" not in html_text, html_text
    assert "step <b>3</b> of <b>10</b>" in view.progress_html(3, 10, 20, 5, "running")


def test_the_loading_forecast_says_where_it_comes_from(tmp_path, monkeypatch):
    """The new-user pass: "loading about 17 s … last time" on a first run that took 55 s: "last time" was the
    calibration's load. The loading figure is always of the same model and quantization and says whose it is:
    "the calibration's load of this model" or "your last run(s)"."""
    from pipeline.fileio import atomic_write_json

    assert view.load_from_words("probe", 1) == "the calibration's load of this model"
    assert view.load_from_words("run", 1) == "your last run" and view.load_from_words("run", 3) == "your last 3 runs"
    ui, config = _app_forecasting(tmp_path, monkeypatch, {"seconds": 17.0, "source": "probe", "measurements": 1})
    assert "loading about 17 s, as the calibration's load of this model, then" in ui.train.forecast(config)
    atomic_write_json(ui.ws.runs_dir / "a" / "result.json", {"run": "a", "status": "completed", "load_seconds": 55.0})
    atomic_write_json(ui.ws.runs_dir / "a" / "config.json", config.to_dict())
    assert "loading about 55 s, as your last run, then" in ui.train.forecast(config)
    from types import SimpleNamespace

    loading = SimpleNamespace(run="b", step=0, max_steps=10, elapsed_s=9.0, eta_s=None, loading_s=9.0,
                              state="running", settings=None)
    html = view.run_progress_html(loading, 17.0, view.load_from_words("probe"))
    assert "of about 17 s, as the calibration&#x27;s load of this model" in html and "last time" not in html, html


def test_the_next_runs_time_is_labelled_a_forecast():
    """The new-user pass: after a run ended, "How long: about 1 min 24 s" stood under its "elapsed 2 min 26 s".
    The line is the next run's forecast and says so."""
    plan = {"compute_dtype": "float32", "compute_dtype_reason": "", "steps": 33, "seconds": 60.0,
            "load_seconds": 24.0, "total_seconds": 84.0, "load_from": "your last run"}
    text = view.forecast_markdown(plan, "cpu")
    assert text.startswith("**How long the next run takes (forecast):** about **1 min 24 s**"), text
