"""The rule of issue 43: every supervised answer of a training row is preceded by exactly the tokens the
product sends when it asks for that answer (`processor.apply_chat_template(history, add_generation_prompt=True,
tokenize=True)`, what `pipeline.tutor.infer.Tutor` sends), for both families and every kind, with and without
a system prompt, on the processors' own templates (the tiny stand-ins': Gemma 3n's, and Gemma 4's with the
empty thought channel of thinking off); the loss covers the answer and its turn end, never the channel.
"""

from __future__ import annotations

import numpy as np
import pytest

SR = 16_000


def _clip(seconds: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(seconds * SR)) * 0.1).astype(np.float32)


def _conversations(tokenizer):
    """(name, messages, clips) of every kind, each with its system prompt and without it."""
    from pipeline.conversation.messages import conversation_messages

    a, b = _clip(1.37, 1), _clip(2.9, 2)
    turns = [{"role": "learner", "clip": 0}, {"role": "tutor", "text": "Say it again."},
             {"role": "learner", "clip": 1, "text": "bear"}, {"role": "tutor", "text": "Better, keep going."}]
    kinds = [
        ("read_aloud", conversation_messages("read_aloud", target_text="We call it bear.", feedback="Accuracy 7/10.",
                                             audios=[a], tokenizer=tokenizer), [a]),
        ("free_speech", conversation_messages("free_speech", prompt="Describe your last holiday.",
                                              feedback="Good answer.", audios=[b], tokenizer=tokenizer), [b]),
        ("dialogue", conversation_messages("dialogue", turns=turns, audios=[a, b], tokenizer=tokenizer), [a, b]),
    ]
    out = []
    for name, messages, clips in kinds:
        out.append((name, messages, clips))
        out.append((f"{name} without a system prompt", messages[1:], clips))
    return out


def _ids(batch) -> list[int]:
    ids = batch["input_ids"]
    ids = ids[0] if not isinstance(ids[0], int) else ids
    return [int(t) for t in ids]


@pytest.fixture(scope="module", params=["gemma3n", "gemma4"])
def processor(request, tiny_model_dir, tiny_gemma4_dir):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_model_dir if request.param == "gemma3n" else tiny_gemma4_dir)


def test_every_supervised_answer_follows_the_prompt_the_product_sends(processor):
    """The training batch (`ChatCollator`, the trainer's) of each kind: each supervised span is preceded token
    for token by the answer-time prompt of the conversation up to that answer, and holds the answer + turn end."""
    import torch

    from pipeline.model.tokens import IGNORE_INDEX, asked_extra, family_of_tokenizer
    from pipeline.training.collate import ChatCollator, build_labels

    tok = processor.tokenizer
    family = family_of_tokenizer(tok)
    collator = ChatCollator(processor)
    for name, messages, clips in _conversations(tok):
        ids = _ids(collator._tokenize([messages], clips))
        labels = build_labels(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), tok)[0].tolist()
        runs = _runs([i for i, t in enumerate(labels) if t != IGNORE_INDEX])
        answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        # a template that asks as its history shows (Gemma 3n, E2B's): every answer; one that asks with the empty
        # channel (the stand-in Gemma 4's), which past turns never carry: the row's last answer only
        assert len(runs) == (1 if asked_extra(tok)[0] else len(answers)), name
        for (start, end), index in zip(runs, answers[-len(runs):]):
            prompt = _ids(processor.apply_chat_template(messages[:index], add_generation_prompt=True, tokenize=True,
                                                        return_dict=True))
            assert ids[:start] == prompt, f"{family.name} {name}: the row's prefix is not the answer-time prompt"
            assert tok.decode(ids[start:end]) == messages[index]["content"][0]["text"] + family.turn_end, name
        assert "<|channel>" not in tok.decode([t for t in labels if t != IGNORE_INDEX])


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Half-open runs of consecutive positions."""
    runs: list[tuple[int, int]] = []
    for p in positions:
        if runs and runs[-1][1] == p:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    return runs


def test_the_fast_count_equals_the_training_batch(processor):
    """`TokenCounter.render_training` (the dataset build's count, the estimate's lengths) gives exactly the
    training batch's tokens, and `check_rows` finds every row trainable."""
    from pipeline.model.tokens import ClipLength, TokenCounter
    from pipeline.training.collate import ChatCollator

    counter = TokenCounter(processor)
    collator = ChatCollator(processor)
    for name, messages, clips in _conversations(processor.tokenizer):
        ids = _ids(collator._tokenize([messages], clips))
        lengths = [ClipLength(len(c) / SR) for c in clips]
        placeholders = [dict(m, content=[dict(b, audio=lengths.pop(0)) if b.get("type") == "audio" else b
                                         for b in m["content"]]) for m in messages]
        assert counter.encode_texts([counter.render_training(placeholders)])[0] == ids, name


def test_the_asked_header_is_read_from_the_template(processor):
    """Gemma 3n asks as its history shows; the stand-in Gemma 4 adds the empty thought channel of thinking off."""
    from pipeline.model.tokens import answer_header, asked_extra, family_of_tokenizer

    family = family_of_tokenizer(processor.tokenizer)
    extra, ids = asked_extra(processor.tokenizer)
    if family.name == "gemma3n":
        assert (extra, ids) == ("", ()) and answer_header(processor.tokenizer) == "<start_of_turn>model\n"
    else:
        assert extra == "<|channel>thought\n<channel|>" and ids
        assert answer_header(processor.tokenizer) == "<|turn>model\n<|channel>thought\n<channel|>"


