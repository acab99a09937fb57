"""One estimate for a workspace, as data and as text: `estimate_for_workspace` gives the dict that
`python -m pipeline estimate --json` prints and the app shows (so the two cannot drift), `render`
its human summary.
"""

from __future__ import annotations


from pipeline.calibration.fit import uncalibrated_percent
from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.memory.budget import auto_device, device_memory, verdict
from pipeline.memory.inputs import EstimateOptions, length_stats_from_workspace
from pipeline.memory.phases import estimate_memory
from pipeline.memory.search import SUGGESTION_LIMIT, suggest_fits
from pipeline.model.catalog import load_model_config
from pipeline.units import format_bytes, format_gib, gib_difference, plural


PER_PROCESS_NOTE = ("The estimate is per training process: with several GPUs (torchrun / accelerate launch, one process "
                    "per GPU) every GPU needs all of it, plus DDP's gradient buckets (about the LoRA gradients, {grads}).")
"""Multi-GPU training (DDP) gives every process a whole copy of the model and its own micro-batch."""


def estimate_for_workspace(
    workspace,
    config: TrainConfig,
    *,
    memory_gb: float | None = None,
    measure: bool = False,
    limit: int = SUGGESTION_LIMIT,
    attn: str | None = None,
    progress=None,
) -> dict:
    """The whole estimate for `config` on the dataset built in `workspace` (a path or `Workspace`):
    the dict `python -m pipeline estimate --json` prints and the app shows, so the two cannot drift.

    Keys: `model`, `device`, `components` (name to bytes, every term), `components_at_peak` (the
    terms alive at the whole run's peak, which add up to `total_bytes`), `phases` (the moments of a
    step, and `load`), `peak_phase` (the step's largest moment), `run_phases` (load, preflight,
    step, eval, save, resume: each phase's peak, runtime overhead included), `run_peak_phase` (the
    phase that sets the peak), `step_bytes` (a training step's peak), `total_bytes` (the whole
    run's peak), `usable_bytes`, `device_memory`, `verdict`,
    `margin_bytes`, `margin_percent`, `seq_len`, `answer_tokens`, `max_length`, `lengths_source`,
    `excluded_rows`, `options`, `notes` (the last says the figure is per training process),
    `per_process` (True: the bytes one process, one GPU under DDP, needs), `suggestions` (at most `limit`, each with `changes`,
    `total_bytes`, `verdict`, `cost`, `score`; none when it fits, only ones that fit when it is
    tight), `measured` (None unless `measure`: `measure_peak`'s dict for these settings plus
    `error_percent`), `calibration` (None, or `pipeline.calibration.calibration_summary`: date,
    device_key, n_measurements, ...: this machine's calibration, which the figures use),
    `calibration_text` (the sentence: "calibrated on this machine on DATE (N measurements)" or "not
    calibrated: the device's share is assumed, expect up to ±N %"), `uncertainty_percent` (that N, or
    the calibrated fit's largest error, rounded up to at least 1; how far the figure may be off),
    `this_machine` (True: the estimate is about this computer, calibrated when it is), `compute_dtype`
    (bfloat16 | float32, what the device runs) and `compute_dtype_reason` (why, in words). Every
    suggestion is priced with the same calibration as the verdict.
    `measure` calibrates this machine first (`pipeline.memory.calibrate.calibrate`: the stand-in, ~2.4
    minutes of CPU time) and then measures these settings' step (added to the calibration);
    `progress` hears its parts and phases (`calibrate`'s `progress`, with `index` and `of` counted over
    both calls).
    With `memory_gb` (another machine's budget) this machine's calibration is not applied.
    `memory_gb` is GiB (see `device_memory`); `attn` overrides the training code's attention.
    `config.device` "auto" picks cuda, then mps, then cpu; an explicit device is estimated as
    asked (with `memory_gb`, even one this machine lacks). Raises `ConfigError` / `DatasetError`
    / `TrainingError` as the functions it calls do.
    """
    from pipeline.calibration.this_machine import load_calibration  # noqa: PLC0415
    from pipeline.workspace import Workspace  # noqa: PLC0415

    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    device, model_config, lengths, options = _read_inputs(ws, config, measure=measure, attn=attn)
    measured = _calibrate_and_measure(ws, device, config, lengths, progress) if measure else None
    this_machine = not memory_gb  # another machine's budget (--memory-gb) gets no calibration of this one
    calibration = load_calibration(device) if this_machine else None
    est = _estimate(model_config, config, lengths, device, options, calibration)
    mem = device_memory(device, memory_gb)
    v = verdict(est.total_bytes, mem.usable_bytes)
    suggestions = [] if v.status == "fits" else suggest_fits(
        model_config, config, lengths, device, mem.usable_bytes, options,
        accept_tight=v.status == "does not fit", limit=limit, calibration=calibration)
    if measured is not None:
        # the probe measures one optimizer step: compare it with the step's estimate (like with like)
        measured["error_percent"] = round(100.0 * est.step_bytes / measured["peak_bytes"] - 100.0, 1)
    return {
        "model": config.model,
        "device": device,
        "components": est.components,
        "components_at_peak": {name: est.components[name] for name in est.run_members[est.run_peak_phase]},
        "phases": est.phases,
        "peak_phase": est.peak_phase,
        "run_phases": est.run_phases,
        "run_peak_phase": est.run_peak_phase,
        "step_bytes": est.step_bytes,
        "total_bytes": est.total_bytes,
        "usable_bytes": mem.usable_bytes,
        "device_memory": mem.to_dict(),
        "verdict": v.status,
        "margin_bytes": v.margin_bytes,
        "margin_percent": v.margin_percent,
        "seq_len": est.seq_len,
        "answer_tokens": est.answer_tokens,
        "clips_per_row": lengths.kept_max_clips(config.max_length),
        "max_length": config.max_length,
        "settings": config.to_dict(),
        "lengths_source": lengths.source,
        "dataset_built": bool(lengths.row_tokens),  # False: rows of max_length tokens and 30 s clips are assumed
        "excluded_rows": lengths.excluded(config.max_length),
        "options": est.options,
        "notes": est.notes,
        "suggestions": [s.to_dict() for s in suggestions],
        "measured": measured,
        "per_process": True,
        **_machine_fields(ws, est, calibration, this_machine),
    }


