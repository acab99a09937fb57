"""Gemma 4 as a second base: its family's facts against transformers 5.24, and the pipeline's token counts,
answer spans, LoRA targets and memory terms on the tiny stand-in. The whole flow (CLI and app) and the GGUF
export are in tests/test_gguf.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.model import gemma4
from pipeline.model.catalog import FAMILIES, KNOWN_MODELS, family_for, load_model_config, model_shape, part_params

SR = 16_000


def _clip(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(round(seconds * SR))) / SR
    return (0.2 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def test_the_catalog_offers_gemma4_beside_gemma3n_and_keeps_the_default():
    assert KNOWN_MODELS[0] == "google/gemma-3n-E2B-it"
    assert "google/gemma-4-E2B-it" in KNOWN_MODELS and "google/gemma-4-E4B-it" in KNOWN_MODELS
    assert family_for("google/gemma-4-E2B-it").name == "gemma4" and family_for("google/gemma-3n-E2B-it").name == "gemma3n"
    assert FAMILIES["gemma4"].gguf_audio and not FAMILIES["gemma3n"].gguf_audio


def test_a_folders_family_is_read_from_its_config(tiny_gemma4_dir, tiny_model_dir, tmp_path):
    assert family_for(str(tiny_gemma4_dir)).name == "gemma4"
    assert family_for(str(tiny_model_dir)).name == "gemma3n"
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    from pipeline.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="model_type 'llama'.*Gemma 4"):
        family_for(str(other))


@pytest.mark.parametrize("seconds", [0.015, 0.02, 0.5, 1.0, 1.01, 1.3, 4.0, 7.31, 29.99, 30.0])
def test_audio_tokens_equal_the_processors_count(tiny_gemma4_dir, seconds):
    """`audio_tokens` is the processor's own count (the placeholders apply_chat_template inserts), and within
    one token of ceil(ms / 40), capped at 750."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_gemma4_dir)
    n = int(round(seconds * SR))
    assert gemma4.audio_tokens(seconds) == processor._compute_audio_num_tokens(np.zeros(n), SR)
    assert abs(gemma4.audio_tokens(seconds) - min(750, math.ceil(seconds * 1000 / 40))) <= 1
    if seconds >= 0.5:  # the feature extractor's mask, through the processor's placeholder expansion
        messages = [{"role": "user", "content": [{"type": "audio", "audio": _clip(seconds)}, {"type": "text", "text": "hi"}]}]
        ids = processor.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
        ids = ids[0] if isinstance(ids[0], list) else ids
        assert ids.count(processor.tokenizer.convert_tokens_to_ids("<|audio|>")) == gemma4.audio_tokens(seconds)
    assert gemma4.audio_tokens(31.0) == 750 and gemma4.audio_tokens(0.0) == 0


def test_part_params_equal_a_meta_build_of_e2b_e4b_and_the_tiny_model(tiny_gemma4_dir):
    import torch
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    expected = {"google/gemma-4-E2B-it": 5_104_297_504, "google/gemma-4-E4B-it": 7_941_100_832, str(tiny_gemma4_dir): None}
    for model, total in expected.items():
        data = load_model_config(model)
        with torch.device("meta"):
            built = Gemma4ForConditionalGeneration(Gemma4Config.from_dict(data))
        real = sum(p.numel() for p in built.parameters())
        assert total is None or real == total
        parts = part_params(model_shape(data))
        assert sum(pp.total for pp in parts.values()) == real
        audio = sum(p.numel() for n, p in built.named_parameters() if ".audio_tower." in n)
        assert parts["audio_encoder"].total == audio
    e2b = part_params(model_shape(load_model_config("google/gemma-4-E2B-it")))
    assert round(e2b["per_layer_embedding"].total / 1e9, 2) == 2.35 and round(e2b["audio_encoder"].total / 1e6) == 305


def test_the_shipped_e2b_shape_has_the_public_facts():
    e2b = model_shape(load_model_config("google/gemma-4-E2B-it"))
    assert (e2b.num_layers, e2b.hidden_size, e2b.num_kv_shared_layers, e2b.hidden_size_per_layer_input) == (35, 1536, 20, 256)
    assert (e2b.audio_layers, e2b.audio_hidden, e2b.audio_output_dims) == (12, 1024, 1536)
    # full-attention layers (every fifth) use head size 512, the KV-sharing layers a double-wide MLP
    assert e2b.layer_head_dim(4) == 512 and e2b.layer_head_dim(3) == 256
    assert e2b.intermediate_sizes[14] == 6144 and e2b.intermediate_sizes[15] == 12288


