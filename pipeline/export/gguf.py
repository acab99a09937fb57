"""`export --format gguf`: the tuned tutor for llama.cpp and Ollama, with its ears.

`export_gguf(ws, run, quant=...)` writes `OUT/NAME-gguf/`:
- `NAME.gguf`: the run's LoRA merged into an unquantized copy of its base (`pipeline.export.tutor.merged_tutor`:
  bf16, or fp32 for `--quant f32`; never a 4-bit base), converted by llama.cpp's own
  `convert_hf_to_gguf.py` (`pipeline.export.llama_cpp`; no tensor mapping of ours) to `--quant`;
  `q4_k_m` converts to f16 and then runs llama.cpp's `llama-quantize`.
- `mmproj-NAME.gguf`: the audio (and vision) projector, the converter's `--mmproj`, kept in BF16 (F32 with
  `--quant f32`): quantized projectors degrade audio (FIELD_NOTES "Gemma 4 E2B and llama.cpp").
- `Modelfile`: Ollama's recipe: both files, the tutor's chat template and system prompt, greedy decoding.
- `README.md`: the `llama-mtmd-cli`, `llama-server` and `ollama create` commands, and the prompt it was
  trained on; `system_prompt.txt` (for `-sys`); `export.json` (where it came from).

Only a family whose audio llama.cpp runs gets this (`ModelFamily.gguf_audio`: Gemma 4). A Gemma 3n run is
refused with the reason (llama.cpp's `tools/mtmd/clip.cpp` skips Gemma 3n's audio, so its GGUF would be deaf);
its text-only GGUF is written only when asked for by name (`text_only=True`, `--format gguf-text-only`), and
then holds no projector.

The folder is written through `pipeline.export.staging` (whole or not at all); the merged transformers
folder the converter reads lives in a temporary folder beside it and is removed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from pipeline.errors import ExportError
from pipeline.export import llama_cpp
from pipeline.export.staging import check_free_space, check_replaceable, folder_bytes, staged_folder
from pipeline.export.tutor import _provenance, default_out_dir, merged_size_bytes, merged_tutor, read_run
from pipeline.fileio import atomic_write_json, atomic_write_text, recover_staging, staging_prefix
from pipeline.tutor.infer import DEFAULT_MAX_NEW_TOKENS  # the tutor's longest answer: Ollama's num_predict
from pipeline.units import format_bytes

QUANTS = ("q8_0", "q5_k_m", "q4_k_m", "f16", "bf16", "f32")
"""`--quant` values: llama.cpp's weight types of the language model. q8_0 (the default) keeps answers
close to the unquantized model at about half the size of bf16; q5_k_m and q4_k_m are smaller (q4_k_m
smallest, and reported to make Gemma 4's audio repeat itself on long clips: `LONG_CLIP_S`); f16/bf16/f32
are unquantized (f32: the merge is done in fp32 too, for comparing with transformers). The audio
projector stays BF16 whatever the choice (F32 with f32)."""

OFFERED_QUANTS = ("q8_0", "q5_k_m", "q4_k_m", "f16")
"""What the app offers (the CLI takes every one of `QUANTS`)."""

BITS_PER_WEIGHT = {"q8_0": 8.5, "q5_k_m": 5.8, "q4_k_m": 4.9, "f16": 16.0, "bf16": 16.0, "f32": 32.0}
"""Bits per weight of each type, for the expected size: ggml's block sizes (Q8_0 34 bytes per 32 weights = 8.5;
Q5_K 176 per 256 = 5.5; Q4_K 144 per 256 = 4.5), the _M mixes rounded up for the tensors they keep at Q6_K
(6.56); an estimate, not measured on E2B here."""

QUANTIZED_BY_LLAMA_QUANTIZE = ("q5_k_m", "q4_k_m")
"""Types the converter cannot write: converted to f16, then `llama-quantize`."""

LONG_CLIP_S = 15.0
"""A `q4_k_m` export of a dataset with a clip longer than this warns and suggests `q5_k_m`: llama.cpp's Gemma 4
audio is reported to repeat itself at q4_k_m on clips longer than about 17 s (not measured here)."""


def expected_gguf_bytes(merged_bytes: int | float, quant: str) -> int:
    """About how big `NAME.gguf` + its projector will be for a merged model of `merged_bytes` in bf16:
    every weight at `BITS_PER_WEIGHT[quant]` (the BF16 projector is counted at that rate too, so a low estimate
    for the smaller types). Raises `ExportError` for an unknown `quant`."""
    if quant not in BITS_PER_WEIGHT:
        raise ExportError(f"`--quant` must be one of {', '.join(QUANTS)}, got {quant!r}.")
    return int(merged_bytes * BITS_PER_WEIGHT[quant] / 16)


def long_clip_warning(workspace, quant: str) -> str | None:
    """The warning a `q4_k_m` export gets when the built dataset holds a clip over `LONG_CLIP_S` (its build
    report's longest train and test clips); None otherwise, or when no dataset is built."""
    if quant != "q4_k_m":
        return None
    from pipeline.data.dataset import load_build_report
    from pipeline.errors import DatasetError

    try:
        stats = load_build_report(workspace).get("length_stats") or {}
    except (DatasetError, OSError, ValueError):
        return None
    longest = max(float(stats.get("max_clip_s") or 0), float(stats.get("eval_max_clip_s") or 0))
    if longest <= LONG_CLIP_S:
        return None
    return (f"Your recordings go up to {longest:.1f} s: llama.cpp's Gemma 4 audio is reported to repeat itself at "
            f"q4_k_m on clips longer than about 17 s. Export with `--quant q5_k_m` instead (a little bigger).")

DEFAULT_QUANT = "q8_0"

TEXT_ONLY = "text only: this file cannot hear"
"""How a GGUF without its audio projector (Gemma 3n's only GGUF, `--format gguf-text-only`) is named wherever it
is offered or listed: the app's export choices and result, the CLI's summary, its README."""

STOP_TOKEN = "<turn|>"
"""Where Gemma 4's answer ends (its chat template's turn end); Ollama's `PARAMETER stop`."""

GEMMA3N_DEAF = (
    "Run `{run}` is a Gemma 3n tutor: llama.cpp and Ollama cannot run Gemma 3n's audio today (llama.cpp's "
    "tools/mtmd/clip.cpp skips it: \"we don't support audio for Gemma 3N\"), so its GGUF would not hear the "
    "learner. Keep it in the studio or behind `python -m pipeline serve`, export it `--format merged` for "
    "transformers, or train the tutor on google/gemma-4-E2B-it, whose GGUF hears. A text-only GGUF (no audio "
    "at all) is written only when you ask for it by name: `--format gguf-text-only`."
)


def vocab_files(base: str, family) -> dict[str, Path]:
    """Where the base `base` keeps the files llama.cpp's converter reads for the vocabulary and `save_pretrained`
    does not write (`ModelFamily.gguf_vocab_files`: Gemma 3n's `tokenizer.model`, without which the converter
    refuses its tokenizer), by name. The export asks before its long merge, so a missing file fails at once.

    Raises:
        ExportError: the base has no such file here (named, with how to get it)."""
    from pipeline.model.hub import model_file

    found = {}
    for name in family.gguf_vocab_files:
        source = model_file(base, name)
        if source is None:
            from pipeline.model.tiny_model import STAND_IN_MAKER, is_tiny_random_model

            fix = (f"Make the stand-in again ({STAND_IN_MAKER}; stand-ins made before this version lack it)"
                   if is_tiny_random_model(base) else
                   f"Download the base again (**Get model**, or `python -m pipeline get-model --model {base}`) so "
                   f"that its folder holds `{name}`")
            raise ExportError(f"llama.cpp's converter reads {family.label}'s vocabulary from `{name}`, and the base "
                              f"model `{base}` has no `{name}` on this computer. {fix}, then export again.")
        found[name] = source
    return found


PLACEHOLDER_FILE = "model-llama-cpp-placeholders.safetensors"
"""Where `add_placeholder_tensors` writes (a name llama.cpp's converter takes as a model part: `model*.safetensors`)."""


def add_placeholder_tensors(merged_dir: Path, family) -> list[str]:
    """Add to the saved model in `merged_dir` the tensors llama.cpp's loader requires that it lacks
    (`ModelFamily.gguf_placeholder_tensors`, zeros in the model's dtype: llama.cpp never reads them), as
    `PLACEHOLDER_FILE`, listed in `model.safetensors.index.json` when the model is sharded. Returns their names."""
    if family.gguf_placeholder_tensors is None:
        return []
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    index_path = merged_dir / "model.safetensors.index.json"
    index = json.loads(index_path.read_text(encoding="utf-8")) if index_path.is_file() else None
    parts = sorted(set(index["weight_map"].values())) if index else ["model.safetensors"]
    saved, dtype = set(), torch.float32
    for part in parts:
        with safe_open(str(merged_dir / part), "pt") as tensors:
            names = list(tensors.keys())
            saved.update(names)
            if names:
                dtype = tensors.get_slice(names[0]).get_dtype()
    dtype = {"BF16": torch.bfloat16, "F16": torch.float16}.get(str(dtype), torch.float32)
    config = json.loads((merged_dir / "config.json").read_text(encoding="utf-8"))
    missing = {name: torch.zeros(shape, dtype=dtype) for name, shape in family.gguf_placeholder_tensors(config).items()
               if name not in saved}
    if not missing:
        return []
    save_file(missing, str(merged_dir / PLACEHOLDER_FILE), metadata={"format": "pt"})
    if index is not None:
        index["weight_map"].update(dict.fromkeys(missing, PLACEHOLDER_FILE))
        atomic_write_json(index_path, index)
    return sorted(missing)


def _ready_for_converter(merged_dir: Path, family, vocab: dict[str, Path]) -> None:
    """What llama.cpp's converter needs of a saved model beyond `save_pretrained`: the special tokens it types
    (`keep_special_tokens`), the base's vocabulary files (`vocab`, from `vocab_files`) and the tensors its loader
    requires (`add_placeholder_tensors`)."""
    keep_special_tokens(merged_dir)
    for name, source in vocab.items():
        shutil.copyfile(source, merged_dir / name)
    add_placeholder_tensors(merged_dir, family)


def llama_cpp_load_warning(base: str, family) -> str | None:
    """A warning when llama.cpp will not load the GGUF of base `base` (`ModelFamily.gguf_misfit` on its
    config.json, read where the base is a folder: the small tiny Gemma 3n stand-in), with what to do for a
    stand-in; None where it loads or nothing says otherwise."""
    from pipeline.model.tiny_model import is_tiny_random_model

    config_path = Path(base).expanduser() / "config.json"
    if family.gguf_misfit is None or not config_path.is_file():
        return None
    why = family.gguf_misfit(json.loads(config_path.read_text(encoding="utf-8")))
    if why is None:
        return None
    return (f"llama.cpp will not load this GGUF: {why} (\"per_layer_token_embd.weight has wrong shape\"). The file is "
            "written all the same." + (" For a stand-in whose GGUF loads in llama.cpp, make it with `python -m pipeline "
                                       "make-tiny-model DIR --llama-cpp-shapes` and train on that." if is_tiny_random_model(base) else ""))


def _say(progress: Callable[[str], None] | None) -> Callable[[str], None]:
    return progress or (lambda _: None)


def modelfile(run: str, system_prompt: str, *, projector: bool = True, asked_with: str = "<|channel>thought\n<channel|>",
              num_ctx: int = 4096, turn_start: str = "<|turn>", turn_end: str = STOP_TOKEN,
              system_turn: bool = True) -> str:
    """Ollama's Modelfile for the exported tutor: `FROM` the model (and its projector), the family's chat
    turns as a Go template (Gemma 4's by default), the tutor's system prompt, and the tutor's own decoding:
    greedy (`temperature 0`, as `pipeline.tutor.infer` answers), at most `DEFAULT_MAX_NEW_TOKENS` tokens,
    stopping at the turn's end (`turn_end`), in a context of `num_ctx` tokens (the run's `--max-length` + the
    answer).

    The template renders what the tutor was trained on and is asked with (the rule of
    `pipeline.model.tokens.training_text`): a system turn (`system_turn`; Gemma 3n's template has none and
    folds the system prompt into the first user turn, followed by a blank line), the user turn, then the model
    turn's start with `asked_with`, what the base's chat template adds there with thinking off (`asked_extra`:
    the empty thought channel for the Gemma 4 stand-in's template, nothing for E2B's own or Gemma 3n's).
    Thinking stays off: the template has no `<|think|>` and no `.Think` (Ollama's thinking mode is reported
    to empty audio replies). It uses only the variables Ollama documents for a Modelfile's TEMPLATE (`.System`,
    `.Prompt`, `.Response`; docs/modelfile.mdx, checked by `tests/test_modelfile.py`); Ollama puts the clip
    where its template engine places media. `<bos>` is not in it: the GGUF's tokenizer adds it.
    """
    lines = [f"# Pronunciation tutor `{run}` for Ollama: `ollama create {run} -f Modelfile` in this folder.",
             f"FROM ./{run}.gguf"]
    if projector:
        lines.append(f"FROM ./mmproj-{run}.gguf")
    if system_turn:
        turns = [f'TEMPLATE """{{{{ if .System }}}}{turn_start}system', f'{{{{ .System }}}}{turn_end}',
                 f'{{{{ end }}}}{{{{ if .Prompt }}}}{turn_start}user', f'{{{{ .Prompt }}}}{turn_end}', f'{{{{ end }}}}{turn_start}model']
    else:
        turns = [f'TEMPLATE """{turn_start}user', '{{ if .System }}{{ .System }}', '',
                 f'{{{{ end }}}}{{{{ .Prompt }}}}{turn_end}', f'{turn_start}model']
    lines += turns + [
        asked_with + f'{{{{ .Response }}}}{turn_end}',
        '"""',
        f'SYSTEM """{system_prompt}"""',
        f'PARAMETER stop "{turn_end}"',
        "PARAMETER temperature 0",
        f"PARAMETER num_predict {DEFAULT_MAX_NEW_TOKENS}",
        f"PARAMETER num_ctx {int(num_ctx)}",
    ]
    return "\n".join(lines) + "\n"


def tutor_chat_template(template: str, system_prompt: str) -> str:
    """The chat template the GGUF carries: the base's own Gemma 4 template (`template`, Jinja) with two
    defaults of the tutor in front: thinking off (the tutor was trained and is asked without a thought
    channel, as `pipeline.tutor.infer` renders it: the generation prompt ends with the empty
    `<|channel>thought\n<channel|>`), and `system_prompt` as the system turn when a request has none.
    llama.cpp renders it itself (`--jinja`), so `llama-mtmd-cli -p TEXT --audio CLIP` and a plain
    `llama-server` request build the prompt the tutor knows; a request's own system message still wins.

    llama.cpp always passes `enable_thinking` (true unless told otherwise), so it is set, not defaulted.
    """
    import json

    return ("{#- The pronunciation tutor's defaults: no thinking; its system prompt unless one is given. -#}\n"
            "{%- set enable_thinking = false -%}\n"
            "{%- if messages and messages[0]['role'] not in ['system', 'developer'] -%}\n"
            "{%- set messages = [{'role': 'system', 'content': " + json.dumps(system_prompt, ensure_ascii=False)
            + "}] + messages -%}\n{%- endif -%}\n" + template)


def keep_special_tokens(folder: Path) -> list[str]:
    """Mark every added token that `tokenizer.json` calls special as special in `tokenizer_config.json`
    again, and return the ones added back.

    `AutoProcessor` of a Gemma 4 checkpoint loads its tokenizer with only the processor's named tokens
    (`<|audio>`, `<|image|>`, ...) as extra special tokens, so the folder it saves lists `<|turn>`,
    `<turn|>`, `<|think|>`, ... as plain added tokens. llama.cpp's converter types tokens by the
    tokenizer's `all_special_ids` (`gguf-py` `LlamaHfVocab`): without this, `<|turn>` is a NORMAL
    token in the GGUF and llama.cpp spells it out letter by letter in every prompt.
    """
    import json

    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    have = list(config.get("extra_special_tokens") or [])
    if isinstance(config.get("extra_special_tokens"), dict):
        return []  # a named mapping: leave it as transformers wrote it
    named = set((config.get("model_specific_special_tokens") or {}).values())
    named |= {config.get(k) for k in ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token")}
    added = [t["content"] for t in data.get("added_tokens", [])
             if t.get("special") and t["content"] not in have and t["content"] not in named]
    if added:
        config["extra_special_tokens"] = have + added
        atomic_write_json(config_path, config)
    return added


def _readme(info: dict, run: str, quant: str, projector: bool, notes: list[str]) -> str:
    from pipeline.conversation.messages import user_prompt

    base = info["settings"].get("model")
    example = user_prompt("The cat sat on the mat.")
    lines = [
        f"# Pronunciation tutor `{run}` as GGUF ({quant})", "",
        f"The LoRA of run `{run}` merged into `{base}` and converted with llama.cpp's own "
        f"`convert_hf_to_gguf.py` (llama.cpp from llama-cpp-python {llama_cpp.LLAMA_CPP_PYTHON}'s source). "
        + (f"`mmproj-{run}.gguf` is its audio projector (kept unquantized): pass it with every command." if projector
           else f"**{TEXT_ONLY[0].upper() + TEXT_ONLY[1:]}** (no audio projector): it answers typed questions only."), "",
        "## llama.cpp", "",
        "Build llama.cpp (https://github.com/ggml-org/llama.cpp) or install a release, then, in this folder:", "",
        "```bash",
        (f"llama-mtmd-cli -m {run}.gguf --mmproj mmproj-{run}.gguf --jinja --temp 0 \\\n"
         f"  --audio learner.wav -p '{example}'" if projector else
         f"llama-completion -m {run}.gguf --jinja -cnv -st --temp 0 -n 256 -p 'How do I say \"thought\"?'"),
        (f"llama-server -m {run}.gguf --mmproj mmproj-{run}.gguf --jinja --port 8080" if projector else
         f"llama-server -m {run}.gguf --jinja --port 8080"),
        "```", "",
        *([] if projector else ["`llama-completion -cnv -st` answers one typed question and stops; `llama-cli -m "
                                f"{run}.gguf --jinja` holds a conversation.", ""]),
        "The GGUF's chat template is the base's with the tutor's defaults: thinking off and the tutor's system "
        "prompt (`system_prompt.txt`) when a request has none, so the commands above need no `-sys`"
        + (" (llama-mtmd-cli's `-sys` would also add a blank line between the turns the tutor never saw)." if projector
           else "."), "",
        ("`llama-server` answers OpenAI-style chat completions; send the clip as a user content part "
         "`{\"type\": \"input_audio\", \"input_audio\": {\"data\": BASE64_WAV, \"format\": \"wav\"}}` followed by the "
         "text part, with `system_prompt.txt` as the system message." if projector else
         "`llama-server` answers OpenAI-style chat completions of text: send the question as the user message."), "",
        "## Ollama", "",
        "```bash",
        f"ollama create {run} -f Modelfile",
        f"ollama run {run}",
        "```", "",
        "The Modelfile names " + ("both files" if projector else "the model file") + ", the tutor's chat template and system prompt. It was written and checked "
        "against llama.cpp's chat template handling, but `ollama create` was not run where it was made. "
        + ("If your Ollama does not attach a separate projector to an imported model, import the merged model "
           "instead (`python -m pipeline export --format merged`, then `FROM ./NAME-merged` in the Modelfile): "
           "Ollama's own converter keeps Gemma 4's audio tower." if projector else ""), "",
        "## The prompt it was trained on", "",
        "A system message (`system_prompt.txt`), then one user turn: the clip (16 kHz mono) followed by "
        f"`{example}` with the learner's sentence. Free-speech and dialogue tutors were trained with their own "
        "system prompts; `export.json` holds the settings."
        + ("" if projector else " This file cannot hear the clip: it answers what is typed (a question about a "
           "sound or a word, or the learner's sentence), as the tutor would without hearing the learner."),
    ]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _convert(model_dir: Path, outfile: Path, outtype: str, *, mmproj: bool, say: Callable[[str], None]) -> None:
    command = llama_cpp.converter_command(model_dir, outfile, outtype, mmproj=mmproj, model_name=model_dir.name)
    say(f"Converting {'the audio projector' if mmproj else 'the model'} to GGUF ({outtype}) with llama.cpp's converter…")
    done = subprocess.run(command, env=llama_cpp.converter_env(), capture_output=True, text=True)
    if done.returncode != 0 or not outfile.is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
        raise ExportError(f"llama.cpp's converter failed on {model_dir.name} (exit {done.returncode}):\n{tail}")


def _quantize(source: Path, target: Path, quant: str, say: Callable[[str], None]) -> None:
    binary = llama_cpp.tool("llama-quantize", say=say)
    say(f"Quantizing to {quant.upper()} with llama.cpp's llama-quantize…")
    done = subprocess.run([str(binary), str(source), str(target), quant.upper()], capture_output=True, text=True)
    if llama_cpp.died_on_illegal_instruction(done.returncode):
        raise ExportError(llama_cpp.illegal_instruction_advice("llama-quantize"))
    if done.returncode != 0 or not target.is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
        raise ExportError(f"llama-quantize failed (exit {done.returncode}):\n{tail}")


def export_gguf(workspace, run: str, out_dir: str | os.PathLike | None = None, *, quant: str = DEFAULT_QUANT,
                text_only: bool = False, device: str = "cpu", model: str | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write `OUT/NAME-gguf/` (see the module docstring) and return what it holds.

    Args:
        workspace, run: the run to export (its adapter and base).
        out_dir: the folder `NAME-gguf/` goes into (default `WS/exports/runs/NAME/`).
        quant: one of `QUANTS` for the language model (the projector stays BF16, F32 with f32).
        text_only: a GGUF without the projector; the only GGUF a Gemma 3n run gets, and only when asked.
        device: where the merge runs (`pipeline.export.tutor.export_merged`).
        model: the run's base where it is now, if its folder moved.
        progress: called with a line at each stage (download/build of llama.cpp, merge, convert, quantize).

    Returns:
        `{"format": "gguf" (or "gguf-text-only"), "run", "path", "bytes", "base_model", "quant", "projector" (its dtype or None),
        "files": {name: bytes}, "seconds", "llama_cpp": the converter's source, "notes"}`.

    Raises:
        ExportError: unknown `quant`; a Gemma 3n run without `text_only` (the reason, and the name to ask for);
            no such run or adapter; not enough disk; llama.cpp's source cannot be fetched or the converter /
            quantizer fails (their last lines).
        ModelLoadError, BaseModelMismatchError: the base cannot be loaded, or is another model.
    """
    from pipeline.conversation.messages import SYSTEM_PROMPT
    from pipeline.model.base_identity import run_base_model
    from pipeline.model.tokens import asked_extra
    from pipeline.model.catalog import family_for

    say = _say(progress)
    if quant not in QUANTS:
        raise ExportError(f"`--quant` must be one of {', '.join(QUANTS)}, got {quant!r}.")
    info = read_run(workspace, run)
    base = run_base_model(info["dir"], run, model)
    family = family_for(base)
    if not family.gguf_audio and not text_only:
        raise ExportError(GEMMA3N_DEAF.format(run=run))
    projector, fmt = (None, "gguf-text-only") if text_only else ("f32" if quant == "f32" else "bf16", "gguf")
    out = Path(out_dir) if out_dir is not None else default_out_dir(workspace, run)
    target = out / f"{run}-gguf"
    replaced = check_replaceable(target, "export.json")  # before the merge, which takes minutes
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    llama_cpp.source_dir(say=say)  # fetched before the long merge, so a network problem shows at once
    vocab = vocab_files(base, family)  # a missing one fails before the merge too
    recover_staging(target)  # a killed export's merged copy (gigabytes) goes before the disk is checked
    base_bytes = merged_size_bytes(base)
    check_free_space(out, 2 * base_bytes * (2 if quant == "f32" else 1), f"the GGUF export of run `{run}` "
                     "(the merged model and its GGUF side by side)")
    say("Merging the adapter into the base model…")
    done = merged_tutor(workspace, run, device=device, model=model, out_dir=out,
                        dtype="float32" if quant == "f32" else "bfloat16")
    notes = list(done["notes"]) + ([replaced] if replaced else [])
    for warning in filter(None, (long_clip_warning(workspace, quant), llama_cpp_load_warning(base, family))):
        say("⚠ " + warning)
        notes.append(warning)
    if text_only and family.gguf_audio:
        notes.append("Text only, as asked: no audio projector was written, so this GGUF cannot hear the learner.")
    elif text_only:
        notes.append(GEMMA3N_DEAF.split(" A text-only")[0].format(run=run) + " This is the text-only GGUF you asked for.")
    # named as the target's staging path (with this pid), so the next export removes it if this one is killed
    merged_root = Path(tempfile.mkdtemp(prefix=staging_prefix(target) + "merged-", dir=out))
    merged_dir = merged_root / run  # the converter names the GGUF (general.name, ...) after this folder
    try:
        done["model"].save_pretrained(str(merged_dir))
        done["processor"].save_pretrained(str(merged_dir))
        _ready_for_converter(merged_dir, family, vocab)
        template_path = merged_dir / "chat_template.jinja"
        template = (template_path.read_text(encoding="utf-8") if template_path.is_file()
                    else done["processor"].tokenizer.chat_template)
        asked_with = asked_extra(done["processor"].tokenizer)[0]
        atomic_write_text(template_path, tutor_chat_template(template, SYSTEM_PROMPT))
        del done
        with staged_folder(target) as staging:
            gguf = staging / f"{run}.gguf"
            if quant in QUANTIZED_BY_LLAMA_QUANTIZE:
                unquantized = merged_dir / f"{run}-f16.gguf"
                _convert(merged_dir, unquantized, "f16", mmproj=False, say=say)
                _quantize(unquantized, gguf, quant, say)
                unquantized.unlink()
            else:
                _convert(merged_dir, gguf, quant, mmproj=False, say=say)
            if projector:
                _convert(merged_dir, staging / f"mmproj-{run}.gguf", projector, mmproj=True, say=say)
            atomic_write_text(staging / "Modelfile", modelfile(
                run, SYSTEM_PROMPT, projector=bool(projector), asked_with=asked_with, turn_start=family.turn_start,
                turn_end=family.turn_end, system_turn=family.system_turn,
                num_ctx=int(info["settings"].get("max_length") or 512) + DEFAULT_MAX_NEW_TOKENS))
            atomic_write_text(staging / "system_prompt.txt", SYSTEM_PROMPT + "\n")
            atomic_write_text(staging / "README.md", _readme(info, run, quant, bool(projector), notes))
            atomic_write_json(staging / "export.json", dict(_provenance(info, fmt), quant=quant, projector=projector,
                                                            llama_cpp_python=llama_cpp.LLAMA_CPP_PYTHON, notes=notes))
    finally:
        shutil.rmtree(merged_root, ignore_errors=True)
    files = {p.name: p.stat().st_size for p in sorted(target.iterdir()) if p.is_file()}
    return {"format": fmt, "run": run, "path": str(target), "bytes": folder_bytes(target),
            "base_model": info["settings"].get("model"), "quant": quant, "projector": projector, "files": files,
            "seconds": round(time.monotonic() - started, 1),
            "llama_cpp": f"llama-cpp-python {llama_cpp.LLAMA_CPP_PYTHON} sdist ({llama_cpp.cache_dir() / 'src'})",
            "notes": notes}


def gguf_summary(result: dict) -> list[str]:
    """Lines about a GGUF export for the CLI and the app: its files and the two commands to run it."""
    lines = [f"  {name}: {format_bytes(size)}" for name, size in result.get("files", {}).items()
             if name.endswith(".gguf")]
    run = result["run"]
    if not result.get("projector"):
        lines.append(f"  {TEXT_ONLY}: llama-completion -m {run}.gguf --jinja -cnv -st -n 256 -p QUESTION")
    if result.get("projector"):
        lines.append(f"  llama.cpp: llama-mtmd-cli -m {run}.gguf --mmproj mmproj-{run}.gguf --jinja --audio CLIP.wav -p TEXT")
    lines.append(f"  Ollama:    ollama create {run} -f Modelfile   (in {result['path']})")
    return lines
