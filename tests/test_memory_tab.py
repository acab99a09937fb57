"""The Memory tab tells one consistent story (issue 10): a tight fit after Apply never says nothing fits, Apply
changes only what the suggestion names, each change is listed once with its own cost, a typed budget shows
what is held back, the "what can this machine do?" table, and why the default quantization is what it is."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import gradio as gr
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import DEFAULT_QUANTIZATION_REASON  # noqa: E402
from ui import common  # noqa: E402
from ui import memory_view  # noqa: E402
from ui.tutor_app import TutorApp  # noqa: E402
from tests.studio_app import app_with_built_lengths  # noqa: E402

pytestmark = pytest.mark.usefixtures("glibc_heap")  # figures with glibc's retained heap, TCMalloc installed or not

E2B = "google/gemma-3n-E2B-it"


@pytest.fixture(autouse=True)
def _bf16_compute(monkeypatch):
    """The story these tests check is priced for one precision, whatever this CPU computes in (an AVX2
    CPU without native bf16 trains in float32: `pipeline.calibration.precision`)."""
    monkeypatch.setenv("TUTOR_COMPUTE_DTYPE", "bfloat16")


@pytest.fixture()
def app(tmp_path) -> TutorApp:
    """An app on a workspace whose built dataset has rows up to 389 tokens (as the sample pack's build)."""
    return app_with_built_lengths(tmp_path / "ws")


def _values(**changes) -> dict:
    values = {name: getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS}
    values.update(model=E2B, device="cpu", quantization="4bit", max_length=389)
    values.update(changes)
    return values


def _estimate(app, budget, values):
    return app.estimate(budget, *[values[name] for name in common.CONFIG_FIELDS])


def _apply(app, index, suggestions, values) -> dict:
    """Apply suggestion `index` as the page does: only widgets given a value change."""
    updates = app.apply_suggestion(index, suggestions)
    assert len(updates) == len(common.CONFIG_FIELDS)
    changed = {}
    for name, update in zip(common.CONFIG_FIELDS, updates):
        if update == gr.skip():
            continue
        changed[name] = update["value"]
    return changed


def test_apply_changes_only_the_named_settings_and_a_tight_fit_says_so(app):
    values = _values()
    figure, verdict, table, hint, suggestions, *buttons = _estimate(app, 12, values)
    assert "No, it does not fit" in verdict and suggestions
    tight = next(i for i, s in enumerate(suggestions) if s["verdict"] == "tight")
    changed = _apply(app, tight, suggestions, values)
    assert changed == suggestions[tight]["changes"]  # nothing else, Max length 389 included
    assert "max_length" not in changed
    values.update(changed)
    assert values["max_length"] == 389
    _, verdict, _, hint, after, *_ = _estimate(app, 12, values)
    assert "Yes, but only just" in verdict and "does not fit" not in verdict
    assert "No setting change found that fits" not in hint and "nothing fits" not in hint.lower()
    if not after:
        assert "It fits, tightly" in hint


def test_each_change_is_listed_once_with_its_own_cost(app):
    _, _, _, hint, suggestions, *buttons = _estimate(app, 12, _values())
    assert suggestions
    for index, suggestion in enumerate(suggestions):
        steps = suggestion["steps"]
        assert len(steps) == len({frozenset(step["changes"]) for step in steps})
        assert {k: v for step in steps for k, v in step["changes"].items()} == suggestion["changes"]
        block = hint.split(f"\n{index + 1}. ")[1].split(f"\n{index + 2}. ")[0]
        assert block.count("(cost: ") == len(steps)  # one cost per change, no extra "tight" cost
        for step in steps:
            assert f"{step['what']} (cost: {step['cost']})" in block
        label = buttons[index].value
        assert label.count(" + ") == len(steps) - 1
    assert "lora: rank" not in hint and "lora: alpha" not in hint
    rank = [step for s in suggestions for step in s["steps"] if "lora_rank" in step["changes"]]
    for step in rank:  # rank and alpha are one change, said once, in words
        assert re.fullmatch(r"A smaller add-on: rank \d+ instead of 16", step["what"])


def test_a_typed_budget_shows_what_is_held_back(app):
    _, verdict, *_ = _estimate(app, 8, _values())
    assert ("Usable 6.00 GiB = 8.00 GiB (the 8 GB you typed: memory sizes in GB count GiB, so 8 GB = 8.00 GiB = 8192 MiB) "
            "minus 2.00 GiB kept free for the system") in verdict
    assert "left to the OS and open apps" in verdict.split("(technically, the headroom rule")[1], "the rule's words after"


def test_odd_budgets_are_answered_in_the_verdict_panel(app):
    """A new user's pass (issue 11): a budget under the headroom dropped the estimated-peak line; -5 gave a
    toast; 1e9 GiB was accepted as a machine; the command line refused the 0 the app offers."""
    _, verdict, *_ = _estimate(app, 0.5, _values())
    assert "does not fit" in verdict and "needs about" in verdict and "nothing is usable" in verdict
    for typo in (-5, 1e9):
        _, verdict, *_ = _estimate(app, typo, _values())
        assert "✗" in verdict and "between 0 and 4096" in verdict and "e.g. 16" in verdict, verdict
    from pipeline.memory.budget import device_memory

    assert device_memory("cpu", 0).source == device_memory("cpu").source  # 0: what the device reports


@pytest.mark.slow
def test_the_plan_table_lists_both_models_and_every_kind(app):
    text = app.plan(None, 8, *[_values(device="cuda")[name] for name in common.CONFIG_FIELDS])
    rows = [line for line in text.splitlines() if line.startswith("| gemma")]
    models = ("| gemma-3n-E2B", "| gemma-3n-E4B", "| gemma-4-E2B", "| gemma-4-E4B")  # both families, E2B and E4B
    assert len(rows) == 16 and all(sum(row.startswith(model) for row in rows) == 4 for model in models)
    for kind in ("| every weight |", "| add-on, full-size model |", "| add-on, 8-bit model |", "| add-on, 4-bit model"):
        assert sum(kind in row for row in rows) == 4
    assert "QLoRA" in text.split("| gemma-4-E4B")[-1], "the field's terms under the table, not in its rows"
    assert "bf16" not in text and "fp32" not in text, "a row names no number format: the machine's (the answer says it)"
    assert "7.75 GiB" in text
    qlora = next(row for row in rows if row.startswith("| gemma-3n-E2B") and "4-bit model" in row)
    assert "per-layer embeddings in CPU memory" in qlora and "(cost: " in qlora


def test_detected_device_says_why_its_default_quantization(app):
    text = app.detect_device("cpu", 0)
    assert "Default quantization here: **none**" in text and DEFAULT_QUANTIZATION_REASON["cpu"] in text
    assert "6.91 against 9.18 GiB" in DEFAULT_QUANTIZATION_REASON["cpu"]  # the measured figures, both sides


def test_tight_with_no_suggestion_never_says_nothing_fits():
    assert "It fits, tightly" in memory_view.suggestions_markdown([], "tight")
    assert "No setting change found" in memory_view.suggestions_markdown([], "does not fit")
    assert memory_view.suggestions_markdown([], "fits") == ""


# ------------------------------------------------------------------ calibration as a job of its own (issue 32)

def _fake_calibration(app, **progress):
    """A calibration job folder with a live process that stands in for the job's (it only sleeps; its command
    line is the job's), its settings and its progress so far; returns the process."""
    import json
    import time

    from pipeline import jobs
    from pipeline.memory.calibration_job import JOB_FILES, job_folder

    folder = job_folder(app.ws)
    folder.mkdir(parents=True, exist_ok=True)
    settings = common.config_from_values([_values()[name] for name in common.CONFIG_FIELDS]).replace(device="auto")
    (folder / JOB_FILES["job"]).write_text(json.dumps({"settings": settings.to_dict(), "elsewhere": "", "created_at": 0}))
    (folder / JOB_FILES["progress"]).write_text(json.dumps(dict(progress, updated_at=time.time())))
    command = [sys.executable, "-c", "import time; time.sleep(120)", "pipeline", "calibration-job", "run",
               "--workspace", str(app.ws.root)]
    return jobs.start(folder, command, env=jobs.job_env()), settings


def test_a_reopened_page_follows_a_running_calibration_then_its_answer_refreshes(app):
    """Issue 32 (nothing stale): the calibration ran inside the click's handler, so a reloaded page lost its
    progress and never refreshed the verdict. It runs in its own process: a page (re)opened during it shows
    its part and phase, a second click starts nothing, and its end brings the answer for this computer again."""
    import json

    from pipeline import jobs
    from pipeline.memory.calibration_job import JOB_FILES, calibration_status, job_folder
    from ui.memory_tab import CALIBRATING, N_ESTIMATE_OUTPUTS, THIS_COMPUTER

    values = [_values()[name] for name in common.CONFIG_FIELDS]
    process, settings = _fake_calibration(app, part="stand-in", index=2, of=4, phase="load", text="…")
    try:
        machine, budget, verdict, measured, timer = app.memory.calibration_on_load()
        assert machine["value"] == THIS_COMPUTER and verdict == CALIBRATING and timer.active
        assert "part 2 of 4: a short trial with the offline test model · loading the model" in measured
        polled = app.memory.calibration_poll(0, *values)
        assert len(polled) == N_ESTIMATE_OUTPUTS + 2 and polled[-1].active
        assert polled[1] == gr.skip() and "loading the model" in polled[N_ESTIMATE_OUTPUTS - 2]
        text, timer = app.memory.start_calibration("", 0, *values)  # a second click while it runs
        assert text.startswith("A calibration of this computer is already running") and timer.active
        assert calibration_status(app.ws)["started_at"] and jobs.read_json(
            job_folder(app.ws) / jobs.PID_FILE)["pid"] == process.pid, "no second calibration was started"
    finally:
        jobs.kill(process.pid)
    (job_folder(app.ws) / JOB_FILES["result"]).write_text(json.dumps({
        "status": "completed", "reason": None, "settings": settings.to_dict(), "step_bytes": 3 * 2**30,
        "measured": {"peak_bytes": 3 * 2**30, "method": "cpu_max_rss"}, "finished_at": 1}))
    done = app.memory.calibration_poll(0, *values)
    assert not done[-1].active and "Will" not in done[1] and "fit" in done[1], "the answer is given again"
    assert done[1] != CALIBRATING and "**Measured here:**" in done[N_ESTIMATE_OUTPUTS - 2]
    assert "E2B" in done[-2] and "usable" in done[-2], "the plan table follows the answer"
    assert app.memory.calibration_on_load()[-1].active is False, "a page opened after it ended attaches to nothing"


def test_one_calibration_at_a_time_across_processes(app):
    """A second calibration, from another window or `estimate --measure`, is refused while one holds the
    per-user lock (two would measure each other's memory)."""
    import subprocess

    from pipeline.errors import TrainingError
    from pipeline.memory.calibrate import calibration_holder, hold_calibration
    from pipeline.memory.calibration_job import start_calibration

    code = ("import time\nfrom pipeline.memory.calibrate import hold_calibration\n"
            "with hold_calibration():\n    print('held', flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=str(Path(__file__).resolve().parents[1]))
    try:
        assert holder.stdout.readline().strip() == "held"
        assert calibration_holder()["pid"] == holder.pid
        with pytest.raises(TrainingError, match="being calibrated already"):
            with hold_calibration():
                pass
        with pytest.raises(TrainingError, match="being calibrated already"):
            start_calibration(app.ws, {})
        text, timer = app.memory.start_calibration("", 0, *[_values()[name] for name in common.CONFIG_FIELDS])
        assert text.startswith("**✗ Training:**") and "being calibrated already" in text and timer == gr.skip()
    finally:
        holder.kill()
        holder.wait()
    assert calibration_holder() is None
    with hold_calibration():
        assert calibration_holder()["pid"] == __import__("os").getpid()


def test_the_plan_table_says_the_picked_model_has_no_row_when_it_has_none():
    """The new-user pass: with the tiny model picked, the table said "the row of the settings you picked is the
    answer above", and no row was."""
    row = {"model": "google/gemma-3n-E2B-it", "finetuning_type": "lora", "quantization": "none", "label": "x",
           "total_bytes": 2**30, "verdict": "fits", "changes": []}
    result = {"device": "cpu", "usable_bytes": 8 * 2**30, "rows": [row]}
    mine = memory_view.plan_markdown(result, current={"model": "google/gemma-3n-E2B-it", "quantization": "none"})
    assert "(your settings)" in mine and "the row of the settings you picked is the answer above" in mine
    tiny = memory_view.plan_markdown(result, current={"model": "/ws/models/tiny-gemma3n", "quantization": "none"})
    assert "(your settings)" not in tiny and "the row of the settings you picked" not in tiny
    assert "the model you picked (tiny-gemma3n) has no row" in tiny


def test_the_calibration_panel_shows_every_phase_of_its_part_with_its_time(tmp_path):
    """Issue 32 (a new user's pass): the panel showed only the phase of the moment, and a 2-s poll could miss
    the tiny model's short "longest batch". The progress record keeps the part's phases with their seconds
    (`phases_so_far`), and the panel shows the done ones: "loading the model ✓ 14 s · the longest batch ✓ 2 s ·
    one measured step …"."""
    from pipeline.memory.calibration_job import phases_so_far

    seen: list[dict] = []
    t0 = 1_000_000.0
    phases_so_far(seen, {"part": "stand-in", "index": 2, "of": 4, "phase": "load"}, t0)
    phases_so_far(seen, {"part": "stand-in", "index": 2, "of": 4, "phase": "step"}, t0 + 5)
    phases_so_far(seen, {"part": "yours", "index": 4, "of": 4, "phase": None}, t0 + 9)
    phases_so_far(seen, {"part": "yours", "index": 4, "of": 4, "phase": "load"}, t0 + 10)
    phases_so_far(seen, {"part": "yours", "index": 4, "of": 4, "phase": "load"}, t0 + 20)  # the same phase again
    phases_so_far(seen, {"part": "yours", "index": 4, "of": 4, "phase": "batch"}, t0 + 24)
    record = phases_so_far(seen, {"part": "yours", "index": 4, "of": 4, "phase": "step"}, t0 + 26)
    assert [p["phase"] for p in record["phases"]] == ["load", "batch", "step"], "this part's phases only"
    assert [p.get("seconds") for p in record["phases"]] == [14.0, 2.0, None]
    assert seen[1]["seconds"] == 4.0, "a part's last phase ends when the next part begins"
    ui = TutorApp(tmp_path / "ws")
    step = {"part": "yours", "index": 4, "of": 4, "phase": "step", **record}
    text = ui.memory.calibration_progress({"progress": step, "started_at": t0}, now=t0 + 30)
    assert "loading the model ✓ 14 s · the longest batch ✓ 2 s · one measured step …" in text, text


def test_the_calibration_panels_part_number_and_phases_are_of_one_part(tmp_path):
    """The new-user pass: "part 3 of 4: a short trial…" stood beside the ✓ phases of part 2: the stand-in's two
    probes (parts 2 and 3) share a name, and the phases were kept by name. They are kept by part number now."""
    from pipeline.memory.calibration_job import phases_so_far

    seen: list[dict] = []
    t0 = 1_000_000.0
    phases_so_far(seen, {"part": "stand-in", "index": 2, "of": 4, "phase": "load"}, t0)
    phases_so_far(seen, {"part": "stand-in", "index": 2, "of": 4, "phase": "step"}, t0 + 5)
    record = phases_so_far(seen, {"part": "stand-in", "index": 3, "of": 4, "phase": None}, t0 + 9)
    assert record["phases"] == [] and seen[1]["seconds"] == 4.0, (record, seen)
    record = phases_so_far(seen, {"part": "stand-in", "index": 3, "of": 4, "phase": "load"}, t0 + 10)
    assert [(p["phase"], p.get("seconds")) for p in record["phases"]] == [("load", None)], record
    ui = TutorApp(tmp_path / "ws")
    step = {"part": "stand-in", "index": 3, "of": 4, "phase": "load", **record}
    text = ui.memory.calibration_progress({"progress": step, "started_at": t0}, now=t0 + 12)
    assert "part 3 of 4" in text and "✓" not in text and "loading the model …" in text, text


def test_the_calibrations_forecast_is_this_computers_last_one(tmp_path):
    """Issue 32 (a new user's pass): the calibration took ~1.5 min against "about 3" (a figure for another
    computer). The panel now says how long the last calibration took here (`last_calibration_seconds`)."""
    from pipeline.memory.calibration_job import last_calibration_seconds

    done = {"state": "completed", "created_at": 1000.0, "result": {"finished_at": 1092.0}}
    assert last_calibration_seconds(done) == 92.0
    assert last_calibration_seconds({"state": "failed", "last_seconds": 80.0, "result": {}}) == 80.0
    assert last_calibration_seconds({"state": "not_started", "result": None}) is None
    ui = TutorApp(tmp_path / "ws")
    text = ui.memory.calibration_progress({"progress": {}, "started_at": 1000.0, "last_seconds": 92.0}, now=1030.0)
    assert "30 s so far, of about 1 min 32 s last time here" in text, text
    assert "last time" not in ui.memory.calibration_progress({"progress": {}, "started_at": 1000.0}, now=1030.0)
    from ui.memory_tab import CALIBRATE_NOTE

    assert "about 3" not in CALIBRATE_NOTE and "2-core" not in CALIBRATE_NOTE


def test_every_suggestion_leads_with_a_teachers_words(monkeypatch):
    """Issue 32 (a new user's pass): "What else fits" showed "(8-bit AdamW) (cost: none in practice (bitsandbytes;
    same results))", "LoRA adapter", "QLoRA", "frozen audio encoder" with no words first. Every change a
    suggestion or a plan row can name says what it does first; the field's term follows in brackets."""
    from pipeline.config import TrainConfig
    from pipeline.memory import search
    from pipeline.memory.inputs import LengthStats

    monkeypatch.setattr(search, "heap_can_follow_live_tensors", lambda: True)
    jargon = ("LoRA", "AdamW", "bitsandbytes", "encoder", "embeddings", "accumulation", "Batch size", "gradient",
              "Adafactor", "dropout")
    configs = [TrainConfig(model="google/gemma-3n-E2B-it", device=device, finetuning_type=kind, batch_size=4,
                           lora_targets=targets, quantization="none", gradient_checkpointing=False)
               for device in ("cpu", "cuda") for kind in ("full", "lora") for targets in ("language", "language+audio")]
    for config in configs:
        for move in search._candidate_moves(config, LengthStats(400, 10.0), config.device):
            lead = move.what.split(" (")[0]
            for term in jargon:
                assert term not in lead, (term, move.what)
            assert "bitsandbytes" not in move.cost and "(" not in move.cost, move.cost
    note = memory_view.PLAN_KIND_NOTE
    for term in ("LoRA adapter", "QLoRA"):
        assert f"(a {term})" in note or f": {term})" in note, (term, note)


def test_how_sure_and_why_tell_one_story_about_where_the_calibration_was_measured():
    """The new-user pass: How sure said "(75 measurements…); nothing was measured in this project yet" while Why?
    said "Calibrated on this machine on 2026-12-03 (75 measurements)". Both now say the same computer and that
    none of the measurements was made in this project."""
    from ui.memory_view import calibration_words, how_sure

    data = {"calibration": {"n_measurements": 75, "date": "2026-12-03T10:00:00", "places": {"here": 0, "elsewhere": 0,
                                                                                         "unknown": 75}},
            "calibration_text": "calibrated on this machine on 2026-12-03 (75 measurements)", "uncertainty_percent": 3}
    sure, why = how_sure(data), calibration_words(data)
    assert "nothing was measured in this project yet" in sure and "this computer" in sure, sure
    assert "this machine" not in why and "on this computer on 2026-12-03" in why, why
    assert "None of these measurements was made in this project yet" in why, why
    data["calibration"]["places"] = {"here": 5, "elsewhere": 0, "unknown": 70}
    assert "None of these" not in calibration_words(data)
