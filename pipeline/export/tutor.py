"""Export a tuned tutor so it works outside the app: the adapter as a zip, or a merged model.

- `export_adapter(ws, run)`: `NAME-adapter.zip` holding the run's PEFT adapter (adapter_config.json
  + adapter_model.safetensors), the processor, a README with the loading code and the prompt the
  tutor was trained on, and `export.json` (base model, settings, result). It loads with
  `peft.PeftModel.from_pretrained(base, "NAME-adapter")` on the run's base model.
- `export_merged(ws, run)`: `NAME-merged/`, the LoRA weights merged into a bf16 copy of the base
  (`save_pretrained` + the processor). It loads with plain
  `transformers.AutoModelForImageTextToText.from_pretrained` and needs no peft. The merge is always
  into the bf16 base weights, never into a 4-bit one (peft #2321, FIELD_NOTES): for a run trained
  on a 4-bit NF4 base the result is close to, not bit-identical with, the model it was trained
  with, and the export says so.

Both check the free disk space first and write through `pipeline.export.staging`, so a failed
export leaves nothing half-written. Default output folder: `WS/exports/runs/NAME/`.
"""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path
from typing import Any

from pipeline.errors import ExportError, PipelineError
from pipeline.export.staging import check_free_space, check_replaceable, folder_bytes, staged_file, staged_folder
from pipeline.fileio import atomic_write_json, atomic_write_text
from pipeline.training.run_folder import RUN_FILES, has_adapter
from pipeline.units import format_loss, format_bytes
from pipeline.workspace import Workspace

QUANTIZED_MERGE_NOTE = (
    "The adapter was trained on a {method} quantized base; this merged model folds it into the bf16 base weights, "
    "so its outputs are close to, but not bit-identical with, the {method} model the adapter was trained with."
)


def _ws(workspace) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))


def default_out_dir(workspace, run: str) -> Path:
    """Where exports of `run` go unless `--out` says otherwise: `WS/exports/runs/NAME/`."""
    ws = _ws(workspace)
    ws.run_dir(run)  # checks the name
    return ws.exports_dir / "runs" / run