def _read_inputs(ws, config: TrainConfig, *, measure: bool, attn: str | None):
    """The estimate's inputs: `(device, model_config, lengths, options)`: the device ("auto" resolved), the
    model's `config.json`, the built dataset's row lengths (`length_stats_from_workspace`) and the
    training code's options (`attn` overriding its attention).

    Raises:
        ConfigError: `config.max_length` excludes every row, or `measure` with a full fine-tune (the probe
            trains LoRA only); the message says what to change.
    """
    device = auto_device() if config.device == "auto" else config.device
    model_config = load_model_config(config.model)
    lengths = length_stats_from_workspace(ws, config.max_length)
    options = EstimateOptions()  # its defaults are the training code's (eager attention, fp32 LoRA, ...)
    if attn:
        options.attn_implementation = attn
    if lengths.row_tokens and lengths.excluded(config.max_length) >= lengths.num_rows:
        raise ConfigError(
            f"`--max-length {config.max_length}` excludes every row of the dataset (the shortest has "
            f"{min(lengths.row_tokens)} tokens, the longest {max(lengths.row_tokens)}); nothing would be trained. "
            f"Raise --max-length to at least {min(lengths.row_tokens)}.")
    if measure and config.finetuning_type != "lora":
        raise ConfigError("`--measure` runs one step of the training code, which fine-tunes LoRA adapters only; "
                          "a full fine-tune can be estimated (drop --measure), not measured here.")
    return device, model_config, lengths, options


