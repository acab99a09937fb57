"""The GGUF export's Ollama Modelfile against Ollama's documented grammar (issue 43): Ollama's server cannot be
installed here, so `ollama create` is not run. What is checked instead, from Ollama's own reference
(github.com/ollama/ollama `docs/modelfile.mdx`, as of 2026-08-11, commit 6a261db7d): each line is a comment or a
documented INSTRUCTION, FROM is given, each PARAMETER is a documented one with a value of its documented type,
the TEMPLATE uses only the documented template variables (`.System`, `.Prompt`, `.Response`) in `if`/`end`
blocks that balance, and, filled for one exchange as Ollama fills it, it gives exactly the prompt the tutor is
asked with (the processor's generation prompt, thinking off) with the tutor's decoding parameters."""

from __future__ import annotations

import re

import pytest

INSTRUCTIONS = {"FROM", "PARAMETER", "TEMPLATE", "SYSTEM", "ADAPTER", "LICENSE", "MESSAGE", "REQUIRES"}
"""docs/modelfile.mdx "Format": the instructions."""
PARAMETERS = {"num_ctx": int, "repeat_last_n": int, "repeat_penalty": float, "temperature": float, "seed": int,
              "stop": str, "num_predict": int, "top_k": int, "top_p": float, "min_p": float}
"""docs/modelfile.mdx "Valid Parameters and Values": name -> value type."""
VARIABLES = {".System", ".Prompt", ".Response"}
"""docs/modelfile.mdx "Template Variables"."""


def parse_modelfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, argument) pairs of a Modelfile, `\"\"\"`-quoted arguments over several lines; raises
    AssertionError on a line that is neither a comment nor a documented instruction."""
    out: list[tuple[str, str]] = []
    lines = iter(text.splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        assert word.upper() in INSTRUCTIONS, f"not a Modelfile instruction: {line!r}"
        if rest.startswith('"""'):
            body = rest[3:]
            while '"""' not in body:
                body += "\n" + next(lines)
            assert body.endswith('"""'), f"text after the closing quotes: {body[-20:]!r}"
            rest = body[:-3]
        out.append((word.upper(), rest))
    return out


def fill_template(template: str, values: dict[str, str]) -> str:
    """A Go-template subset as Ollama's documented examples use it: `{{ .Var }}`, `{{ if .Var }}...{{ end }}`.
    Raises AssertionError on any other action, an undocumented variable, or unbalanced blocks."""
    out, stack = [], [True]
    for piece in re.split(r"({{-?\s*.*?\s*-?}})", template):
        action = re.fullmatch(r"{{-?\s*(.*?)\s*-?}}", piece)
        if not action:
            if all(stack):
                out.append(piece)
            continue
        words = action.group(1).split()
        if words[0] == "if":
            assert len(words) == 2 and words[1] in VARIABLES, action.group(0)
            stack.append(bool(values.get(words[1])))
        elif words == ["end"]:
            assert len(stack) > 1, "an {{ end }} without its {{ if }}"
            stack.pop()
        else:
            assert len(words) == 1 and words[0] in VARIABLES, f"undocumented template action {action.group(0)}"
            if all(stack):
                out.append(values.get(words[0], ""))
    assert len(stack) == 1, "an {{ if }} without its {{ end }}"
    return "".join(out)