def read_run(workspace, run: str, *, need_adapter: bool = True) -> dict[str, Any]:
    """The run's folder, settings and result: `{"run", "dir", "settings" (config.json dict),
    "result" (result.json dict or {}), "adapter_dir" (Path or None)}`.

    Raises:
        ExportError: the workspace or the run does not exist, the run has no config.json, or (with
            `need_adapter`) no adapter.
    """
    ws = _ws(workspace)
    run_dir = ws.run_dir(run)
    if not ws.root.is_dir():
        raise ExportError(f"The workspace `{ws.root}` does not exist: give `--workspace` the folder the run was "
                          "trained in (the app's is ~/pronunciation-tutor unless $TUTOR_WORKSPACE says otherwise).")
    if not (run_dir / RUN_FILES["config"]).is_file():
        known = (sorted(p.name for p in ws.runs_dir.iterdir() if (p / RUN_FILES["config"]).is_file())
                 if ws.runs_dir.is_dir() else [])
        raise ExportError(f"Run `{run}` does not exist in {ws.runs_dir} (no config.json); runs here: "
                          f"{', '.join(known) or 'none'}.")
    settings = json.loads((run_dir / RUN_FILES["config"]).read_text(encoding="utf-8"))
    try:
        result = json.loads((run_dir / RUN_FILES["result"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        result = {}
    adapter = run_dir / RUN_FILES["adapter"]
    saved = has_adapter(run_dir)
    if need_adapter and not saved:
        raise ExportError(
            f"Run `{run}` has no adapter yet ({adapter}; status {result.get('status', 'unknown')}): wait for it to "
            "finish or stop it (a stopped run saves its adapter), then export again."
        )
    return {"run": run, "dir": run_dir, "settings": settings, "result": result,
            "adapter_dir": adapter if saved else None}


def _provenance(info: dict, fmt: str) -> dict[str, Any]:
    """The `export.json` written beside every export: what it is and where it came from."""
    from pipeline.conversation.messages import SYSTEM_PROMPT, user_prompt

    result = info["result"]
    return {
        "format": fmt,
        "run": info["run"],
        "base_model": info["settings"].get("model"),
        "exported_at": round(time.time(), 3),
        "settings": info["settings"],
        "status": result.get("status"),
        "steps": result.get("steps"),
        "final_loss": result.get("final_loss"),
        "eval_loss": result.get("eval_loss"),
        "dataset": result.get("dataset"),
        "system_prompt": SYSTEM_PROMPT,
        "user_prompt_example": user_prompt("The cat sat on the mat."),
        "conversation": "system prompt (Gemma 3n's chat template folds it into the user turn; Gemma 4's gives it a turn "
                        "of its own), then one user turn with the 16 kHz mono audio followed by the user prompt; the "
                        "answer is the model turn",
    }


def _readme(info: dict, fmt: str, folder_name: str, notes: list[str]) -> str:
    base = info["settings"].get("model")
    prov = _provenance(info, fmt)
    if fmt == "adapter":
        load = (
            "import torch\n"
            "from peft import PeftModel\n"
            "from transformers import AutoModelForImageTextToText, AutoProcessor\n\n"
            f'base = AutoModelForImageTextToText.from_pretrained("{base}", dtype=torch.bfloat16)\n'
            f'model = PeftModel.from_pretrained(base, "{folder_name}")\n'
            f'processor = AutoProcessor.from_pretrained("{folder_name}")\n'
        )
        what = f"The LoRA adapter of run `{info['run']}`, trained on `{base}` (unzip it first)."
    else:
        load = (
            "import torch\n"
            "from transformers import AutoModelForImageTextToText, AutoProcessor\n\n"
            f'model = AutoModelForImageTextToText.from_pretrained("{folder_name}", dtype=torch.bfloat16)\n'
            f'processor = AutoProcessor.from_pretrained("{folder_name}")\n'
        )
        what = f"`{base}` with the LoRA adapter of run `{info['run']}` merged into its bf16 weights (no peft needed)."
    lines = [
        f"# Pronunciation tutor `{info['run']}` ({fmt})", "", what, "",
        f"Trained {prov['steps']} steps (status {prov['status']}, final loss {format_loss(prov['final_loss'])}) with Pronunciation "
        "Tutor Studio; every setting is in `export.json`.", "",
        "## Load it", "", "```python", load.rstrip(), "```", "",
        "## Ask it", "",
        "The tutor was trained on one conversation shape: a system prompt, then a user turn holding the clip (16 kHz "
        "mono float32 in [-1, 1]) followed by the sentence the learner was asked to read. Build it the same way:", "",
        "```python",
        "messages = [",
        '    {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},',
        '    {"role": "user", "content": [{"type": "audio", "audio": samples},',
        f'                              {{"type": "text", "text": {prov["user_prompt_example"]!r}}}]}},',
        "]",
        "inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,",
        '                                       return_dict=True, return_tensors="pt")',
        "answer = model.generate(**inputs, max_new_tokens=256, do_sample=False)",
        "```", "",
        "`SYSTEM_PROMPT` is `export.json`'s `system_prompt`:", "", "```text", prov["system_prompt"], "```",
    ]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def export_adapter(workspace, run: str, out_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Zip the run's adapter + processor + README + export.json into `OUT/NAME-adapter.zip`.

    The zip holds one folder `NAME-adapter/`; unzipped, `PeftModel.from_pretrained(base, folder)`
    loads it. Returns `{"format": "adapter", "run", "path", "bytes", "base_model", "notes"}`.

    Raises:
        ExportError: no such run, no adapter yet, or not enough free disk for the zip.
    """
    info = read_run(workspace, run)
    out = Path(out_dir) if out_dir is not None else default_out_dir(workspace, run)
    target = out / f"{run}-adapter.zip"
    check_free_space(out, folder_bytes(info["adapter_dir"]) + 1_000_000, f"the adapter zip of run `{run}`")
    notes = []
    if info["settings"].get("quantization") in ("4bit", "8bit"):
        notes.append(f"Trained on a {info['settings']['quantization']} quantized base: load the base the same way "
                     "(BitsAndBytesConfig) for exactly the model the adapter was trained with; a bf16 base gives close, "
                     "not identical, answers.")
    folder = f"{run}-adapter"
    with staged_file(target) as staging:
        with zipfile.ZipFile(staging, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for file in sorted(p for p in info["adapter_dir"].rglob("*") if p.is_file() and p.name != "README.md"):
                archive.write(file, f"{folder}/{file.relative_to(info['adapter_dir']).as_posix()}")
            archive.writestr(f"{folder}/README.md", _readme(info, "adapter", folder, notes))  # replaces peft's model card
            archive.writestr(f"{folder}/export.json", json.dumps(_provenance(info, "adapter"), indent=2, ensure_ascii=False))
    return {"format": "adapter", "run": run, "path": str(target), "bytes": target.stat().st_size,
            "base_model": info["settings"].get("model"), "notes": notes}


def merged_size_bytes(model_id: str) -> int:
    """Bytes of `model_id`'s weights in bf16 (2 bytes per parameter, from its config alone:
    `pipeline.model.catalog.part_params`): what the merged export writes, before loading anything."""
    from pipeline.model.catalog import load_model_config, model_shape, part_params

    return 2 * sum(part.total for part in part_params(model_shape(load_model_config(model_id))).values())


def export_preview(workspace, run: str) -> dict[str, Any]:
    """What `run`'s exports would be, said before one is made (nothing loaded; the app's export choices read it
    so that they give this run's sizes and offer only what it can have):
    `{"base_model": the run's base (hub id or folder), "family": its family's label ("Gemma 4"), "merged_bytes":
    the merged model's bytes in bf16 (`merged_size_bytes` of the run's own base: a tiny test model's are a few
    MB, E2B's ~11 GB), "gguf": whether a GGUF of it hears (`ModelFamily.gguf_audio`: Gemma 4 yes, Gemma 3n no,
    `pipeline.export.gguf.GEMMA3N_DEAF`)}`. `merged_bytes`, `family` are None and `gguf` False when the base's
    config cannot be read (a folder moved away).

    Raises:
        ExportError: no such run (`read_run`; a run without an adapter yet is previewed all the same).
    """
    from pipeline.model.base_identity import run_base_model
    from pipeline.model.catalog import family_for

    info = read_run(workspace, run, need_adapter=False)
    try:
        base = run_base_model(info["dir"], run)
    except PipelineError:
        base = info["settings"].get("model")
        return {"base_model": base, "family": None, "merged_bytes": None, "gguf": False}
    try:
        family = family_for(base)
        merged = merged_size_bytes(base)
    except (PipelineError, OSError, ValueError):
        return {"base_model": base, "family": None, "merged_bytes": None, "gguf": False}
    return {"base_model": base, "family": family.label, "merged_bytes": merged, "gguf": bool(family.gguf_audio)}


def merged_tutor(workspace, run: str, *, device: str = "cpu", model: str | None = None, dtype: str = "bfloat16",
                 out_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """The run's LoRA merged into an unquantized copy of its base, in memory: what the merged and the GGUF
    exports save. Never into a 4-bit base (peft #2321): the base is loaded unquantized in `dtype`.

    Args:
        device: where the merge runs (see `export_merged`).
        model: the run's base where it is now (see `export_merged`).
        dtype: "bfloat16" (the merged export) or "float32" (a GGUF export checked against transformers).
        out_dir: the folder the export goes to, whose free disk is checked from the config first.

    Returns:
        `{"info" (`read_run`), "base_id", "model" (merged, no peft), "processor", "notes", "exact_bytes"}`.

    Raises:
        ExportError, ModelLoadError, BaseModelMismatchError: as `export_merged`.
    """
    import torch

    from pipeline.model.base_identity import run_base_model
    from pipeline.model.loading import load_adapter, load_model, load_processor

    info = read_run(workspace, run)
    base_id = run_base_model(info["dir"], run, model)
    out = Path(out_dir) if out_dir is not None else default_out_dir(workspace, run)
    check_free_space(out, merged_size_bytes(base_id), f"the merged model of run `{run}` (bf16)")
    notes = []
    method = info["settings"].get("quantization")
    if method in ("4bit", "8bit"):
        notes.append(QUANTIZED_MERGE_NOTE.format(method=method))
    processor = load_processor(base_id)
    base, _ = load_model(base_id, device=device, quantization="none", vision_tower=True)
    torch_dtype = torch.float32 if dtype == "float32" else torch.bfloat16
    if base.dtype != torch_dtype:
        base = base.to(torch_dtype)
    merged = load_adapter(base, info["adapter_dir"], model_id=base_id).merge_and_unload()
    seen, exact = set(), 0
    for tensor in merged.state_dict().values():
        if tensor.data_ptr() not in seen:  # tied weights (lm_head = token embedding) are saved once
            seen.add(tensor.data_ptr())
            exact += tensor.numel() * tensor.element_size()
    return {"info": info, "base_id": base_id, "model": merged, "processor": processor, "notes": notes,
            "exact_bytes": exact}


def export_merged(workspace, run: str, out_dir: str | os.PathLike | None = None, *, device: str = "cpu",
                  model: str | None = None) -> dict[str, Any]:
    """Merge the run's LoRA into a bf16 copy of its base and save it (`save_pretrained`) with the
    processor, README and export.json into `OUT/NAME-merged/`.

    Args:
        device: where the merge runs ("cpu" by default: it needs the bf16 model in memory, ~10 GiB
            for E2B; "cuda" / "mps" / "auto" if that memory is there).
        model: the run's base where it is now (default: the run's config.json); any path or hub id
            holding the same base is accepted, another base refused (`load_adapter` compares identities).

    Returns:
        `{"format": "merged", "run", "path", "bytes", "base_model", "dtype": "bfloat16", "notes"}`.

    Raises:
        ExportError: no such run or adapter, or not enough free disk (checked from the config before
            loading, and again with the exact size before writing).
        ModelLoadError: the base model cannot be loaded, or its folder moved and no `model` was given.
        BaseModelMismatchError: `model` holds another base than the run was trained on.
    """
    out = Path(out_dir) if out_dir is not None else default_out_dir(workspace, run)
    target = out / f"{run}-merged"
    replaced = check_replaceable(target, "export.json")  # before the merge, which takes minutes
    done = merged_tutor(workspace, run, device=device, model=model, out_dir=out)
    info, notes, exact = done["info"], done["notes"] + ([replaced] if replaced else []), done["exact_bytes"]
    check_free_space(out, exact, f"the merged model of run `{run}` ({format_bytes(exact)} in bf16)")
    with staged_folder(target) as staging:
        done["model"].save_pretrained(str(staging))
        done["processor"].save_pretrained(str(staging))
        atomic_write_text(staging / "README.md", _readme(info, "merged", target.name, notes))
        atomic_write_json(staging / "export.json", dict(_provenance(info, "merged"), notes=notes, dtype="bfloat16"))
    return {"format": "merged", "run": run, "path": str(target), "bytes": folder_bytes(target),
            "base_model": done["base_id"], "dtype": "bfloat16", "notes": notes}