def _kinds_messages(tokenizer):
    from pipeline.conversation.messages import build_dialogue_messages, build_free_speech_messages, build_messages

    a, b = _clip(1.37, 1), _clip(2.9, 2)
    return [
        (build_messages("We call it bear.", "Accuracy 7/10.", a, tokenizer=tokenizer), [a]),
        (build_free_speech_messages("Describe your last holiday.", "Good answer.", b, tokenizer=tokenizer), [b]),
        (build_dialogue_messages([{"role": "learner", "clip": 0}, {"role": "tutor", "text": "Say it again."},
                                  {"role": "learner", "clip": 1, "text": "bear"}, {"role": "tutor", "text": "Better."}],
                                 [a, b], tokenizer=tokenizer), [a, b]),
    ]


def test_token_counts_and_answer_spans_follow_the_processor_for_every_kind(tiny_gemma4_dir):
    """TokenCounter's fast count equals apply_chat_template's for the three sample kinds (audio tokens by clip
    length), and a training row's supervised span is exactly its last tutor answer + `<turn|>`."""
    from transformers import AutoProcessor

    from pipeline.data.rows import row_clip_lengths  # noqa: F401 - the build's path (ClipLength) is checked below
    from pipeline.model.tokens import ClipLength, TokenCounter, all_answer_spans, answer_spans
    from pipeline.training.collate import ChatCollator

    processor = AutoProcessor.from_pretrained(tiny_gemma4_dir)
    tok = processor.tokenizer
    counter = TokenCounter(processor)
    assert counter.family.name == "gemma4"
    for messages, clips in _kinds_messages(tok):
        ids = processor.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
        ids = list(ids[0] if isinstance(ids[0], list) else ids)
        assert counter.count([messages]) == [len(ids)]
        lengths = [ClipLength(len(c) / SR) for c in clips]
        placeholders = [dict(m, content=[dict(b, audio=lengths.pop(0)) if b.get("type") == "audio" else b
                                         for b in m["content"]]) for m in messages]
        assert counter.count([placeholders]) == [len(ids)]
        # the training row: the last answer after the generation prompt (the empty thought channel,
        # tests/test_asked_rows.py); past answers as the history renders them are not supervised
        ids = ChatCollator(processor)._tokenize([messages], clips)["input_ids"][0].tolist()
        assert counter.encode_texts([counter.render_training(placeholders)]) == [ids]
        spans = all_answer_spans(ids, tok)
        answers = [m for m in messages if m["role"] == "assistant"][-1:]
        assert len(spans) == len(answers)
        for (start, end), answer in zip(spans, answers):
            assert tok.decode(ids[start:end]) == answer["content"][0]["text"] + "<turn|>"
        assert answer_spans(ids, tok) == spans[-1]
    prompt = processor.apply_chat_template(_kinds_messages(tok)[0][0][:2], tokenize=True, return_dict=True,
                                           add_generation_prompt=True)["input_ids"]
    assert answer_spans(list(prompt[0] if isinstance(prompt[0], list) else prompt), tok) is None


def test_lora_wraps_the_linear_inside_each_clippable_audio_linear(tiny_gemma4_dir):
    """peft refuses `Gemma4ClippableLinear` itself; the family's audio targets are the `.linear` inside, so
    language+audio LoRA attaches to every conformer projection and the clamps stay around it."""
    import torch
    from peft import LoraConfig, get_peft_model

    from pipeline.config import TrainConfig
    from pipeline.model.loading import attach_lora, load_model

    model, _ = load_model(str(tiny_gemma4_dir), device="cpu", quantization="none")
    with pytest.raises(ValueError, match="not supported"):
        get_peft_model(model, LoraConfig(target_modules=r"model\.audio_tower\.layers\.0\.self_attn\.q_proj"))
    model, _ = load_model(str(tiny_gemma4_dir), device="cpu", quantization="none")
    peft_model, report = attach_lora(model, TrainConfig(model=str(tiny_gemma4_dir), lora_targets="language+audio"))
    assert report.modules_per_part == {"language": 4 * 5 + 2 * 2, "audio": 2 * 10}
    wrapped = peft_model.base_model.model.model.audio_tower.layers[0].self_attn.q_proj
    assert type(wrapped).__name__ == "Gemma4ClippableLinear" and "lora" in type(wrapped.linear).__module__
    from pipeline.memory.terms import lora_params

    shape = model_shape(load_model_config(str(tiny_gemma4_dir)))
    config = TrainConfig(model=str(tiny_gemma4_dir), lora_targets="language+audio")
    assert report.trainable_params == lora_params(shape, config)
    assert torch.isfinite(next(iter(p for p in peft_model.parameters() if p.requires_grad))).all()


