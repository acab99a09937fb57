"""Gemma 3n's tiny stand-in: its small config, chat template and tokens (`TINY_GEMMA3N`), built by
`pipeline.model.tiny_model.build_stand_in`.

`python -m pipeline make-tiny-model OUT_DIR` writes it; `Gemma3nForConditionalGeneration.from_pretrained(OUT_DIR)`
loads it offline, so every code path (chat template, 188 audio soft tokens, quantization, LoRA, training,
generation) runs on a CPU in seconds.

What is real and what is small:
- The architecture is the real `Gemma3nForConditionalGeneration` (AltUp, LAuReL, per-layer
  embeddings, KV sharing, activation sparsity, the USM-style conformer audio encoder), only with
  2-4 layers and hidden sizes of 32-128. The vision tower is timm's `test_vit` stub (the real
  MobileNet-V5 adds 294 M parameters; we never feed images).
- The audio feature extractor is the real `Gemma3nAudioFeatureExtractor` with its defaults (128 mel
  bins, 16 kHz, 10 ms hop), so every clip still becomes `<start_of_audio>` + 188 audio soft tokens
  + `<end_of_audio>`.
- Token-id layout follows Gemma 3n's (`Gemma3nConfig` defaults): text ids `[0, T)` (these get
  per-layer embeddings, `vocab_size_per_layer_input = T`), then the vision block
  `[T, T + M)` starting with `<end_of_image>`, `<image_soft_token>`, then the audio block
  `[T + M, T + 2M)` starting with `<end_of_audio>`, `<audio_soft_token>`; `vocab_size = T + 2M`.
  The real model has T = 262,144 and M = 128; here T = 2,048 and M = 8.

Torch-free at import.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pipeline.model.tiny_model import FINAL_NORM_SCALE, TinySpec, build_stand_in, media_token_ids, tiny_decoder, token_ids

SPECIALS = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<start_of_audio>",
)
"""Gemma 3n's fixed special tokens, in the order of their ids in the real tokenizer's first rows
(pad=0, eos=1, bos=2, unk=3, mask=4); the rest get the next ids here (the real ids are larger)."""

# The chat template of google/gemma-3n-E2B-it (`chat_template.jinja` on the hub): `<bos>`, a system
# message folded into the first user turn, roles user/model, each turn closed by `<end_of_turn>\n`.
GEMMA3N_CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'audio' -%}
                {{ '<audio_soft_token>' }}
            {%- elif item['type'] == 'image' -%}
                {{ '<image_soft_token>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

LLAMA_CPP_PER_LAYER_INPUT = 256
LLAMA_CPP_KV_FROM_START = 20
LLAMA_CPP_SPARSE_LAYERS = 10
LLAMA_CPP_SWA_PATTERN = 5
"""What llama.cpp's Gemma 3n graph takes from E2B as fixed numbers, not from the GGUF (llama.cpp
`src/llama-hparams.h` `n_embd_altup = 256`; `src/models/gemma3n.cpp` `n_layer_kv_from_start = 20`, the swa
pattern 5 by default; `src/models/models.h` `n_layer_sparsity = 10`): the per-layer input width, the first
layer that reuses another's KV, the layers with activation sparsity, and every fifth layer full attention.
A model with other values loads wrong or not at all ("per_layer_token_embd.weight has wrong shape")."""


def llama_cpp_text_shapes() -> dict:
    """`Gemma3nTextConfig` keywords that give the tiny decoder the shapes llama.cpp's Gemma 3n graph fixes
    (see `LLAMA_CPP_PER_LAYER_INPUT`): 22 layers (4 sliding + 1 full, repeated), per-layer inputs of 256, the
    last 2 layers reusing layers 18 (sliding) and 19 (full)'s KV, activation sparsity 0.95 on the first 10;
    widths as the tiny decoder's. ~17 M parameters (the per-layer embedding: 2,048 x 22 x 256)."""
    layers = LLAMA_CPP_KV_FROM_START + 2
    pattern = ["sliding_attention"] * (LLAMA_CPP_SWA_PATTERN - 1) + ["full_attention"]
    return dict(
        num_hidden_layers=layers,
        layer_types=[pattern[i % LLAMA_CPP_SWA_PATTERN] for i in range(layers)],
        num_kv_shared_layers=layers - LLAMA_CPP_KV_FROM_START,
        hidden_size_per_layer_input=LLAMA_CPP_PER_LAYER_INPUT,
        activation_sparsity_pattern=[0.95 if i < LLAMA_CPP_SPARSE_LAYERS else 0.0 for i in range(layers)],
    )


def _config(ids, spec: TinySpec, **text_shapes):
    """Tiny `Gemma3nConfig` whose token ids are the tokenizer's (`ids`; see the module docstring);
    `text_shapes` replace the tiny decoder's keywords (`llama_cpp_text_shapes`).

    Raises:
        ModelLoadError: `timm` (needed by the vision stub) is not installed.
    """
    _require_timm()
    from transformers import (
        Gemma3nAudioConfig,
        Gemma3nConfig,
        Gemma3nTextConfig,
        Gemma3nVisionConfig,
    )

    text_vocab, multimodal_vocab = spec.text_vocab, spec.multimodal_vocab
    decoder = dict(tiny_decoder(ids, "<end_of_turn>"), activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0])
    text_config = Gemma3nTextConfig(
        vocab_size=text_vocab + 2 * multimodal_vocab,
        vocab_size_per_layer_input=text_vocab,
        laurel_rank=64,
        altup_num_inputs=4,
        **dict(decoder, **text_shapes),
    )
    audio_config = Gemma3nAudioConfig(
        vocab_size=multimodal_vocab,
        vocab_offset=text_vocab + multimodal_vocab,
        hidden_size=64,
        conf_num_attention_heads=4,
        conf_num_hidden_layers=2,
        sscp_conv_channel_size=[32, 8],
    )
    vision_config = Gemma3nVisionConfig(
        architecture="test_vit",
        hidden_size=64,
        vocab_size=multimodal_vocab,
        vocab_offset=text_vocab,
    )
    return Gemma3nConfig(
        text_config=text_config,
        audio_config=audio_config,
        vision_config=vision_config,
        audio_soft_tokens_per_image=188,
        vision_soft_tokens_per_image=256,
        eoa_token_id=ids(spec.named_tokens["eoa_token"]),
        **media_token_ids(ids, spec),
        **token_ids(ids, "<end_of_turn>"),
    )


