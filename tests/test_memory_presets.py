"""The Memory tab answers "Will MODEL fit on MACHINE?" as the command line does (issue 19 items 3-4, issue 20).

- The app and `python -m pipeline estimate --json` give the same figures to the same question: a machine
  picked in the app applies its device's defaults (4-bit on CUDA, as `estimate --device cuda` without
  `--quantization`), unless the teacher chose the precision.
- The verdict names the model, the machine, the precision and whether the figure is calibrated; one
  headline number (the whole run's peak) with the step's figure explained under it.
- No note contradicts another; a new estimate clears the Detect device note and an old measurement.
- Out-of-range numbers get a message next to their field (no Gradio "Error" badges: no `minimum=`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gradio as gr
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import default_quantization, likely_device  # noqa: E402
from ui import common  # noqa: E402
from ui import memory_view  # noqa: E402
from ui.memory_view import gib  # noqa: E402
from ui.memory_tab import CUSTOM_MACHINE, MACHINE_PRESETS, THIS_COMPUTER  # noqa: E402
from ui.tutor_app import TutorApp  # noqa: E402
from tests.studio_app import app_with_built_lengths  # noqa: E402

E2B = "google/gemma-3n-E2B-it"
N_OUTPUTS = 9 + 4  # estimate's outputs: plot, verdict, table, hint, suggestions, 4 buttons, notes, device note, measured, reading


@pytest.fixture()
def app(tmp_path) -> TutorApp:
    """An app on a workspace whose built dataset has rows up to 389 tokens (as the sample pack's build)."""
    return app_with_built_lengths(tmp_path / "ws")


def _page_values(**changes) -> dict:
    """The settings as a fresh page shows them: `TrainConfig` defaults, the quantization default of the
    device this machine most likely has (`memory_tab`), the E2B model."""
    values = {name: getattr(common.DEFAULTS, name) for name in common.CONFIG_FIELDS}
    values.update(model=E2B, quantization=default_quantization(likely_device()))
    values.update(changes)
    return values


def _pick_machine(app, machine: str, values: dict, chosen: bool = False) -> float:
    """Pick `machine` as the page does; updates `values` in place and returns the memory budget field's value."""
    device, memory_gb, quantization, *cleared = app.memory.choose_machine(machine, values["quantization"], chosen)
    for name, update in (("device", device), ("quantization", quantization)):
        if update != gr.skip():
            values[name] = update["value"]
    return memory_gb.get("value", 0)


def _ask_app(app, memory_gb: float, values: dict):
    outputs = app.estimate(memory_gb, *[values[name] for name in common.CONFIG_FIELDS])
    assert len(outputs) == N_OUTPUTS
    return outputs


def _ask_cli(ws, capsys, *flags: str) -> dict:
    """`python -m pipeline estimate --json` (its `main`, in this process: the same parsing, defaults and
    estimate as the command a person types)."""
    from pipeline.__main__ import main

    assert main(["estimate", "--workspace", str(ws.root), "--model", E2B, "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


QUESTIONS = [("NVIDIA GPU, 8 GB", ["--device", "cuda", "--memory-gb", "8"]),
             ("NVIDIA GPU, 16 GB", ["--device", "cuda", "--memory-gb", "16"]),
             ("Mac, 16 GB unified memory", ["--device", "mps", "--memory-gb", "16"]),
             ("Mac, 48 GB unified memory", ["--device", "mps", "--memory-gb", "48"]),
             (THIS_COMPUTER, [])]


@pytest.mark.parametrize("ple_on_cpu", [False, True], ids=["ple-on-device", "ple-on-host"])
@pytest.mark.parametrize("machine,flags", QUESTIONS, ids=[q[0] for q in QUESTIONS])
def test_the_app_and_the_command_line_give_the_same_figures(app, capsys, machine, flags, ple_on_cpu):
    values = _page_values(ple_on_cpu=ple_on_cpu)
    memory_gb = _pick_machine(app, machine, values)
    _figure, verdict, table, *_rest = _ask_app(app, memory_gb, values)
    cli = _ask_cli(app.ws, capsys, *flags, *(["--ple-on-cpu"] if ple_on_cpu else []))
    assert values["quantization"] == cli["settings"]["quantization"], "the device's default, as the CLI's"
    assert dict(zip(table["component"], table["bytes"])) == cli["components"], "every term, to the byte"
    assert f"needs about **{gib(cli['total_bytes'])}** at its peak" in verdict
    if memory_gb:  # a preset's budget is fixed; this computer's free memory moves between the two calls
        assert f"of **{gib(cli['usable_bytes'])}** usable" in verdict
        label = {"fits": "✓ Yes, it fits", "tight": "⚠ Yes, but only just", "does not fit": "✗ No, it does not fit"}[cli["verdict"]]
        assert verdict.startswith(f"### {label}\n")


def test_the_issue_example_cuda_8_gb_is_4_bit_in_the_app_too(app, capsys):
    """Issue 19: Device = cuda kept the CPU default (no quantization): 11.60 GiB where the CLI said 8.99 GiB."""
    values = _page_values(quantization="none")  # a CPU machine's page
    memory_gb = _pick_machine(app, "NVIDIA GPU, 8 GB", values)
    assert (values["device"], values["quantization"], memory_gb) == ("cuda", "4bit", 8)
    cli = _ask_cli(app.ws, capsys, "--device", "cuda", "--memory-gb", "8")
    verdict = _ask_app(app, memory_gb, values)[1]
    assert gib(cli["total_bytes"]) in verdict and "compressed to 4 bits" in verdict and "4-bit (NF4) weights" in verdict


def test_a_chosen_precision_is_kept_and_a_default_follows_the_device(app):
    handlers = app.memory
    assert handlers.note_quantization(False, "cpu", "4bit") is True, "4-bit on a CPU is a choice"
    assert handlers.note_quantization(False, "cuda", "4bit") is False, "4-bit on CUDA is its default"
    assert handlers.note_quantization(True, "cuda", "4bit") is True, "a choice stays a choice"
    values = _page_values(device="cpu", quantization="4bit")
    _pick_machine(app, "Mac, 16 GB unified memory", values, chosen=True)
    assert (values["device"], values["quantization"]) == ("mps", "4bit")
    _pick_machine(app, "Mac, 16 GB unified memory", values, chosen=False)
    assert values["quantization"] == "none"
    assert handlers.device_defaults("cuda", "none", False)["value"] == "4bit", "Device picked by hand"
    assert handlers.device_defaults("cuda", "none", True) == gr.skip()
    assert handlers.device_defaults("mps", "none", False) == gr.skip()
    machine, budget, quantization = handlers.device_picked("cuda", 12, "none", False)
    assert machine["value"] == "NVIDIA GPU, 12 GB" and not budget["visible"] and quantization["value"] == "4bit"
    machine, budget, quantization = handlers.device_picked("cpu", 10, "4bit", True)
    assert machine["value"] == CUSTOM_MACHINE and budget["visible"] and quantization == gr.skip()
    assert handlers.device_picked("cuda", 0, "4bit", False)[0]["value"] == THIS_COMPUTER, "no budget: this computer"


def test_the_presets_are_the_machines_people_have(app):
    assert MACHINE_PRESETS[THIS_COMPUTER] == ("auto", 0)
    assert [gb for device, gb in MACHINE_PRESETS.values() if device == "cuda"] == [8, 12, 16, 24]
    assert [gb for device, gb in MACHINE_PRESETS.values() if device == "mps"] == [16, 24, 36, 48]
    device, budget, quantization, *cleared = app.memory.choose_machine(CUSTOM_MACHINE, "none", False)
    assert device == gr.skip() and budget["visible"] and quantization == gr.skip(), "custom: type the budget"
    assert app.memory.question(E2B, "Mac, 36 GB unified memory") == (
        "## Will gemma-3n-E2B-it fit on a Mac with 36 GB of unified memory?")
    assert app.memory.question("/home/me/models/tiny-gemma3n/", THIS_COMPUTER) == (
        "## Will tiny-gemma3n fit on this computer?")


def test_the_verdict_names_model_machine_precision_and_calibration(app):
    """A teacher's decision first (fits or not, how sure, what to click), the technical terms behind "Why?"."""
    values = _page_values()
    memory_gb = _pick_machine(app, "Mac, 16 GB unified memory", values)
    verdict = _ask_app(app, memory_gb, values)[1]
    lead, _, why = verdict.partition("<details>")  # Why?, then any other block behind a click
    assert "**gemma-3n-E2B-it on a Mac with 16 GB of unified memory** needs about" in lead
    assert "a machine this app has not measured" in lead and "Calibrate this machine" not in lead, "no offer for a machine not here"
    for term in ("bf16", "fp32", "NF4", "mps", "allocator", "kernel", "±"):
        assert term not in lead, f"{term!r} before Why?"
    assert "bf16 weights, computing in bf16" in why and "shorter number format" in why
    assert "this machine" not in why, "the question is about another machine"
    values = _page_values(device="cpu")
    verdict = _ask_app(app, 0, values)[1]
    assert "this computer (CPU)" in verdict and "**Calibrate this machine** (below)" in verdict


def _shown_sums_add_up(verdict: str, where: str) -> None:
    """Every figure the answer shows twice is equal and every sum it shows adds up, to the 0.01 GiB shown."""
    import re

    def cents(text: str) -> int:
        return round(float(text) * 100)

    head = re.search(r"needs about \*\*([\d.]+) GiB\*\* at its peak, of \*\*([\d.]+) GiB\*\* usable: ([\d.]+) GiB "
                     r"(to spare|too much)", verdict)
    assert head, f"{where}: no headline in {verdict!r}"
    total, usable, margin = cents(head[1]), cents(head[2]), cents(head[3])
    assert margin == (usable - total if head[4] == "to spare" else total - usable), f"{where}: {head[0]}"
    line = re.search(r"Usable ([\d.]+) GiB = ([\d.]+) GiB \(([^)]*)\) minus ([\d.]+) GiB kept free", verdict)
    assert line, f"{where}: no usable line in {verdict!r}"
    assert cents(line[1]) == usable, f"{where}: usable {line[1]} beside {head[2]}"
    assert cents(line[2]) - cents(line[4]) == usable, f"{where}: {line[0]}"
    rule = re.search(r"headroom rule: ([\d.]+) GiB", verdict)
    assert not rule or cents(rule[1]) == cents(line[4]), f"{where}: {rule[0]} beside {line[4]} GiB kept free"
    assert not re.search(r"headroom rule: [\d.]+ [KM]i?B", verdict), f"{where}: kept back in another unit"
    if re.search(r"\d GB", verdict.split("<details>")[0]):  # a machine's GB said in the answer's unit too
        assert "memory sizes in GB count GiB" in verdict, f"{where}: GB beside GiB, unexplained"
    step = re.search(r"One training step alone needs ([\d.]+) GiB", verdict)
    adds = re.search(r"adds ([\d.]+) GiB", verdict)
    if step and adds:
        assert cents(step[1]) + cents(adds[1]) == total, f"{where}: {step[0]} ... {adds[0]} beside {head[1]}"
    if step:
        assert cents(step[1]) != total, f"{where}: the step's figure is the headline's, said twice"


def test_walking_the_presets_every_figure_agrees_and_every_sum_adds_up(app):
    """Issue 32's done-when (the Memory tab through presets): "NVIDIA GPU, 8 GB" said "7.75 GiB usable" with no
    word that its 8 GB are GiB; "Usable 18.48 GiB = 20.84 GiB ... minus 2.35 GiB" (18.49); "One training step
    alone needs 1.00 GiB ... adds 0.05 GiB" beside "about 1.04 GiB". Every preset, a typed budget, each model
    and precision the page offers by default: what is shown twice is equal, and shown sums add up."""
    for model in (E2B, "google/gemma-3n-E4B-it"):
        for machine in [*MACHINE_PRESETS, CUSTOM_MACHINE]:
            values = _page_values(model=model)
            memory_gb = _pick_machine(app, machine, values) or (8 if machine == CUSTOM_MACHINE else 0)
            verdict = _ask_app(app, memory_gb, values)[1]
            _shown_sums_add_up(verdict, f"{model} on {machine}")
            if machine == CUSTOM_MACHINE:
                assert "the 8 GB you typed" in verdict, verdict
    # The same rules on answers whose figures round apart (a step just under its whole run; a budget of odd bytes).
    gib_ = 2**30
    data = {"model": E2B, "verdict": "fits", "total_bytes": int(1.044 * gib_), "step_bytes": int(1.004 * gib_),
            "usable_bytes": int(18.484 * gib_), "run_peak_phase": "step",
            "device_memory": {"free_bytes": int(20.835 * gib_), "source": "measured", "headroom_note": "rule"}}
    _shown_sums_add_up(memory_view.memory_answer_markdown(data, "this computer (CPU)"), "rounding apart")


def test_another_machine_is_asked_for_once_and_named_by_what_was_typed(app):
    """The new-user pass: "Type the machine's memory in GB." under the box and "Type the other machine's memory
    in GB in the box beside Machine…" (the box was below) said one thing twice; "(they count GB in GiB)" puzzled;
    typing 6 answered "another machine with 6 GB (an NVIDIA GPU)", a kind never asked about."""
    from ui import memory_tab
    from ui.memory_view import machine_words

    assert app.memory.field_message("memory_gb", None) == ""
    assert "beside" not in memory_tab.TYPE_THE_MEMORY and memory_tab.MEMORY_GB_LABEL in memory_tab.TYPE_THE_MEMORY
    for device in ("cuda", "mps", "cpu"):
        assert machine_words("auto", device, 6, typed=True) == "another machine with 6 GB"
    import inspect

    assert "count GB in GiB" not in inspect.getsource(memory_tab)


def test_another_machine_after_a_preset_asks_for_its_memory_and_answers_about_it(app):
    """Issue 32 (a new user's pass): "Mac, 48 GB", Estimate, then "Another machine: type its memory" and Estimate:
    the answer still said "on a Mac with 48 GB of unified memory ... 44.00 GiB usable". The box to type into
    shows, empty; Estimate before a figure is typed asks for it; the answer then names the memory typed."""
    values = _page_values()
    memory_gb = _pick_machine(app, "Mac, 48 GB unified memory", values)
    assert "a Mac with 48 GB" in app.memory.estimate_picked("Mac, 48 GB unified memory", memory_gb,
                                                             *[values[n] for n in common.CONFIG_FIELDS])[1]
    device, budget, quantization, verdict, *_cleared = app.memory.choose_machine(CUSTOM_MACHINE, values["quantization"], False)
    assert budget["visible"] is True and budget["value"] is None, "an empty box to type into"
    assert "48" not in verdict and "Type" in verdict, verdict
    asked = app.memory.estimate_picked(CUSTOM_MACHINE, None, *[values[n] for n in common.CONFIG_FIELDS])
    assert "Type" in asked[1] and "a Mac" not in asked[1], asked[1]
    assert app.memory.field_message("memory_gb", None) == "", "no ✗ (and the answer alone asks) for an empty box"
    outputs = app.memory.estimate_picked(CUSTOM_MACHINE, 20, *[values[n] for n in common.CONFIG_FIELDS])
    answer, reading = outputs[1], outputs[-1]
    assert "another machine with 20 GB" in answer and "48" not in answer.split("<details>")[0], answer
    assert "the 20 GB you typed" in answer, answer
    assert "GPU" not in answer.split("<details>")[0] and "Mac" not in answer.split("<details>")[0], "no kind not picked"
    _shown_sums_add_up(answer, "typed 20 GB")
    plan = app.memory.plan(reading, 20, *[values[n] for n in common.CONFIG_FIELDS])
    assert "another machine with 20 GB" in plan and "a Mac with" not in plan, plan[:400]
    # The page's Estimate button goes through the machine picked.
    import app as app_module

    demo = app_module.build_ui(TutorApp(app.ws.root.parent / "ws2"))
    assert "estimate_picked" in [getattr(dep.fn, "__name__", "") for dep in demo.fns.values()]


def test_the_memory_tab_and_a_runs_estimate_are_one_computation(app):
    """Issue 32: Memory "1.04 GiB" against a 3-pass run's "1.05 GiB made when it started". The passes change
    nothing: the run's estimate (`run_estimate`) and the Memory tab's (`estimate_for_workspace`) give the same
    bytes for the same settings and calibration; a difference comes from the calibration growing in between
    (the Train tab says so: `test_an_ended_runs_estimate_beside_the_memory_tabs_says_what_differs`)."""
    from pipeline.config import TrainConfig
    from pipeline.memory.report import estimate_for_workspace
    from pipeline.memory.run_compare import run_estimate

    figures = set()
    for epochs in (1, 3):
        config = TrainConfig(model=E2B, device="cpu", epochs=epochs)
        tab, run = estimate_for_workspace(app.ws, config), run_estimate(app.ws, config, "cpu")
        figures |= {(tab["total_bytes"], tab["step_bytes"]), (run["total_bytes"], run["step_bytes"])}
    assert len(figures) == 1, figures


def test_how_sure_says_where_the_measurements_come_from_and_the_last_calibration_returns(app):
    """Issue 32 (a new user's pass): before this project calibrated anything, How sure said "calibrated on this
    computer ... (27 measurements ... 4 of them in another project folder on this computer)"; after calibrating
    and reloading, the line under Calibrate was empty. Before this project measured anything, the words say
    the measurements are from before and elsewhere; the last calibration's result comes back with the answer."""
    from pipeline.memory.calibration_job import JOB_FILES, job_folder

    data = {"calibration": {"date": "2026-12-02T10:00", "n_measurements": 27,
                            "places": {"here": 0, "elsewhere": 4, "unknown": 23}}, "uncertainty_percent": 3}
    words = memory_view.how_sure(data, offer=True)
    assert "calibrated on this computer" not in words and "nothing was measured in this project yet" in words, words
    assert "27 measurements" in words and "Calibrate this machine" in words, words
    data["calibration"]["places"] = {"here": 5, "elsewhere": 4, "unknown": 18}
    assert "calibrated on this computer on 2026-12-02" in memory_view.how_sure(data)
    # A finished calibration of these settings: a reopened page's answer shows its result again.
    values = _page_values(device="cpu")
    config = common.config_from_values([values[n] for n in common.CONFIG_FIELDS]).replace(device="auto")
    folder = job_folder(app.ws)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / JOB_FILES["job"]).write_text(json.dumps({"settings": config.to_dict()}))
    (folder / JOB_FILES["result"]).write_text(json.dumps({"status": "completed", "settings": config.to_dict(),
                                                          "measured": {"peak_bytes": 3 * 2**30}}))
    measured = _ask_app(app, 0, values)[-2]
    assert "3.00 GiB" in measured, measured
    assert _ask_app(app, 0, _page_values(device="cpu", lora_rank=8))[-2] == "", "other settings: not its figure"
    assert _ask_app(app, 16, values)[-2] == "", "another machine: not this computer's measurement"


def test_a_calibrated_estimate_says_so(app, capsys):
    """The estimate's `calibration` keys (branch i19cal) are shown when the report has them."""
    data = _ask_cli(app.ws, capsys, "--device", "cpu", "--memory-gb", "16")
    assert "not measured" in memory_view.memory_answer_markdown(data, "this computer (CPU)")
    data.update(calibration={"date": "2026-12-01", "device_key": "cpu|EPYC", "n_measurements": 3},
                calibration_text="calibrated on this machine on 2026-12-01 (3 measurements)",  # DeviceCalibration.text
                uncertainty_percent=2, this_machine=True,
                compute_dtype="float32", compute_dtype_reason="fp32: this CPU has no native bf16 (AVX2).")
    text = memory_view.memory_answer_markdown(data, "this computer (CPU)", offer_calibration=True)
    lead, why = text.split("<details>")
    assert "calibrated on this computer on 2026-12-01 (3 measurements, each within 2 %" in lead
    assert "not measured" not in text and "Calibrate this machine** (below)" not in lead
    assert "twice the memory" in why and "this computer's processor cannot compute the shorter one quickly" in why
    assert "computing in fp32" in why and "no native bf16 (AVX2)" in why, "the technical reason, behind Why?"


def test_one_headline_number_and_the_step_explained_under_it(app, capsys):
    data = _ask_cli(app.ws, capsys, "--device", "cpu", "--memory-gb", "16")
    assert data["step_bytes"] != data["total_bytes"], "this example has two figures to tell apart"
    text = memory_view.memory_answer_markdown(data, "a computer with 16 GB of RAM (training on the CPU)")
    import re

    bold = re.findall(r"\*\*([\d.]+ [KMG]i?B)\*\*", text)
    assert bold == [gib(data["total_bytes"]), gib(data["usable_bytes"])], "one headline"
    assert text.count(gib(data["step_bytes"])) == 1, "the step's figure once, under the headline"
    under = text.split("<details>")[1]
    assert "When the peak comes" in under and f"One training step alone needs {gib(data['step_bytes'])}" in under
    from pipeline.units import gib_minus

    assert f"adds {gib_minus(data['total_bytes'], data['step_bytes'])}" in under, "the difference of the shown figures"


@pytest.mark.parametrize("device", ["cuda", "cpu", "mps"])
def test_notes_about_the_per_layer_embeddings_agree(app, capsys, device):
    notes = " ".join(_ask_cli(app.ws, capsys, "--device", device, "--memory-gb", "16", "--ple-on-cpu")["notes"])
    on_host, ignored = "per-layer embeddings kept in CPU RAM" in notes, "applies to CUDA only" in notes
    assert (on_host, ignored) == ((True, False) if device == "cuda" else (False, True)), notes


def test_a_new_estimate_clears_what_was_about_earlier_settings(app):
    values = _page_values(device="cpu")
    *_head, notes, device_note, measured, reading = _ask_app(app, 16, values)
    assert (device_note, measured) == ("", ""), "the Detect device note and an old measurement go"
    assert reading["usable_bytes"] and reading["device"] == "cpu", "the reading the plan table reuses"
    assert "runtime overhead" in notes, "the notes sit in the details, not beside the verdict"
    device, budget, quantization, verdict, hint, measured, device_note, *buttons = app.memory.choose_machine(
        "NVIDIA GPU, 24 GB", "none", False)
    assert (verdict, hint, measured, device_note) == ("", "", "", "")
    assert all(button["visible"] is False for button in buttons)
    verdict, hint, measured, plot, *buttons, plan = app.memory.settings_changed()  # a setting changed by hand
    assert "click **Estimate**" in verdict and (hint, measured, plot) == ("", "", None)
    assert all(button["visible"] is False for button in buttons) and "Estimate" in plan, "the plan table goes too"


def test_out_of_range_numbers_get_a_message_next_to_the_field(app):
    handlers = app.memory
    assert handlers.field_message("lora_rank", 16) == "" and handlers.field_message("memory_gb", 0) == ""
    message = handlers.field_message("lora_rank", -5)
    assert message.startswith("✗") and "LoRA rank r" in message and ">= 1" in message and "-5" in message
    assert "256" in handlers.field_message("max_length", 100)
    assert "between 0 and 4096" in handlers.field_message("memory_gb", -5)
    assert handlers.field_message("batch_size", None) == "✗ Type a number here."


def test_number_fields_have_no_gradio_minimum(tmp_path):
    """Gradio refuses a number under `minimum=` with a toast and red "Error" badges over the page (issue 20
    item 6); the Memory tab's numbers are checked by `field_message` instead."""
    import app as app_module

    demo = app_module.build_ui(TutorApp(tmp_path / "ws"))
    numbers = {block.elem_id: block for block in demo.blocks.values() if isinstance(block, gr.Number)}
    for elem_id in ("set-lora-rank", "set-batch-size", "set-grad-accum", "max-length", "memory-gb"):
        assert numbers[elem_id].minimum is None, elem_id
        message = elem_id.removeprefix("set-").replace("max-length", "max-length") + "-message"
        assert any(getattr(block, "elem_id", None) == message for block in demo.blocks.values()), message
    # The page's tabs hold only tabs: a component made beside them (a gr.State after a tab's `with` block)
    # is a child of gr.Tabs, shifts the tabs' order in the browser, and a tab's button became another's.
    tabs = next(block for block in demo.blocks.values() if isinstance(block, gr.Tabs))
    assert all(isinstance(child, gr.Tab) for child in tabs.children), [type(c).__name__ for c in tabs.children]


def test_calibrate_this_machine_measures_this_computer_whatever_machine_is_picked(app):
    """Issue 32 item 2: with a Mac or NVIDIA preset picked, calibrating failed looking for that device. The
    first part of the click makes the machine this computer (its device, no budget, its default precision
    unless chosen), clears the other machine's answer and names it for the measured panel."""
    machine, device, budget, quantization, question, before, verdict, hint, measured, note, *buttons = (
        app.memory.calibrate_here("NVIDIA GPU, 8 GB", "4bit", False, E2B))
    assert machine["value"] == THIS_COMPUTER and device["value"] == "auto" and budget == {"value": 0, "visible": False,
                                                                                          "__type__": "update"}
    here = default_quantization(likely_device())
    assert (quantization == gr.skip()) if here == "4bit" else quantization["value"] == here
    assert before == "an NVIDIA GPU with 8 GB" and "this computer?" in question
    assert "Calibrating **this computer**" in verdict and (hint, measured, note) == ("", "", "")
    assert all(button["visible"] is False for button in buttons)
    chosen = app.memory.calibrate_here("Mac, 16 GB unified memory", "8bit", True, E2B)
    assert chosen[3] == gr.skip() and chosen[5] == "a Mac with 16 GB of unified memory", "a chosen precision stays"
    assert app.memory.calibrate_here(THIS_COMPUTER, "none", False, E2B)[5] == "", "nothing to say when it was this computer"
    text = memory_view.measured_markdown(2**30, 2**30 - 2**20, {}, elsewhere="an NVIDIA GPU with 8 GB")
    assert "measures this computer" in text and "not for an NVIDIA GPU with 8 GB" in text
    assert "peaked at **1.00 GiB**" in text and "the estimate for one step is 1.00 GiB (the same to 0.01 GiB)" in text
    assert "(3 % less)" in memory_view.measured_markdown(2**30, int(0.97 * 2**30), {})


def test_the_plan_row_of_the_answers_settings_is_the_answer(app):
    """Issue 32 item 6: "What else fits" said "E2B-it · LoRA, bf16 · 22.46 GiB" beside a verdict of 22.17 GiB
    in fp32, and a usable figure read a moment apart. The plan reuses the answer's reading of the device's memory,
    its calibration, and names no number format; its row of the answer's settings shows the answer's figure."""
    values = _page_values(device="cpu", quantization="none")
    outputs = _ask_app(app, 0, values)
    verdict, reading = outputs[1], outputs[-1]
    plan = app.memory.plan(reading, 0, *[values[name] for name in common.CONFIG_FIELDS])
    usable = gib(reading["usable_bytes"])
    assert f"with **{usable}** usable" in plan and f"of **{usable}** usable" in verdict
    own = [line for line in plan.splitlines() if "your settings" in line]
    assert len(own) == 1 and "add-on, full-size model" in own[0]
    peak = verdict.split("needs about **")[1].split("**")[0]
    assert f"| {peak} |" in own[0], (peak, own[0])
    assert "bf16" not in plan and "fp32" not in plan
    moved = dict(reading, free_bytes=reading["free_bytes"] + 2**30, usable_bytes=reading["usable_bytes"] + 2**30)
    assert gib(moved["usable_bytes"]) in app.memory.plan(moved, 0, *[values[name] for name in common.CONFIG_FIELDS]), \
        "the reading given is the one shown, not a new one"


def test_a_reopened_page_shows_one_machine_and_no_markdown_in_a_pop_up(app, monkeypatch):
    """The new-user pass: Mac preset, Estimate, reload: the picker said "This computer" while the restored
    Device was mps, and a red pop-up said "Device: mps … not available" with raw `**`. The reopened page
    restores a device this computer lacks as auto (and that device's default precision as this computer's),
    restores the settings before it re-attaches to a calibration or estimates, and a pop-up shows no Markdown."""
    import app as app_module
    from pipeline.errors import ConfigError
    from ui.common import ui_errors

    monkeypatch.setattr("pipeline.config.likely_device", lambda: "cpu")
    values = _page_values()
    _pick_machine(app, "Mac, 48 GB unified memory", values)
    assert values["device"] == "mps"
    app.page_settings_summary(True, *[values[name] for name in common.CONFIG_FIELDS])
    assert app.saved_settings()["device"] == "mps"
    restored = dict(zip(common.CONFIG_FIELDS, app.restore_settings()))
    assert restored["device"]["value"] == "auto", "the picker shows This computer: the Device must be this computer's"
    assert restored["quantization"] == gr.skip() or restored["quantization"]["value"] == default_quantization("cpu")
    chosen = {**values, "quantization": "8bit"}  # a precision picked by hand stays
    app.remember_settings(common.config_from_values(chosen))
    assert dict(zip(common.CONFIG_FIELDS, app.restore_settings()))["quantization"]["value"] == "8bit"

    @ui_errors
    def fails():
        raise ConfigError("**Device:** `mps` (Memory tab) was asked for but Apple MPS is not available")

    with pytest.raises(gr.Error) as raised:
        fails()
    assert "**" not in raised.value.message and "`" not in raised.value.message
    assert "Device: mps" in raised.value.message

    # Where such settings are refused all the same, the refusal is in the table's place and says no tab it is on.
    plan = app.memory.plan(None, 0, *[{**values, "device": "mps"}[name] for name in common.CONFIG_FIELDS])
    assert plan.startswith("**✗ ") and "Memory tab" not in plan, plan

    # The order on a reopened page: settings, then the calibration's re-attach; the tab's first answer waits for them.
    demo = app_module.build_ui(app)
    fns = list(demo.fns.values())
    names = {fn._id: getattr(fn.fn, "__name__", "") for fn in fns}
    calibration = next(fn for fn in fns if names[fn._id] == "calibration_on_load")
    chain, step = [], calibration
    while step is not None and step.trigger_after is not None:
        step = next(fn for fn in fns if fn._id == step.trigger_after)
        chain.append(names[step._id])
    assert "restore_settings" in chain, f"the calibration re-attaches outside the restore: {chain}"
    before = app.memory.estimate_when_restored(False, THIS_COMPUTER, 0, *[values[n] for n in common.CONFIG_FIELDS])
    assert all(out == gr.skip() for index, out in enumerate(before) if index != 1) and "saved settings" in before[1]


def test_with_no_dataset_the_answer_says_what_length_it_assumes(tmp_path, app):
    """The new-user pass: with no dataset built the answer gave a verdict under "The answer uses your dataset's
    longest recording". It now says the row it assumes (Max tokens per row, a 30-second clip); with a dataset
    built it says nothing of the kind."""
    from tests.studio_app import fresh_app

    values = _page_values(max_length=512)
    bare = fresh_app(tmp_path / "bare")
    answer = bare.memory.estimate_picked("NVIDIA GPU, 8 GB", 8, *[values[n] for n in common.CONFIG_FIELDS])[1]
    assert "**Length assumed:** no dataset is built yet" in answer and "**512**" in answer, answer
    assert answer.index("Length assumed") < answer.index("How sure"), "beside the verdict, before How sure"
    built = app.memory.estimate_picked("NVIDIA GPU, 8 GB", 8, *[values[n] for n in common.CONFIG_FIELDS])[1]
    assert "Length assumed" not in built, built