def _estimate(model_config: dict, config: TrainConfig, lengths, device: str, options, calibration):
    """`estimate_memory` for these inputs, with the notes a workspace adds: row lengths counted with another
    model's tokenizer, and that the figure is per training process (`PER_PROCESS_NOTE`)."""
    est = estimate_memory(model_config, config, lengths, device, options, calibration=calibration)
    if lengths.tokenizer_model and lengths.tokenizer_model != config.model:
        est.notes.append(f"row lengths were counted with {lengths.tokenizer_model}'s tokenizer, not {config.model}'s; rebuild the "
                         "dataset with this model for exact lengths (Gemma 3n checkpoints share one tokenizer).")
    est.notes.append(PER_PROCESS_NOTE.format(grads=format_bytes(est.components.get("lora_grads", 0))))
    return est


def _machine_fields(ws, est, calibration, this_machine: bool) -> dict:
    """The estimate's keys about the machine: `calibration` (its summary with the places it was read from),
    `calibration_text`, `uncertainty_percent` (the calibrated fit's largest error, else the uncalibrated
    share's), `this_machine`, `compute_dtype` and `compute_dtype_reason` (`compute_dtype_for(est.device)`)."""
    from pipeline.calibration.this_machine import calibration_summary, calibration_text  # noqa: PLC0415
    from pipeline.calibration.this_machine import compute_dtype_for  # noqa: PLC0415

    peak_members = est.run_members[est.run_peak_phase]
    uncertainty = (calibration.within_percent() if calibration is not None
                   else uncalibrated_percent(est.components, peak_members, est.total_bytes, est.device))
    dtype, dtype_reason = compute_dtype_for(est.device)
    return {
        "calibration": _with_places(calibration_summary(calibration), calibration, ws),
        "calibration_text": calibration_text(calibration, est.components, peak_members, est.total_bytes, est.device),
        "uncertainty_percent": uncertainty,
        "this_machine": this_machine,
        "compute_dtype": dtype,
        "compute_dtype_reason": dtype_reason,
    }


def _calibrate_and_measure(ws, device: str, config: TrainConfig, lengths, progress) -> dict:
    """Calibrate this machine (`pipeline.memory.calibrate.calibrate`: the precision check and the stand-in's
    probes), then measure these settings' step as more evidence (the workspace's worst-case batch when its
    dataset is built, else a synthetic one of `lengths`); returns that probe's dict. `progress` hears both
    calls' parts, counted as one calibration of 1 + `CALIBRATION_PROBES` + 1 parts. Holds the calibration lock
    (`pipeline.memory.calibrate.hold_calibration`): raises `TrainingError` while another process calibrates."""
    from pipeline.memory.calibrate import CALIBRATION_PROBES, calibrate, hold_calibration  # noqa: PLC0415

    built = (ws.dataset_dir / "build_report.json").exists()
    parts = 1 + len(CALIBRATION_PROBES) + 1  # the precision check, the stand-in's probes, yours

    def counted(offset: int):
        return None if progress is None else (lambda step: progress(dict(step, index=step["index"] + offset, of=parts)))

    with hold_calibration():  # one calibration at a time on this computer (TrainingError when one runs)
        calibrate(device, progress=counted(0), asked_from=ws.root)
        done = calibrate(device, model=config.model, workspace=ws.root if built else None, config=config,
                         speed_check=False, lengths=lengths, progress=counted(parts - 1), asked_from=ws.root)
    return dict(done["probes"][0]["measured"])


def _with_places(summary: dict | None, calibration, ws) -> dict | None:
    """The calibration summary with where its evidence was measured, seen from `ws` (`places`:
    `pipeline.calibration.this_machine.evidence_places` of `calibration.folders`): the calibration is this
    computer's, and a teacher is told when some of it comes from another project folder."""
    if summary is None:
        return None
    from pipeline.calibration.this_machine import evidence_places  # noqa: PLC0415

    return {**summary, "places": evidence_places(getattr(calibration, "folders", None) or [], ws)}