def _require_timm() -> None:
    """Raise `ModelLoadError` when `timm` (Gemma 3n's vision tower) is not installed."""
    from pipeline.errors import ModelLoadError

    try:
        import timm  # noqa: F401
    except ImportError as error:  # pragma: no cover - timm is in requirements.txt
        raise ModelLoadError(
            "Gemma 3n's vision tower needs the `timm` package; install it with `pip install timm`."
        ) from error


def _processor(tokenizer, spec: TinySpec):
    """The real `Gemma3nProcessor` around `tokenizer`: its audio feature extractor with defaults, a
    SigLIP image processor at 768 x 768, 188 audio and 256 image soft tokens."""
    from transformers import Gemma3nAudioFeatureExtractor, Gemma3nProcessor, SiglipImageProcessor

    return Gemma3nProcessor(
        feature_extractor=Gemma3nAudioFeatureExtractor(),
        image_processor=SiglipImageProcessor(size={"height": 768, "width": 768}),
        tokenizer=tokenizer,
        chat_template=spec.chat_template,
        audio_seq_length=188,
        image_seq_length=256,
    )


TINY_GEMMA3N = TinySpec(
    family="gemma3n",
    stands_in_for="google/gemma-3n-E2B-it",
    specials=SPECIALS,
    text_vocab=2048,
    named_tokens={
        "image_token": "<image_soft_token>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "audio_token": "<audio_soft_token>",
        "boa_token": "<start_of_audio>",
        "eoa_token": "<end_of_audio>",
    },
    control_tokens=("<start_of_turn>", "<end_of_turn>"),
    multimodal_blocks=(("image", ("<end_of_image>", "<image_soft_token>")),
                       ("audio", ("<end_of_audio>", "<audio_soft_token>"))),
    multimodal_vocab=8,  # rows of each multimodal embedder (`Gemma3nMultimodalEmbedder.vocab_size`); 128 real
    model_class="Gemma3nForConditionalGeneration",
    config=_config,
    processor=_processor,
    chat_template=GEMMA3N_CHAT_TEMPLATE,
    sentencepiece_model=True,  # google/gemma-3n-E2B-it ships tokenizer.model; llama.cpp's converter reads it
)
"""The tiny random Gemma 3n: ~3 M parameters (~13 MB fp32); text vocabulary T = 2,048 (ids below T get
per-layer embeddings)."""


POST_NORM_WEIGHT = 0.3
"""Weight of the llama.cpp-shaped stand-in's norms on what each layer adds to the residual stream (after
attention, the feed-forward, LAuReL and the per-layer input; ones by default). With ones its 22 random layers
are chaotic: scaling every weight by a random 1e-4 relative changed transformers' own greedy answer within 0-5
tokens, so no second implementation could be compared with it (llama.cpp's answers agreed for 0-1 tokens).
At 0.3 each layer adds less than the stream holds, and llama.cpp's answers to three questions were explained
token by token, 12 of 12 each (measured 2026-12-07 on the AMX Xeon)."""


def _steady(model) -> None:
    """Make the drawn model comparable across implementations: the post-norms at `POST_NORM_WEIGHT` and the final
    norm at `FINAL_NORM_SCALE` (greedy answers with margins of tenths)."""
    posts = ("post_attention_layernorm", "post_feedforward_layernorm", "post_per_layer_input_norm", "post_laurel_norm")
    for name, module in model.model.language_model.named_modules():
        if name.endswith(posts):
            module.weight.fill_(POST_NORM_WEIGHT)
    model.model.language_model.norm.weight.fill_(FINAL_NORM_SCALE)


TINY_GEMMA3N_FOR_LLAMA_CPP = replace(TINY_GEMMA3N, config=lambda ids, spec: _config(ids, spec, **llama_cpp_text_shapes()),
                                     prepare=_steady)
"""The tiny random Gemma 3n with the shapes llama.cpp's Gemma 3n graph fixes (`llama_cpp_text_shapes`) and
steadied weights (`_steady`), so that its text-only GGUF runs in llama.cpp and its answers can be compared
(tests/test_gguf_gemma3n.py); otherwise `TINY_GEMMA3N`."""


def make_tiny_gemma3n(out_dir: str | Path, *, seed: int = 0, llama_cpp_shapes: bool = False) -> Path:
    """Write the tiny random Gemma 3n checkpoint + processor to `out_dir` and return its path
    (`build_stand_in(out_dir, TINY_GEMMA3N, seed=seed)`; `TINY_GEMMA3N_FOR_LLAMA_CPP` with `llama_cpp_shapes`;
    raises what `build_stand_in` raises)."""
    return build_stand_in(out_dir, TINY_GEMMA3N_FOR_LLAMA_CPP if llama_cpp_shapes else TINY_GEMMA3N, seed=seed)
