"""The tiny Gemma 4 through the whole CLI (make-tiny-model --family gemma4 -> import -> build -> estimate ->
train -> infer -> evaluate -> export --format gguf), and the proof that the exported tutor hears in llama.cpp
itself: `llama-mtmd-cli` (built from the same llama.cpp source as the converter, `pipeline.export.llama_cpp`,
cached outside the repository) answers two real clips differently, and its greedy tokens equal the
transformers answer of the merged model on the same clip and prompt (F32 export).

The first run on a clean machine fetches llama.cpp's source (the llama-cpp-python sdist, from the package
index) and builds `llama-mtmd-cli` and `llama-quantize` (README: how long that takes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "sample_data" / "speechocean762-pack"
CLIPS = [PACK / "WAVE" / "SPEAKER0005" / "000050083.WAV", PACK / "WAVE" / "SPEAKER0001" / "000010011.WAV"]
TARGET = "We call it bear"
NEAR_TIE = 0.01
"""Logit margin (top-1 minus top-2, transformers) under which two implementations may pick different
tokens: llama.cpp computes GELU from an fp16 table and its own log-mel features, differences of a few
1e-3 in the tiny random model's logits, whose top logits lie within hundredths of each other."""


def _cli(*args: str, env: dict) -> dict:
    done = subprocess.run([sys.executable, "-m", "pipeline", *args, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Run every stage of the CLI on the tiny Gemma 4 and export the run as an F32 GGUF."""
    root = tmp_path_factory.mktemp("g4flow")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    ws, tiny = str(root / "ws"), str(root / "tiny")
    done = subprocess.run([sys.executable, "-m", "pipeline", "make-tiny-model", "--family", "gemma4", tiny],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    _cli("import", "--workspace", ws, "--source", str(PACK), env=env)
    built = _cli("build", "--workspace", ws, "--model", tiny, env=env)
    estimate = _cli("estimate", "--workspace", ws, "--model", tiny, env=env)
    _cli("train", "--workspace", ws, "--run", "g4", "--model", tiny, "--max-steps", "2",
         "--lora-targets", "language+audio", "--eval-steps", "2", "--save-steps", "2", env=env)
    answer = _cli("infer", "--workspace", ws, "--run", "g4", "--audio", str(CLIPS[0]), "--text", TARGET, env=env)
    evaluation = _cli("evaluate", "--workspace", ws, "--run", "g4", env=env)
    result = _cli("export", "--workspace", ws, "--run", "g4", "--format", "gguf", "--quant", "f32",
                  "--out", str(root / "out"), env=env)
    return {"ws": ws, "tiny": tiny, "built": built, "estimate": estimate, "answer": answer,
            "evaluation": evaluation, "export": result, "dir": Path(result["path"])}


def test_the_cli_takes_the_tiny_gemma4_from_recordings_to_gguf(exported):
    folder = exported["dir"]
    assert folder.name == "g4-gguf"
    names = {p.name for p in folder.iterdir()}
    assert {"g4.gguf", "mmproj-g4.gguf", "Modelfile", "README.md"} <= names
    assert exported["export"]["projector"] == "f32"
    assert "FROM ./g4.gguf" in (folder / "Modelfile").read_text() and "ollama create g4" in (folder / "README.md").read_text()
    assert exported["answer"] and exported["evaluation"]


def _llama_answer(folder: Path, clip: Path, n: int, verbose: bool = False) -> bytes:
    from pipeline.conversation.messages import user_prompt
    from pipeline.export import llama_cpp

    command = [str(llama_cpp.tool("llama-mtmd-cli")), "-m", str(folder / "g4.gguf"), "--mmproj",
               str(folder / "mmproj-g4.gguf"), "--jinja", "--temp", "0", "-n", str(n), "-t", "1",
               "--audio", str(clip), "-p", user_prompt(TARGET)] + (["-v"] if verbose else [])
    done = subprocess.run(command, capture_output=True, timeout=300)  # bytes: a random model writes broken UTF-8
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr if verbose else done.stdout


def _token_bytes(tokenizer, ids: list[int]) -> bytes:
    """The bytes `ids` spell (byte-fallback tokens `<0xHH>` as their byte, `▁` as a space), as llama.cpp prints them."""
    out = b""
    for token in tokenizer.convert_ids_to_tokens(ids):
        byte = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token)
        out += bytes([int(byte.group(1), 16)]) if byte else token.replace("\u2581", " ").encode("utf-8")
    return out


def _transformers_answer(ws: str, clip: Path, n: int) -> tuple[list[int], list[float], object]:
    import torch

    from pipeline.conversation.messages import prompt_messages
    from pipeline.data.audio import load_audio
    from pipeline.export.tutor import merged_tutor

    done = merged_tutor(ws, "g4", dtype="float32", out_dir=Path(ws).parent)
    model, processor = done["model"].eval(), done["processor"]
    messages = prompt_messages("read_aloud", target_text=TARGET, audios=[load_audio(clip).samples],
                               tokenizer=processor.tokenizer)
    inputs = processor.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=True,
                                           return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=n, do_sample=False, output_scores=True,
                             return_dict_in_generate=True)
    ids = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    margins = [float(torch.topk(s[0].float(), 2).values.diff().abs()) for s in out.scores]
    return ids, margins, processor.tokenizer


def test_llama_cpp_hears_two_clips_apart_and_its_greedy_tokens_equal_transformers(exported):
    n = 12
    answers = [_llama_answer(exported["dir"], clip, n) for clip in CLIPS]
    assert answers[0].strip() != answers[1].strip(), "llama.cpp answered two different clips alike: it does not hear"
    for clip, answer in zip(CLIPS, answers):
        ids, margins, tokenizer = _transformers_answer(exported["ws"], clip, n)
        agree = next((k for k, m in enumerate(margins) if m < NEAR_TIE), len(margins))
        assert agree >= 4, f"transformers' first tokens are near-ties ({margins}); the comparison says nothing"
        expected = _token_bytes(tokenizer, ids[:agree])
        assert answer.lstrip(b"\n").startswith(expected), (clip.name, agree, expected, answer)


def test_the_modelfile_template_renders_the_prompt_llama_cpp_builds(exported):
    """Ollama cannot be installed here: the Modelfile's TEMPLATE, filled as Ollama fills it for one exchange,
    must give the prompt llama.cpp's own chat template handling builds from the GGUF (the text around the clip)."""
    from pipeline.conversation.messages import SYSTEM_PROMPT, user_prompt

    folder = exported["dir"]
    log = _llama_answer(folder, CLIPS[0], 1, verbose=True).decode("utf-8", errors="replace")
    built = re.search(r"formatted_chat\.prompt: (.*?)\n\S+ D mtmd_", log, re.S).group(1)
    modelfile = (folder / "Modelfile").read_text()
    template = re.search(r'TEMPLATE """(.*?)"""', modelfile, re.S).group(1)
    system = re.search(r'SYSTEM """(.*?)"""', modelfile, re.S).group(1)
    assert system == SYSTEM_PROMPT
    before_answer = template.split("{{ .Response }}")[0]  # the prompt: what Ollama renders before the answer
    rendered = (before_answer.replace("{{ if .System }}", "").replace("{{ .System }}", system)
                .replace("{{ end }}{{ if .Prompt }}", "").replace("{{ .Prompt }}", "<__media__>" + user_prompt(TARGET))
                .replace("{{ end }}", ""))
    assert built == rendered
