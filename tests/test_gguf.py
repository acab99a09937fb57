"""The tiny Gemma 4 through the whole CLI (make-tiny-model --family gemma4 -> import -> build -> estimate ->
train -> infer -> evaluate -> export --format gguf), and the proof that the exported tutor hears in llama.cpp
itself: `llama-mtmd-cli` (built from the same llama.cpp source as the converter, `pipeline.export.llama_cpp`,
cached outside the repository) answers two real clips differently, and transformers (the merged model, same
clip, same prompt, F32 export) explains its answer token by token (`tests.gguf_proof`: within
`LOGPROB_TOLERANCE` of the best at every position, teacher-forced). A wrong model cannot pass it (the same
check of one clip's llama.cpp answer against transformers on the other clip must fail).

The first run on a clean machine fetches llama.cpp's source (the llama-cpp-python sdist, from the package
index) and builds `llama-mtmd-cli` and `llama-quantize` (README: how long that takes)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.gguf_proof import MIN_COMPARED, PACK, cli_json, explained, opening_flow

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CLIPS = [PACK / "WAVE" / "SPEAKER0005" / "000050083.WAV", PACK / "WAVE" / "SPEAKER0001" / "000010011.WAV"]
TARGET = "We call it bear"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Run every stage of the CLI on the tiny Gemma 4 and export the run as an F32 GGUF."""
    root = tmp_path_factory.mktemp("g4flow")
    flow = opening_flow(root, "--family", "gemma4")
    env, ws, tiny, built = flow["env"], flow["ws"], flow["tiny"], flow["built"]
    estimate = cli_json("estimate", "--workspace", ws, "--model", tiny, env=env)
    cli_json("train", "--workspace", ws, "--run", "g4", "--model", tiny, "--max-steps", "2",
             "--lora-targets", "language+audio", "--eval-steps", "2", "--save-steps", "2", env=env)
    answer = cli_json("infer", "--workspace", ws, "--run", "g4", "--audio", str(CLIPS[0]), "--text", TARGET, env=env)
    evaluation = cli_json("evaluate", "--workspace", ws, "--run", "g4", env=env)
    result = cli_json("export", "--workspace", ws, "--run", "g4", "--format", "gguf", "--quant", "f32",
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


def _merged(ws: str):
    from pipeline.export.tutor import merged_tutor

    done = merged_tutor(ws, "g4", dtype="float32", out_dir=Path(ws).parent)
    return done["model"].eval(), done["processor"]


def _explained(model, processor, clip: Path, answer: bytes, n: int) -> tuple[int, list[float]]:
    """`gguf_proof.explained` of llama.cpp's answer on `clip` (the read-aloud prompt of `TARGET`)."""
    from pipeline.conversation.messages import prompt_messages
    from pipeline.data.audio import load_audio

    tokenizer = processor.tokenizer
    messages = prompt_messages("read_aloud", target_text=TARGET, audios=[load_audio(clip).samples], tokenizer=tokenizer)
    inputs = processor.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=True,
                                           return_tensors="pt")
    ends = {tokenizer.convert_tokens_to_ids(t) for t in ("<turn|>", "<eos>")}
    return explained(model, tokenizer, inputs, answer, n, ends)


def test_llama_cpp_hears_two_clips_apart_and_transformers_explains_each_answer(exported):
    n = 12
    answers = [_llama_answer(exported["dir"], clip, n) for clip in CLIPS]
    assert answers[0].strip() != answers[1].strip(), "llama.cpp answered two different clips alike: it does not hear"
    model, processor = _merged(exported["ws"])
    for clip, answer in zip(CLIPS, answers):
        explained, gaps = _explained(model, processor, clip, answer, n)
        assert explained >= MIN_COMPARED, (clip.name, explained, gaps, answer)
        print(f"{clip.name}: {explained} of llama.cpp's tokens explained, gaps below the best {gaps}")
    # a wrong model cannot pass: one clip's answer is not explained by transformers hearing the other clip
    wrong = _explained(model, processor, CLIPS[1], answers[0], n)[0]
    print(f"{CLIPS[0].name}'s answer heard as {CLIPS[1].name}: {wrong} tokens explained")
    assert wrong < MIN_COMPARED, f"transformers on {CLIPS[1].name} explains llama.cpp's answer to {CLIPS[0].name}"


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