def test_a_layers_saved_activations_match_autograds_saved_tensors(tiny_gemma4_dir):
    """`layer_saved_bytes_per_token` of a Gemma 4 decoder layer (no AltUp/LAuReL, 5 hidden norms, its own head
    size) against the tensors autograd saves for one layer with LoRA, measured with saved_tensors_hooks."""
    import torch

    from pipeline.config import TrainConfig
    from pipeline.memory.inputs import EstimateOptions
    from pipeline.memory.terms import layer_saved_bytes_per_token
    from pipeline.model.loading import attach_lora, load_model

    config = TrainConfig(model=str(tiny_gemma4_dir), lora_dropout=0.0, gradient_checkpointing=False, lora_rank=8)
    model, _ = load_model(str(tiny_gemma4_dir), device="cpu", quantization="none")
    model = model.float()
    peft_model, _ = attach_lora(model, config)
    peft_model.train()
    shape = model_shape(load_model_config(str(tiny_gemma4_dir)))
    seq = 64
    for layer in (0, 1, 3):  # sliding owner, full owner, full KV-sharing (double-wide MLP)
        saved: dict[int, int] = {}

        def pack(t):
            saved[t.data_ptr()] = max(saved.get(t.data_ptr(), 0), t.numel() * t.element_size())
            return t

        ids = torch.randint(10, 2000, (1, seq))
        inner = peft_model.base_model.model.model.language_model
        captured = {}

        def grab(module, args, kwargs):
            captured.update(args=args, kwargs=kwargs)
            raise StopIteration

        handle = inner.layers[layer].register_forward_pre_hook(grab, with_kwargs=True)
        with pytest.raises(StopIteration):
            peft_model(input_ids=ids)
        handle.remove()
        hidden = captured["args"][0].detach().requires_grad_(True)
        kwargs = dict(captured["kwargs"])
        if layer == 3:  # a KV-sharing layer reads the stored K/V of an earlier one
            kwargs["shared_kv_states"] = {k: (v[0].detach(), v[1].detach()) for k, v in kwargs["shared_kv_states"].items()}
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = inner.layers[layer](hidden, *captured["args"][1:], **kwargs)
        measured = sum(saved.values()) - sum(p.numel() * p.element_size() for p in inner.layers[layer].parameters()
                                              if p.data_ptr() in saved)
        estimate = layer_saved_bytes_per_token(shape, config, "cpu", EstimateOptions(attn_implementation="eager",
                                                                                     compute_dtype="float32"), layer, seq) * seq
        assert abs(estimate - measured) <= 0.15 * measured, (layer, estimate, measured)
        del out


