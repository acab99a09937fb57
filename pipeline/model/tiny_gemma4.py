"""A tiny, randomly initialised Gemma 4 + processor that loads like `google/gemma-4-E2B-it`.

`python -m pipeline make-tiny-model --family gemma4 OUT_DIR` writes `config.json`, `model.safetensors`,
`generation_config.json`, `tokenizer.json` / `tokenizer_config.json`, `processor_config.json`,
`chat_template.jinja` and `tiny_model.json`; `AutoProcessor.from_pretrained(OUT_DIR)` and
`Gemma4ForConditionalGeneration.from_pretrained(OUT_DIR)` load it offline, so every code path (the
chat template, audio tokens by clip length, quantization, LoRA on the clippable audio linears,
training, generation, the GGUF export and llama.cpp) runs on a CPU in seconds.

What is real and what is small:
- The architecture is the real `Gemma4ForConditionalGeneration` (per-layer embeddings, KV sharing,
  sliding and full attention with their own head sizes, the double-wide MLP of the KV-sharing
  layers, the conformer audio encoder with `Gemma4ClippableLinear`s, a vision encoder), with 4 text
  layers of hidden 128 and a 2-block audio encoder of hidden 64.
- What llama.cpp hard-codes is kept as in the real model (its `tools/mtmd/models/gemma4a.cpp` graph
  and `mtmd-audio.cpp`): 128 mel bins, 16 kHz, the audio attention's chunk 12 / left context 13 /
  right 0, conv kernel 5, residual weight 0.5, and the first subsampling convolution's 128 channels
  (its frequency axis, 128 / 4, sets the input projection's width).
- The feature extractor is the real `Gemma4AudioFeatureExtractor` with its defaults, so a clip
  takes as many audio tokens as on the real model (`pipeline.model.gemma4.audio_tokens`).
- The tokenizer is a real `GemmaTokenizer` (BPE with byte fallback, spaces as "▁") with Gemma 4's
  control tokens (`<|turn>`, `<turn|>`, `<|audio>`, `<|audio|>`, `<audio|>`, ...) and a vocabulary of
  2,048 trained here on a small English corpus (`pipeline.model.tiny_model.train_bpe_vocab`); every
  id has a per-layer embedding (`vocab_size_per_layer_input` = `vocab_size`, as on the real model).
- The chat template is Gemma 4's (`GEMMA4_CHAT_TEMPLATE`), reduced to what the tutor sends.
- Weights are random but scaled so that the answer depends on the clip: the audio embedder's
  projection is drawn with a larger spread (`AUDIO_PROJECTION_STD`), otherwise random audio
  embeddings vanish next to the text and every clip would get the same answer.

The text is meaningless; `tiny_model.json` marks the folder (`pipeline.model.tiny_model.is_tiny_random_model`).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.model.tiny_model import save_tiny_checkpoint, train_bpe_vocab

TEXT_VOCAB = 2048
"""Vocabulary size of the tiny tokenizer (every id has a per-layer embedding)."""

CONTROL_TOKENS = [
    "<|turn>", "<turn|>",
    "<|audio>", "<audio|>", "<|audio|>",
    "<|image>", "<image|>", "<|image|>", "<|video|>",
    "<|channel>", "<channel|>", "<|think|>",
    "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>',
]
"""Gemma 4's control tokens (the chat template's and the processor's; transformers 5.24
`models/gemma4/processing_gemma4.py`, llama.cpp `models/templates/google-gemma-4-31B-it.jinja`)."""

_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"] + CONTROL_TOKENS

AUDIO_PROJECTION_STD = 1.0
"""Spread of the tiny model's audio embedder projection (`embed_audio.embedding_projection`): its
input is RMS-normalised, so with std 1 each audio position's embedding is about as large as a
scaled text embedding (sqrt(hidden) x 0.02 x sqrt(hidden) ~ 2.6 at hidden 128) and the answer depends
on the clip; with the default 0.02 it would not."""

# Gemma 4's chat template (google/gemma-4-*-it `chat_template.jinja`; the copy in llama.cpp's
# `models/templates/google-gemma-4-31B-it.jinja`), reduced to what the tutor renders: `<bos>`, a
# system turn of its own, `<|turn>ROLE\n` ... `<turn|>\n` with assistant rendered as `model`, audio
# and image items as their placeholders, text items trimmed, and the generation prompt with the
# empty thought channel the real template writes when thinking is off. Tools and thinking are left out.
GEMMA4_CHAT_TEMPLATE = """{{- bos_token -}}
{%- set loop_messages = messages -%}
{%- if messages[0]['role'] in ['system', 'developer'] -%}
    {{- '<|turn>system\n' -}}
    {%- if messages[0]['content'] is string -%}
        {{- messages[0]['content'] | trim -}}
    {%- else -%}
        {%- for item in messages[0]['content'] -%}
            {%- if item['type'] == 'text' -%}{{- item['text'] | trim -}}{%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{- '<turn|>\n' -}}
    {%- set loop_messages = messages[1:] -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{- '<|turn>' + role + '\n' -}}
    {%- if message['content'] is string -%}
        {{- message['content'] | trim -}}
    {%- else -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{- item['text'] | trim -}}
            {%- elif item['type'] == 'audio' -%}
                {{- '<|audio|>' -}}
            {%- elif item['type'] == 'image' -%}
                {{- '<|image|>' -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{- '<turn|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|turn>model\n' -}}
    {%- if not enable_thinking | default(false) -%}
        {{- '<|channel>thought\n<channel|>' -}}
    {%- endif -%}
{%- endif -%}
"""

FINAL_NORM_SCALE = 8.0
"""Weight of the tiny model's final norm (`model.language_model.norm`, ones by default): it scales the
logits. With ones, a random 128-wide model's top logits lie within hundredths of each other, so greedy
decoding turns on differences of a few 1e-3 between implementations (llama.cpp's fp16 GELU table, its
own log-mel features) and `tests/test_gguf.py` could not compare llama.cpp's tokens with transformers'.
8x keeps the logits well under the 30 softcap and the top-2 margins around tenths."""


def _build_tokenizer():
    """The tiny `GemmaTokenizer` with Gemma 4's control tokens (all special: never split, skipped by
    `decode(skip_special_tokens=True)`, CONTROL tokens in a GGUF)."""
    from transformers import GemmaTokenizer

    vocab, merges = train_bpe_vocab(_SPECIALS, TEXT_VOCAB)
    named = {
        "image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
        "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>",
    }
    tokenizer = GemmaTokenizer(vocab=vocab, merges=merges, extra_special_tokens=named, padding_side="left",
                               add_bos_token=True, add_eos_token=False)
    # Extra special tokens, so a GGUF marks them CONTROL (llama.cpp's converter types by `all_special_ids`)
    tokenizer.add_special_tokens({"extra_special_tokens": [t for t in CONTROL_TOKENS if t not in named.values()]},
                                 replace_extra_special_tokens=False)
    return tokenizer


def _build_config(tokenizer):
    """Tiny `Gemma4Config` whose token ids are the tokenizer's (see the module docstring)."""
    from transformers import (
        Gemma4AudioConfig,
        Gemma4Config,
        Gemma4TextConfig,
        Gemma4VisionConfig,
    )

    ids = tokenizer.convert_tokens_to_ids
    eos_ids = [ids("<eos>"), ids("<turn|>")]
    text_config = Gemma4TextConfig(
        vocab_size=TEXT_VOCAB,
        vocab_size_per_layer_input=TEXT_VOCAB,
        hidden_size=128,
        intermediate_size=256,
        use_double_wide_mlp=True,  # as E2B: the KV-sharing layers' MLPs are twice as wide
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        global_head_dim=128,  # full-attention layers have their own head size, as E2B's 512 vs 256
        hidden_size_per_layer_input=64,
        # Sliding, full, sliding, full; the last two reuse the KV of the first two, as the last 20 of
        # E2B's 35 layers do.
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        num_kv_shared_layers=2,
        sliding_window=128,
        final_logit_softcapping=30.0,
        max_position_embeddings=4096,
        pad_token_id=ids("<pad>"),
        bos_token_id=ids("<bos>"),
        eos_token_id=eos_ids,
    )
    audio_config = Gemma4AudioConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        subsampling_conv_channels=[128, 8],
        output_proj_dims=128,
    )
    vision_config = Gemma4VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        position_embedding_size=64,
    )
    return Gemma4Config(
        text_config=text_config,
        audio_config=audio_config,
        vision_config=vision_config,
        boi_token_id=ids("<|image>"),
        eoi_token_id=ids("<image|>"),
        image_token_id=ids("<|image|>"),
        video_token_id=ids("<|video|>"),
        boa_token_id=ids("<|audio>"),
        eoa_token_index=ids("<audio|>"),
        audio_token_id=ids("<|audio|>"),
        pad_token_id=ids("<pad>"),
        bos_token_id=ids("<bos>"),
        eos_token_id=eos_ids,
    )


