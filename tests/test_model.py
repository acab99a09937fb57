"""Model loading: device/dtype, quantization report and skip list, LoRA counts, actionable errors."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from pipeline.model import hub
from pipeline.config import default_quantization
from pipeline.model import catalog
from pipeline.model import loading as gm
from pipeline.model.gemma3n import GEMMA3N
from pipeline.config import TrainConfig
from pipeline.errors import ConfigError, ModelLoadError, TrainingError


def test_device_and_dtype_rules():
    assert gm.resolve_device("cpu") == "cpu"
    assert gm.resolve_device("auto") in ("cuda", "mps", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            gm.resolve_device("cuda")
    with pytest.raises(ConfigError):
        gm.resolve_device("tpu")
    for device in ("cpu", "mps", "cuda"):
        if device == "cuda" and not torch.cuda.is_available():
            continue
        assert gm.compute_dtype(device) in (torch.bfloat16, torch.float32)
    # bf16 on CPU and MPS (faster steps on CPU; 4-bit experimental on MPS), NF4 on CUDA
    assert default_quantization("mps") == default_quantization("cpu") == "none"
    assert default_quantization("cuda") == "4bit"


@pytest.fixture(scope="module")
def model_4bit(tiny_model_dir):
    return gm.load_model(str(tiny_model_dir), device="cpu", quantization="4bit")


def test_4bit_report_lists_quantized_modules_and_keeps_the_skip_list(tiny_model_dir, model_4bit):
    import bitsandbytes as bnb

    model, report = model_4bit
    # the compute dtype this CPU runs fast (pipeline.calibration.precision): bf16 with native bf16, else fp32
    assert report.method == "4bit-nf4" and report.device == "cpu" and report.dtype == str(gm.compute_dtype("cpu")).removeprefix("torch.")
    quantized = {n for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
    assert set(report.quantized_modules) == quantized and report.quantized_count == len(quantized) > 0
    # every text-decoder projection is NF4 with double quantization ...
    projections = {n for n, _ in model.named_modules() if re.fullmatch(GEMMA3N.language_lora_regex, n)}
    assert projections and projections <= quantized
    some = model.get_submodule(sorted(projections)[0])
    assert some.weight.quant_state.quant_type == "nf4" and some.weight.quant_state.nested
    # ... and nothing in the towers, embedders, lm_head or AltUp's clamped coefficients is.
    for name in quantized:
        assert not name.startswith(("model.audio_tower", "model.vision_tower", "model.embed_audio", "model.embed_vision", "lm_head"))
        assert ".altup." not in name
    assert "lm_head" in report.kept_modules
    assert any(n.startswith("model.audio_tower.") for n in report.kept_modules)
    assert report.weight_bytes == gm.weight_bytes(model)


def test_quantization_shrinks_weights_and_none_quantizes_nothing(tiny_model_dir, model_4bit):
    _, report_4bit = model_4bit
    _, report_none = gm.load_model(str(tiny_model_dir), device="cpu", quantization="none")
    assert report_none.quantized_count == 0 and report_none.method == "none"
    assert report_4bit.weight_bytes < report_none.weight_bytes
    _, report_8bit = gm.load_model(str(tiny_model_dir), device="cpu", quantization="8bit")
    assert report_8bit.quantized_count > 0
    assert "model.language_model.per_layer_model_projection" in report_8bit.kept_modules


def test_a_quantization_that_quantizes_nothing_is_refused(tiny_model_dir, monkeypatch):
    skip_everything = replace(GEMMA3N, quantization_skip_modules=GEMMA3N.quantization_skip_modules + ("model.language_model",))
    monkeypatch.setitem(catalog.FAMILIES, "gemma3n", skip_everything)
    with pytest.raises(ModelLoadError, match="quantized no Linear layer"):
        gm.load_model(str(tiny_model_dir), device="cpu", quantization="4bit")


def _matching(model, regex):
    return {n for n, m in model.named_modules() if re.fullmatch(regex, n)}


@pytest.mark.parametrize("targets", ["language", "language+audio"])
def test_lora_counts_per_part_match_the_model(tiny_model_dir, targets):
    model, _ = gm.load_model(str(tiny_model_dir), device="cpu", quantization="4bit")
    expected_language = _matching(model, GEMMA3N.language_lora_regex)
    expected_audio = _matching(model, GEMMA3N.audio_lora_regex)
    peft_model, report = gm.attach_lora(model, TrainConfig(model=str(tiny_model_dir), lora_targets=targets, lora_rank=4))
    assert report.modules_per_part["language"] == len(expected_language) > 0
    assert report.modules_per_part["audio"] == (len(expected_audio) if targets == "language+audio" else 0)
    if targets == "language+audio":
        assert report.modules_per_part["audio"] > 0
    # only LoRA weights train; the base is frozen
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert report.trainable_params == sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert peft_model.base_model.model.is_activation_checkpointing


def test_lora_refuses_a_part_with_zero_modules(tiny_model_dir, monkeypatch):
    model, _ = gm.load_model(str(tiny_model_dir), device="cpu", quantization="none")
    monkeypatch.setitem(catalog.FAMILIES, "gemma3n", replace(GEMMA3N, audio_lora_regex=r"model\.audio_tower\.no_such_layer"))
    with pytest.raises(TrainingError, match=r"zero modules in audio \(counts"):
        gm.attach_lora(model, TrainConfig(model=str(tiny_model_dir), lora_targets="language+audio"))


def test_local_folder_errors_name_the_fix(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        gm.load_processor(str(tmp_path / "nope"))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match=r"missing config.json and tokenizer_config.json; found weights.bin"):
        gm.load_model(str(tmp_path), device="cpu", quantization="none")


def test_offline_and_not_cached_says_what_to_download(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="get-model --model google/gemma-3n-E2B-it"):
        gm.load_processor("google/gemma-3n-E2B-it")


def _empty_hub_cache(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))


def test_offline_with_an_empty_cache_fails_in_seconds(monkeypatch, tmp_path):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _empty_hub_cache(monkeypatch, tmp_path)
    for load in (gm.load_processor, lambda m: gm.load_model(m, device="cpu")):
        start = time.perf_counter()
        with pytest.raises(ModelLoadError, match=r"offline mode.*get-model --model google/gemma-3n-E2B-it"):
            load("google/gemma-3n-E2B-it")
        assert time.perf_counter() - start < 5


def test_an_unreachable_hub_fails_after_one_short_request(monkeypatch, tmp_path):
    import httpx
    import huggingface_hub
    from huggingface_hub import constants
    from transformers import AutoProcessor

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    _empty_hub_cache(monkeypatch, tmp_path)
    calls = []

    def unreachable(repo_id, **kwargs):
        calls.append(kwargs.get("timeout"))
        raise httpx.ConnectError("[Errno -2] Name or service not known")

    def must_not_download(*args, **kwargs):
        raise AssertionError("a download with retries was started although the hub is unreachable")

    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    monkeypatch.setattr(AutoProcessor, "from_pretrained", must_not_download)
    with pytest.raises(ModelLoadError, match=r"hub cannot be reached \(ConnectError.*get-model --model google/gemma-3n-E2B-it"):
        gm.load_processor("google/gemma-3n-E2B-it")
    assert calls == [hub.HUB_PROBE_TIMEOUT_S]


def test_a_cached_hub_model_is_loaded_without_a_request(monkeypatch):
    seen = []
    monkeypatch.setattr(hub, "_is_cached", lambda model_id: True)
    monkeypatch.setattr(hub, "_check_hub_reachable", lambda model_id: seen.append("probe"))

    def loader(model_id, **kwargs):
        seen.append(kwargs)
        if kwargs.get("local_files_only"):
            raise OSError("incomplete cache: model.safetensors missing")
        return "online"

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="incomplete cache"):
        hub.from_pretrained_cached_first(loader, "google/gemma-3n-E2B-it")
    assert seen == [{"local_files_only": True}]
    seen.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    assert hub.from_pretrained_cached_first(loader, "google/gemma-3n-E2B-it") == "online"
    assert seen == [{"local_files_only": True}, "probe", {}]


def test_only_the_bitsandbytes_kernels_notice_is_silenced(caplog):
    import logging

    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    with caplog.at_level(logging.WARNING):
        logger.warning(
            "Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please make sure you already "
            "`pip install kernels` and the kernels >= 0.11.1", "No module named 'kernels'"
        )
        logger.warning("some other bitsandbytes warning")
    assert "kernels-community" not in caplog.text
    assert "some other bitsandbytes warning" in caplog.text
    int8 = logging.getLogger("bitsandbytes.autograd._functions")
    with caplog.at_level(logging.WARNING):
        int8.warning("MatMul8bitLt: inputs will be cast from %s to float16 during quantization", "torch.bfloat16")
        int8.warning("another int8 warning")
    assert "MatMul8bitLt" not in caplog.text and "another int8 warning" in caplog.text


def _gated(status: int):
    import httpx
    from huggingface_hub.errors import GatedRepoError

    url = "https://huggingface.co/google/gemma-3n-E2B-it/resolve/main/config.json"
    response = httpx.Response(status, request=httpx.Request("GET", url))
    return GatedRepoError(f"{status} Client Error. Cannot access gated repo for url {url}.", response=response)


@pytest.mark.parametrize(
    "raised, expected",
    [
        (lambda: OSError("You are trying to access a gated repo.") , "Not logged in|not been granted"),
        (lambda: _gated(401), "Not logged in to Hugging Face"),
        (lambda: _gated(403), "not been granted access"),
        (lambda: ImportError("TimmWrapperModel requires the timm library"), "pip install timm"),
        (lambda: OSError(28, "No space left on device"), "disk filled up"),
    ],
)
def test_hub_and_environment_errors_become_actionable(raised, expected):
    with pytest.raises(ModelLoadError, match=expected):
        with hub.translate_load_errors("google/gemma-3n-E2B-it", "model"):
            try:
                raise raised()
            except Exception as inner:  # transformers wraps hub errors in an OSError
                raise OSError("wrapped by transformers") from inner


def test_not_enough_disk_for_a_download_is_refused(monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(hub, "_is_cached", lambda model_id: False)
    monkeypatch.setattr(hub, "_hub_offline", lambda: False)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 10**12 - 2 * 10**9, 2 * 10**9))
    with pytest.raises(ModelLoadError, match="needs about 10 GiB but only 1.9 GiB is free"):
        hub.check_disk_for_download("google/gemma-3n-E2B-it")


def test_adapter_folder_without_adapter_is_refused(tiny_model_dir, tmp_path):
    model, _ = gm.load_model(str(tiny_model_dir), device="cpu", quantization="none")
    with pytest.raises(ModelLoadError, match="not a LoRA adapter folder"):
        gm.load_adapter(model, tmp_path)


def test_dropping_the_vision_tower_and_host_side_per_layer_embeddings_keep_the_outputs(tiny_model_dir):
    """`vision_tower=False` frees the tower; the per-layer table behind `HostEmbedding` gives the same
    logits, is invisible to `model.to()` and `state_dict()`, and LoRA training still runs on audio rows."""
    from pipeline.training.probe import synthetic_batch

    model, report = gm.load_model(str(tiny_model_dir), device="cpu", quantization="none")
    batch = synthetic_batch(model.config, 2, 256, 3.0, answer_tokens=16)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        reference = model(**inputs).logits
    tower_bytes = gm._tensor_bytes(model.model.vision_tower)
    assert tower_bytes > 0 and gm.drop_vision_tower(model) == tower_bytes and model.model.vision_tower is None
    assert gm.drop_vision_tower(model) == 0
    assert gm.weight_bytes(model) == report.weight_bytes - tower_bytes
    assert gm.keep_per_layer_embeddings_on_host(model) == 0  # already in host RAM on CPU: nothing to move
    language_model = model.model.language_model
    table = language_model.embed_tokens_per_layer
    language_model.embed_tokens_per_layer = gm.HostEmbedding(table)
    assert not any(p is table.weight for p in model.parameters())
    assert not any(k.endswith("embed_tokens_per_layer.weight") for k in model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, reference, rtol=0, atol=0)
    lora_model, _ = gm.attach_lora(model, TrainConfig(model=str(tiny_model_dir), lora_rank=4, lora_alpha=8))
    lora_model.train()
    loss = lora_model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss) and all(
        p.grad is not None for n, p in lora_model.named_parameters() if p.requires_grad and "language_model" in n)
    model.to("meta")  # Trainer may call model.to(device): the host table must stay where it is
    assert language_model.embed_tokens_per_layer.table.weight.device.type == "cpu"


def test_load_model_applies_the_placement_settings(tiny_model_dir):
    model, report = gm.load_model(str(tiny_model_dir), device="cpu", quantization="none", vision_tower=False,
                                  ple_on_cpu=True)
    assert model.model.vision_tower is None
    # ple_on_cpu is a CUDA setting: on CPU the table stays a plain module
    assert not isinstance(model.model.language_model.embed_tokens_per_layer, gm.HostEmbedding)
    full, full_report = gm.load_model(str(tiny_model_dir), device="cpu", quantization="none")
    assert report.weight_bytes == full_report.weight_bytes - gm._tensor_bytes(full.model.vision_tower)


def test_a_config_missing_an_entry_is_said_in_words_not_as_a_keyerror():
    """Issue 32's leftovers, item 10: "KeyError: 'x'" (Python's repr of a missing key) reached messages. The
    model families' config checks name the missing entry; `cause_words` says any other error in words."""
    from pipeline.errors import ModelLoadError, cause_words
    from pipeline.model import gemma3n, gemma4

    for family in (gemma3n, gemma4):
        with pytest.raises(ModelLoadError) as refused:
            family.shape({"text_config": {}, "audio_config": {}, "vision_config": {}})
        assert "KeyError" not in str(refused.value) and "have no `" in str(refused.value), str(refused.value)
    assert cause_words(KeyError("lm_head")) == "the entry `lm_head` is missing"
    assert "KeyError" not in cause_words(KeyError("x")) and cause_words(RuntimeError()) == "a RuntimeError, with no message"


def test_training_attention_asks_each_part_for_what_it_does(tiny_model_dir):
    """The new-user pass: the Train tab's log showed transformers' warning "`attn_implementation='eager'` is not
    propagated to the wrapped `timm` model". Training asks for eager attention where the model has it and for
    `sdpa` from a part that transformers builds as a `timm` model (Gemma 3n's vision tower), which is what that
    part runs anyway; Gemma 4's parts all have eager attention."""
    gemma3n = gm.training_attention(GEMMA3N.model_class().config_class)
    assert gemma3n == {"": "eager", "text_config": "eager", "vision_config": "sdpa", "audio_config": "eager"}
    assert gm.training_attention(catalog.FAMILIES["gemma4"].model_class().config_class) == "eager"
    kwargs = gm.load_kwargs(str(tiny_model_dir), device="cpu", dtype=torch.float32, quantization="none")
    assert kwargs["attn_implementation"] == gemma3n
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_model_dir, attn_implementation=gemma3n)
    assert (config.text_config._attn_implementation, config.vision_config._attn_implementation) == ("eager", "sdpa")
