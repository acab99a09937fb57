"""Issue 43 item 6: a Gemma 3n tutor's text-only GGUF, end to end. The tiny Gemma 3n with llama.cpp's shapes
(`make-tiny-model --llama-cpp-shapes`: llama.cpp's Gemma 3n graph fixes E2B's per-layer width, KV-sharing
start and sparse layers) goes through the CLI (import -> build -> train -> export --format gguf-text-only),
and llama.cpp's own text CLI (`llama-completion`, one typed question, the GGUF's own chat template) answers:
  * its prompt is the tokens transformers renders for the same question, token for token (the vocabulary
    from `tokenizer.model`, the template the export wrote);
  * transformers (the merged model, F32 export) explains its answer token by token (`tests.gguf_proof`), and
    two questions get two answers, one not explained by the other's prompt.
The export says it cannot hear wherever it is written. Needs llama.cpp's tools (built once, cached)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.gguf_proof import MIN_COMPARED, cli_json, explained, opening_flow

pytestmark = pytest.mark.slow

QUESTIONS = ("How do I say the word bear?", "Which sound is hard in three?")
RUN = "g3n"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every stage of the CLI on the llama.cpp-shaped tiny Gemma 3n, exported as an F32 text-only GGUF."""
    root = tmp_path_factory.mktemp("g3nflow")
    flow = opening_flow(root, "--llama-cpp-shapes")
    env, ws, tiny = flow["env"], flow["ws"], flow["tiny"]
    cli_json("train", "--workspace", ws, "--run", RUN, "--model", tiny, "--max-steps", "2", "--eval-steps", "2",
             "--save-steps", "2", env=env)
    result = cli_json("export", "--workspace", ws, "--run", RUN, "--format", "gguf-text-only", "--quant", "f32",
                      "--out", str(root / "out"), env=env)
    return {"ws": ws, "made": flow["made"], "export": result, "dir": Path(result["path"])}


def _ask(folder: Path, question: str, n: int) -> tuple[bytes, list[int]]:
    """llama-completion's answer to `question` (bytes: a random model writes broken UTF-8) and its prompt's ids."""
    from pipeline.export import llama_cpp

    command = [str(llama_cpp.tool("llama-completion")), "-m", str(folder / f"{RUN}.gguf"), "--jinja", "-cnv", "-st",
               "--no-display-prompt", "--verbose-prompt", "--temp", "0", "-n", str(n), "-t", "1", "-p", question]
    done = subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    log = done.stderr.decode("utf-8", "replace")
    listed = log.split("number of tokens in prompt", 1)[1]
    ids = [int(i) for i in re.findall(r"^\S+ I +(\d+) -> '", listed, re.M)]
    return done.stdout, ids


def _prompt(processor, question: str):
    """transformers' prompt for `question` as the tutor is asked: its system prompt, then the typed question."""
    from pipeline.conversation.messages import SYSTEM_PROMPT

    messages = [{"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
                {"role": "user", "content": [{"type": "text", "text": question}]}]
    return processor.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=True,
                                         return_tensors="pt")


def test_the_text_only_gguf_says_it_cannot_hear_and_has_no_projector(exported):
    from pipeline.export.gguf import TEXT_ONLY

    folder = exported["dir"]
    names = {p.name for p in folder.iterdir()}
    assert {f"{RUN}.gguf", "Modelfile", "README.md"} <= names
    assert not any(name.startswith("mmproj") for name in names)
    assert exported["export"]["projector"] is None
    readme = (folder / "README.md").read_text()
    assert TEXT_ONLY[0].upper() + TEXT_ONLY[1:] in readme and "llama-completion" in readme
    assert any("not hear" in note and "text-only GGUF" in note for note in exported["export"]["notes"])
    assert "ADAPTER" not in (folder / "Modelfile").read_text() and "mmproj" not in (folder / "Modelfile").read_text()


def test_llama_cpp_answers_a_typed_question_as_transformers_does(exported):
    from pipeline.export.tutor import merged_tutor

    n = 12
    asked = [_ask(exported["dir"], question, n) for question in QUESTIONS]
    assert asked[0][0].strip() != asked[1][0].strip(), "llama.cpp answered two questions alike"
    done = merged_tutor(exported["ws"], RUN, dtype="float32", out_dir=Path(exported["ws"]).parent)
    model, processor = done["model"].eval(), done["processor"]
    tokenizer = processor.tokenizer
    ends = {tokenizer.convert_tokens_to_ids(t) for t in ("<end_of_turn>", "<eos>")}
    for question, (answer, llama_ids) in zip(QUESTIONS, asked):
        inputs = _prompt(processor, question)
        assert llama_ids == inputs["input_ids"][0].tolist(), "llama.cpp built another prompt than transformers"
        count, gaps = explained(model, tokenizer, inputs, answer, n, ends)
        print(f"{question!r}: {count} of llama.cpp's tokens explained, gaps below the best {gaps}")
        assert count >= MIN_COMPARED, (question, count, gaps, answer)
    wrong = explained(model, tokenizer, _prompt(processor, QUESTIONS[1]), asked[0][0], n, ends)[0]
    assert wrong < MIN_COMPARED, "transformers asked the second question explains llama.cpp's answer to the first"