def make_tiny_gemma4(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write a tiny random Gemma 4 checkpoint + processor to `out_dir` and return its path.

    Args:
        out_dir: folder to write (created; files of the same names are overwritten).
        seed: torch seed for the random weights (the same seed gives the same weights).

    Returns:
        `Path(out_dir)`, loadable offline with `AutoProcessor.from_pretrained` and
        `Gemma4ForConditionalGeneration.from_pretrained`; about 2 M parameters (8 MB in fp32).
    """
    import torch
    from transformers import (
        Gemma4AudioFeatureExtractor,
        Gemma4ForConditionalGeneration,
        Gemma4ImageProcessor,
        Gemma4Processor,
        Gemma4VideoProcessor,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer()
    config = _build_config(tokenizer)
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.model.embed_audio.embedding_projection.weight.normal_(0.0, AUDIO_PROJECTION_STD)
        model.model.language_model.norm.weight.fill_(FINAL_NORM_SCALE)
    processor = Gemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),
        image_processor=Gemma4ImageProcessor(),
        tokenizer=tokenizer,
        video_processor=Gemma4VideoProcessor(),
        chat_template=GEMMA4_CHAT_TEMPLATE,
    )
    # Gemma4Processor's constructor replaces the tokenizer's extra special tokens by `<|video|>`: add the
    # control tokens back, so the saved tokenizer lists them (llama.cpp's converter reads it alone).
    processor.tokenizer.add_special_tokens({"extra_special_tokens": list(CONTROL_TOKENS)},
                                           replace_extra_special_tokens=False)
    return save_tiny_checkpoint(out, model, config.text_config, processor, stands_in_for="google/gemma-4-E2B-it",
                                text_vocab=TEXT_VOCAB, seed=seed, family="gemma4")