@pytest.mark.slow
def test_the_build_trains_one_row_per_tutor_answer_and_says_what_it_costs(tmp_path, tiny_model_dir, tiny_gemma4_dir):
    """The sample pack's tutoring JSONL (dialogues with two tutor answers, free speech): built for the stand-in
    Gemma 4, each dialogue of the train split trains one row per answer, each row within the rule; the report
    gives rows and tokens before and after; Gemma 3n's rows are unchanged; a rebuild of a dataset made before
    the rule says that its rows changed, and why (once)."""
    import contextlib
    import io
    import json
    from pathlib import Path

    from datasets import load_from_disk
    from transformers import AutoProcessor

    from pipeline.data.cli import import_main
    from pipeline.data.dataset import build_dataset
    from pipeline.training.collate import check_rows

    pack = Path(__file__).resolve().parents[1] / "sample_data" / "speechocean762-pack" / "tutoring.jsonl"
    ws = tmp_path / "ws"
    with contextlib.redirect_stdout(io.StringIO()):
        assert import_main(["--workspace", str(ws), "--source", str(pack)]) == 0
    before = build_dataset(ws, str(tiny_model_dir), eval_fraction=0.0, max_length=1024)
    assert before.asked_rows["template_adds"] == "" and before.asked_rows["rows"] == before.asked_rows["rows_before"]
    assert before.asked_rows["tokens"] == before.asked_rows["tokens_before"]
    build_dataset(ws, str(tiny_gemma4_dir), eval_fraction=0.0, max_length=1024)
    path = ws / "dataset" / "build_report.json"
    old = {k: v for k, v in json.loads(path.read_text()).items() if k not in ("row_rule", "asked_rows")}
    path.write_text(json.dumps(old))  # a report as builds before the rule wrote it
    report = build_dataset(ws, str(tiny_gemma4_dir), eval_fraction=0.0, max_length=1024)
    cost = report.asked_rows
    dialogues = [k for k in report.kinds if k == "dialogue"]
    assert dialogues and cost["template_adds"] == "<|channel>thought\n<channel|>"
    train = [dict(r) for r in load_from_disk(str(ws / "dataset"))["train"]]
    cuts = [r["id"] for r in train if "@" in r["id"]]
    assert cuts and cost["rows"] == len(train) == cost["rows_before"] + len(cuts)
    assert cost["tokens"] == sum(r["num_tokens"] for r in train) > cost["tokens_before"]
    assert cost["supervised"] == cost["supervised_before"]  # every answer still learned, each once
    assert any("rows changed" in note and "thought" in note for note in report.notes), report.notes
    assert "each trained answer follows the prompt" in report.summary()
    processor = AutoProcessor.from_pretrained(tiny_gemma4_dir)
    assert check_rows(processor, train, max_length=1024) == []
    from pipeline.training.worst_case import answer_token_counts  # the preflight's worst case counts the same

    from pipeline.training.collate import ChatCollator

    labels = ChatCollator(processor)(train)["labels"]
    assert answer_token_counts(processor, train) == [int((row != -100).sum()) for row in labels]
    again = build_dataset(ws, str(tiny_gemma4_dir), eval_fraction=0.0, max_length=1024)
    assert not any("rows changed" in note for note in again.notes)
    saved = json.loads(path.read_text())
    assert saved["row_rule"] == 2 and saved["asked_rows"] == cost


def test_the_rule_holds_on_a_gemma_4_template_google_wrote(tiny_gemma4_dir):
    """Google's Gemma 4 chat template as llama.cpp ships it (`models/templates/google-gemma-4-31B-it.jinja` in the
    llama.cpp source this project fetches from PyPI's llama-cpp-python sdist, `pipeline.export.llama_cpp`), put on
    the stand-in's processor: every kind's training row still holds the rule. Skipped only where that source was
    never fetched (`python -m pipeline llama-cpp`; `tests/test_gguf.py` fetches it)."""
    from transformers import AutoProcessor

    from pipeline.errors import ExportError
    from pipeline.export.llama_cpp import source_dir
    from pipeline.model.tokens import asked_extra

    try:
        template = (source_dir(fetch=False) / "models" / "templates" / "google-gemma-4-31B-it.jinja").read_text()
    except ExportError:
        pytest.skip("llama.cpp's source is not in the cache: run `python -m pipeline llama-cpp`")
    processor = AutoProcessor.from_pretrained(tiny_gemma4_dir)
    processor.chat_template = processor.tokenizer.chat_template = template
    assert asked_extra(processor.tokenizer)[0] == "<|channel>thought\n<channel|>"
    test_every_supervised_answer_follows_the_prompt_the_product_sends(processor)
    test_the_fast_count_equals_the_training_batch(processor)


def test_a_gemma_4_template_that_asks_as_its_history_shows_trains_every_answer_in_one_row(tiny_gemma4_dir):
    """Google's E2B/E4B templates end the generation prompt at `<|turn>model\\n` (no empty channel; Ollama's copies
    of them and its PR #15560): the stand-in's template without the channel stands for them here. The rule then
    changes nothing: rows are the rendered conversation, every tutor answer of a dialogue supervised in one row."""
    from transformers import AutoProcessor

    from pipeline.model.tokens import answer_header, asked_extra

    processor = AutoProcessor.from_pretrained(tiny_gemma4_dir)
    channel = "{{- '<|channel>thought\n<channel|>' -}}"
    assert channel in processor.chat_template
    processor.chat_template = processor.tokenizer.chat_template = processor.chat_template.replace(channel, "")
    assert asked_extra(processor.tokenizer) == ("", ()) and answer_header(processor.tokenizer) == "<|turn>model\n"
    test_every_supervised_answer_follows_the_prompt_the_product_sends(processor)
    test_the_fast_count_equals_the_training_batch(processor)