@pytest.mark.parametrize("asked_with", ["<|channel>thought\n<channel|>", ""])
def test_the_modelfile_follows_ollamas_grammar_and_the_tutors_settings(asked_with):
    from pipeline.export.gguf import STOP_TOKEN, modelfile
    from pipeline.tutor.infer import DEFAULT_MAX_NEW_TOKENS

    pairs = parse_modelfile(modelfile("week1", "You are a tutor.", asked_with=asked_with, num_ctx=1280))
    assert ("FROM", "./week1.gguf") in pairs and ("FROM", "./mmproj-week1.gguf") in pairs
    params = {}
    for instruction, argument in pairs:
        if instruction == "PARAMETER":
            name, value = argument.split(" ", 1)
            assert name in PARAMETERS, f"undocumented parameter {name}"
            kind = PARAMETERS[name]
            params[name] = kind(value.strip('"')) if kind is not str else value
            assert kind is not str or re.fullmatch(r'"[^"]*"', value), value
    assert params == {"stop": f'"{STOP_TOKEN}"', "temperature": 0.0, "num_predict": DEFAULT_MAX_NEW_TOKENS,
                      "num_ctx": 1280}
    (template,) = [a for i, a in pairs if i == "TEMPLATE"]
    assert "<|think|>" not in template and ".Think" not in template  # thinking stays off
    prompt = fill_template(template, {".System": "S", ".Prompt": "P"}).split("<turn|>\n<|turn>model\n")
    assert prompt[-1] == asked_with + "<turn|>\n"  # text after .Response is dropped when Ollama generates


def test_filled_as_ollama_fills_it_the_template_is_the_prompt_the_tutor_is_asked_with(tiny_gemma4_dir):
    """The stand-in's processor: the Modelfile's TEMPLATE for one exchange (the clip's placeholder where the
    processor writes it) is the generation prompt `pipeline.tutor.infer` sends, `<bos>` aside."""
    from transformers import AutoProcessor

    from pipeline.conversation.messages import SYSTEM_PROMPT, prompt_messages, user_prompt
    from pipeline.export.gguf import modelfile
    from pipeline.model.tokens import asked_extra

    processor = AutoProcessor.from_pretrained(tiny_gemma4_dir)
    pairs = parse_modelfile(modelfile("t", SYSTEM_PROMPT, asked_with=asked_extra(processor.tokenizer)[0]))
    (template,) = [a for i, a in pairs if i == "TEMPLATE"]
    (system,) = [a for i, a in pairs if i == "SYSTEM"]
    filled = fill_template(template, {".System": system, ".Prompt": "<|audio|>" + user_prompt("We call it bear.")})
    asked = processor.apply_chat_template(prompt_messages("read_aloud", target_text="We call it bear."),
                                          tokenize=False, add_generation_prompt=True)
    assert "<bos>" + filled.removesuffix("<turn|>\n") == asked


def test_a_gemma3n_modelfile_is_the_prompt_its_template_renders(tiny_model_dir):
    """Gemma 3n (text only): its own turns and stop token, the system prompt folded into the user turn as its
    template folds it, no projector; filled, the generation prompt of a typed question, `<bos>` aside."""
    from transformers import AutoProcessor

    from pipeline.conversation.messages import SYSTEM_PROMPT
    from pipeline.export.gguf import modelfile
    from pipeline.model.catalog import FAMILIES
    from pipeline.model.tokens import asked_extra

    family = FAMILIES["gemma3n"]
    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    text = modelfile("t", SYSTEM_PROMPT, projector=False, asked_with=asked_extra(processor.tokenizer)[0],
                     turn_start=family.turn_start, turn_end=family.turn_end, system_turn=family.system_turn)
    pairs = parse_modelfile(text)
    assert ("PARAMETER", 'stop "<end_of_turn>"') in pairs
    assert "<|turn>" not in text and "mmproj" not in text
    (template,) = [a for i, a in pairs if i == "TEMPLATE"]
    (system,) = [a for i, a in pairs if i == "SYSTEM"]
    question = "How do I say the word bear?"
    filled = fill_template(template, {".System": system, ".Prompt": question})
    asked = processor.apply_chat_template([{"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
                                           {"role": "user", "content": [{"type": "text", "text": question}]}],
                                          tokenize=False, add_generation_prompt=True)
    assert "<bos>" + filled.removesuffix("<end_of_turn>\n") == asked


def test_the_grammar_check_can_fail():
    """The checks refuse what Ollama's documentation does not allow."""
    with pytest.raises(AssertionError):
        parse_modelfile("FROM ./x.gguf\nPROMPT hello\n")
    with pytest.raises(AssertionError):
        fill_template("{{ .Messages }}", {})
    with pytest.raises(AssertionError):
        fill_template("{{ if .System }}x", {".System": "s"})