def render(result: dict) -> str:
    """Human summary of an `estimate_for_workspace` result dict (what `python -m pipeline estimate` prints)."""
    lines = [f"Memory estimate: {result['model']} on {result['device']} "
             f"(micro-batch padded to {result['seq_len']} tokens, {plural(result.get('clips_per_row', 1), 'clip')} per row through the audio "
             f"encoder, logits for {result.get('answer_tokens', 0)} answer tokens per row; "
             f"lengths from {result['lengths_source']})"]
    if result.get("settings"):
        st = result["settings"]
        lines.append(f"Settings: quantization {st['quantization']}, LoRA r={st['lora_rank']}, batch {st['batch_size']}, "
                     f"checkpointing {'on' if st['gradient_checkpointing'] else 'off'}, optimizer {st['optimizer']}, "
                     f"max length {st['max_length']}, vision tower {'on' if st['vision_tower'] else 'off'}"
                     + (", per-layer embeddings in host RAM" if st.get("ple_on_cpu") else "")
                     + (", audio encoder quantized" if st.get("quantize_audio_encoder") else "")
                     + (", FULL fine-tune (estimated only)" if st.get("finetuning_type") == "full" else "") + ".")
    if result.get("excluded_rows"):
        lines.append(f"  {plural(result['excluded_rows'], 'row')} longer than --max-length {result['max_length']} {'is' if result['excluded_rows'] == 1 else 'are'} excluded "
                     "(train skips them; `build --max-length` drops them from the dataset).")
    at_peak = result.get("components_at_peak") or {}
    for name, value in result["components"].items():
        if not value:
            continue
        lines.append(f"  {name:<28} {format_bytes(value):>12}{'' if name in at_peak else '   (not at the peak)'}")
    mem = result["device_memory"]
    run = result.get("run_phases") or {}
    if run:
        lines.append("  phases of the run: " + ", ".join(f"{p} {format_bytes(v)}" for p, v in run.items() if v))
    peak = result.get("run_peak_phase") or result["peak_phase"]
    lines.append(f"  {'peak of the run (' + peak + ')':<28} {format_bytes(result['total_bytes']):>12}")
    lines.append(f"Device: {format_bytes(mem['total_bytes'])} total, {format_bytes(mem['free_bytes'])} free "
                 f"({mem['source']}); usable {format_bytes(mem['usable_bytes'])}: "
                 f"{format_bytes(mem['free_bytes'] - mem['usable_bytes'])} held back ({mem['headroom_note']}).")
    lines.append(f"Verdict: {result['verdict']} (margin {format_bytes(result['margin_bytes'])}, {result['margin_percent']:.1f} %).")
    for note in result["notes"]:
        lines.append(f"  note: {note}")
    if result["suggestions"]:
        lines.append("To make it fit:" if result["verdict"] == "does not fit" else "To leave more room:")
        for s in result["suggestions"]:
            lines.append(f"  - {format_bytes(s['total_bytes'])} ({s['verdict']}):")
            for step in s.get("steps") or [{"changes": s["changes"], "what": "", "cost": s["cost"]}]:
                flags = " ".join(_flag(k, v) for k, v in step["changes"].items())
                lines.append(f"      {step['what'] or flags} [{flags}]; cost: {step['cost']}")
    elif result["verdict"] == "tight":
        lines.append("It fits, tightly: under 10 % to spare, so it should fit; no change found that leaves more room.")
    elif result["verdict"] != "fits":
        lines.append("No combination of settings fits this device; use a machine with more memory.")
    if result.get("calibration_text"):
        lines.append(f"Device terms: {result['calibration_text']}.")
    if result.get("compute_dtype"):
        lines.append(f"Precision: {result['compute_dtype']} ({result.get('compute_dtype_reason', '')}).")
    if result.get("measured"):
        m = result["measured"]
        estimated = result.get("step_bytes") or result["total_bytes"]
        lines.append(f"Measured ({m.get('method', '')}; {m.get('mode', '')}): step peak {format_gib(m['peak_bytes'])} "
                     f"vs the step's estimate {format_gib(estimated)} (the estimate: {gib_difference(estimated, m['peak_bytes'])}).")
    return "\n".join(lines)


def _flag(name: str, value) -> str:
    """A setting as its command-line flag: `--quantization 4bit`, `--no-vision-tower`, `--ple-on-cpu`."""
    flag = name.replace("_", "-")
    if value is True:
        return f"--{flag}"
    if value is False:
        return f"--no-{flag}"
    return f"--{flag} {value}"