def test_plan_lists_gemma4_e2b_and_e4b_rows_for_every_method(tmp_path, capsys):
    """`plan` prices Gemma 4 E2B (and E4B) from the shipped configs, no weights: full, LoRA, int8 and QLoRA."""
    import json

    from pipeline.__main__ import main as dispatch

    assert dispatch(["plan", "--workspace", str(tmp_path), "--device", "cuda", "--memory-gb", "16", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    for model in ("google/gemma-4-E2B-it", "google/gemma-4-E4B-it"):
        methods = {(r["finetuning_type"], r["quantization"]) for r in rows if r["model"] == model}
        assert methods == {("full", "none"), ("lora", "none"), ("lora", "8bit"), ("lora", "4bit")}, model
    lora = {r["model"]: r["total_bytes"] for r in rows if r["finetuning_type"] == "lora" and r["quantization"] == "none"}
    assert 0 < lora["google/gemma-4-E2B-it"] < lora["google/gemma-4-E4B-it"]


def test_plan_marks_gemma4_e4b_rows_estimate_only_and_e2b_rows_normal(tmp_path, capsys):
    """Issue 30: E4B is priced but not a supported training target (never trained or measured here), so its
    rows say "estimate only", in the JSON, the text table and the Memory tab's table; E2B's and Gemma 3n's do not."""
    import json

    from pipeline.__main__ import main as dispatch
    from ui.memory_view import plan_markdown

    args = ["plan", "--workspace", str(tmp_path), "--device", "cuda", "--memory-gb", "16"]
    assert dispatch([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    only = {r["model"] for r in result["rows"] if r["estimate_only"]}
    assert only == {"google/gemma-4-E4B-it"}, only
    assert dispatch(args) == 0
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("google/"):
            assert ("estimate only" in line) == line.startswith("google/gemma-4-E4B-it"), line
    table = [line for line in plan_markdown(result).splitlines() if line.startswith("| ") and "GiB" in line]
    marked = [line for line in table if "†" in line]
    assert len(marked) == 4 and all(line.startswith("| gemma-4-E4B-it † |") for line in marked), marked
    assert "† gemma-4-E4B-it: estimate only" in plan_markdown(result), "the mark, said once under the table"


def test_the_app_makes_the_tiny_gemma4_and_offers_the_gguf_export(tmp_path):
    """The model picker's second tiny-model button writes the tiny Gemma 4 into the workspace and selects it;
    the export section offers the GGUF (the browser walk of a Gemma 4 run: tests/test_e2e_gemma4.py)."""
    from pipeline.model.catalog import family_for
    from ui.common import export_choices
    from ui.tutor_app import TutorApp

    ui = TutorApp(tmp_path / "ws")
    picker, note = ui.make_tiny_gemma4(progress=None)
    assert family_for(picker.value).name == "gemma4" and "random weights" in note
    assert picker.value in picker.choices or picker.value in [c[0] if isinstance(c, tuple) else c for c in picker.choices]
    assert "gguf" in [value for _, value in export_choices(ui.state.ws, None)]


def test_a_gemma3n_run_is_refused_a_gguf_with_the_reason_and_the_name_to_ask_for(tiny_model_dir, tmp_path):
    """Gemma 3n's audio does not run in llama.cpp/Ollama: `--format gguf` says so before any work, and names
    `gguf-text-only`, the only GGUF it writes for such a run."""
    import json

    from pipeline.errors import ExportError
    from pipeline.export.cli import export_run

    run_dir = tmp_path / "ws" / "runs" / "r3n"
    (run_dir / "adapter").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"model": str(tiny_model_dir)}), encoding="utf-8")
    (run_dir / "adapter" / "adapter_config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ExportError, match=r"(?s)cannot run Gemma 3n's audio.*--format gguf-text-only"):
        export_run(tmp_path / "ws", "r3n", "gguf", tmp_path / "out")
    assert not (tmp_path / "out" / "r3n-gguf").exists()


def test_the_gguf_chat_template_turns_thinking_off_and_gives_the_tutor_its_system_prompt():
    """What the GGUF carries (`tutor_chat_template`): rendered as llama.cpp renders it (Jinja, with
    `enable_thinking` passed as true, as llama.cpp always does), thinking stays off and the tutor's system
    prompt is the system turn unless the request brings its own."""
    import jinja2

    from pipeline.export.gguf import modelfile, tutor_chat_template

    base = ("{%- for m in messages -%}<|turn>{{ m['role'] }}\n{{ m['content'] }}<turn|>\n{%- endfor -%}"
            "{%- if not enable_thinking -%}<|channel>thought\n<channel|>{%- endif -%}")
    template = jinja2.Environment().from_string(tutor_chat_template(base, "You are a \"patient\" tutor."))
    alone = template.render(messages=[{"role": "user", "content": "Hi"}], enable_thinking=True)
    assert alone.startswith('<|turn>system\nYou are a "patient" tutor.<turn|>') and alone.endswith("<channel|>")
    own = template.render(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                          enable_thinking=True)
    assert "patient" not in own and own.startswith("<|turn>system\nBe brief.")
    text = modelfile("week1", "You are a tutor.")
    assert "FROM ./week1.gguf\nFROM ./mmproj-week1.gguf" in text and 'PARAMETER stop "<turn|>"' in text
    assert "FROM ./mmproj" not in modelfile("week1", "You are a tutor.", projector=False)


def test_llama_cpp_is_found_in_its_cache_and_a_missing_source_names_the_command(tmp_path, monkeypatch):
    from pipeline.errors import ExportError
    from pipeline.export import llama_cpp

    monkeypatch.setenv("TUTOR_LLAMA_CPP_DIR", str(tmp_path / "llama"))
    assert llama_cpp.cache_dir() == tmp_path / "llama" and llama_cpp.built_tools() == {}
    with pytest.raises(ExportError, match="python -m pipeline llama-cpp"):
        llama_cpp.source_dir(fetch=False)
    (tmp_path / "llama" / "src").mkdir(parents=True)
    (tmp_path / "llama" / "src" / "convert_hf_to_gguf.py").write_text("# llama.cpp's converter\n")
    command = llama_cpp.converter_command("model", "out.gguf", "f16", mmproj=True)
    assert command[1].endswith("convert_hf_to_gguf.py") and command[-1] == "--mmproj" and "f16" in command
    assert llama_cpp.converter_env()["PYTHONPATH"].startswith(str(tmp_path / "llama" / "src" / "gguf-py"))
