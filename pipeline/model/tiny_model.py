"""A tiny, randomly initialised Gemma 3n + processor that loads exactly like the real checkpoint.

`python -m pipeline make-tiny-model OUT_DIR` writes a folder with `config.json`,
`model.safetensors`, `generation_config.json`, `tokenizer.json` / `tokenizer_config.json`,
`processor_config.json` (+ feature-extractor / image-processor settings), `chat_template.jinja` and
`tiny_model.json`. `AutoProcessor.from_pretrained(OUT_DIR)` and
`Gemma3nForConditionalGeneration.from_pretrained(OUT_DIR)` load it with no network access, so every
code path (chat template, 188 audio soft tokens, quantization, LoRA, training, generation) runs
offline on a CPU in seconds.

What is real and what is small:
- The architecture is the real `Gemma3nForConditionalGeneration` (AltUp, LAuReL, per-layer
  embeddings, KV sharing, activation sparsity, the USM-style conformer audio encoder), only with
  2-4 layers and hidden sizes of 32-128. The vision tower is timm's `test_vit` stub (the real
  MobileNet-V5 adds 294 M parameters; we never feed images).
- The audio feature extractor is the real `Gemma3nAudioFeatureExtractor` with its defaults (128 mel
  bins, 16 kHz, 10 ms hop), so every clip still becomes `<start_of_audio>` + 188 audio soft tokens
  + `<end_of_audio>`.
- The tokenizer is a real `GemmaTokenizer` (BPE with byte fallback, spaces as "▁", like Gemma's
  SentencePiece model), but its ~1,000-token vocabulary is trained here on a small English corpus
  built in code; any text tokenizes (unknown characters fall back to UTF-8 bytes).
- Token-id layout follows Gemma 3n's (`Gemma3nConfig` defaults): text ids `[0, T)` (these get
  per-layer embeddings, `vocab_size_per_layer_input = T`), then the vision block
  `[T, T + M)` starting with `<end_of_image>`, `<image_soft_token>`, then the audio block
  `[T + M, T + 2M)` starting with `<end_of_audio>`, `<audio_soft_token>`; `vocab_size = T + 2M`.
  The real model has T = 262,144 and M = 128; here M = 8.

The weights are random: outputs are meaningless text. `tiny_model.json` (`{"tiny_random_model":
true, ...}`) marks the folder so the app and `infer` can say so (`is_tiny_random_model(path)`).
"""

from __future__ import annotations

import json
from pathlib import Path

MARKER_FILE = "tiny_model.json"
"""File in the model folder that marks it as the random stand-in (read by `is_tiny_random_model`)."""
STAND_IN_MAKER = "`python -m pipeline make-tiny-model`"
"""What makes the stand-in, in the command line's words: `stand_in_note`'s default. The app words it as its
button (`ui.wording.app_wording` turns the command into **Create offline tiny test model**)."""


def stand_in_note(what: str = "its answers are", made_by: str = STAND_IN_MAKER) -> str:
    """The honesty note for answers from the random stand-in: "The model is the tiny random stand-in made by
    `made_by`: `what` meaningless." `what`: the subject and its verb ("this text is"); `made_by`: what made
    the stand-in in the reader's words (the command by default, which the app's wording renames)."""
    return f"The model is the tiny random stand-in made by {made_by}: {what} meaningless."

# Gemma 3n's fixed special tokens, in the order of their ids in the real tokenizer's first rows
# (pad=0, eos=1, bos=2, unk=3, mask=4); the rest get the next ids here (the real ids are larger).
_BASE_SPECIALS = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<start_of_audio>",
]
_MULTIMODAL_VOCAB = 8
"""Rows of each multimodal embedder (`Gemma3nMultimodalEmbedder.vocab_size`); 128 in the real model."""
_TARGET_TEXT_VOCAB = 2048
"""Text vocabulary size T (ids below T get per-layer embeddings)."""

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

_CORPUS_WORDS = """
the a an and or but of to in on at for with from by as is are was were be been being it this that
these those he she they we you i me him her them us my your his its our their what which who whom
when where why how all any both each few more most other some such no nor not only own same so than
too very can will just should now one two three four five six seven eight nine ten zero hundred
please read sentence say said word words sound sounds phone phones vowel vowels consonant stress
syllable syllables pronunciation pronounce pronounced mispronounced accuracy fluency prosody prosodic
completeness total score scores scored overall good great well clear clearly nice excellent
practice practise try again slowly carefully listen repeat heard instead expected learner tutor
teacher student speaker speech audio clip recording voice mouth tongue lips teeth open close
round short long stressed unstressed rhythm intonation pause pauses smooth natural fast slow
low high mostly almost correct incorrect wrong right missing extra deleted inserted replaced
advice tip focus work on next time keep going improve better best out of marked like
you are a helpful pronunciation tutor give feedback on how the learner read target text
english language learn learning native accent clarity
we call it bear mark is going to see him there is a dog the cat sat on the mat
it was the best of times it was the worst of times
i have a dream that one day this nation will rise up
she sells sea shells by the sea shore
the quick brown fox jumps over the lazy dog
grey gray red blue green yellow white black brown orange purple pink
today tomorrow yesterday morning evening night week month year
house home school work city country street road car bus train plane
water food bread milk coffee tea apple orange banana rice meat fish
think thought through though tough thumb three throw this that then there
ship sheep chip cheap live leave full fool pull pool bat bet bit but boot
very vest west wine vine light right lead read rice lice play pray
aa ae ah ao aw ay b ch d dh eh er ey f g hh ih iy jh k l m n ng ow oy p r s sh t th uh uw v w y z zh
""".split()


def _corpus() -> list[str]:
    """A small English corpus built in code: words, sentences and the feedback vocabulary.

    Covers the letters, digits and punctuation of English text and of the generated tutor feedback
    (e.g. "Accuracy 7/10", `/AH/`) so common text tokenizes into a few tokens per word.
    """
    lines = [" ".join(_CORPUS_WORDS[i : i + 12]) for i in range(0, len(_CORPUS_WORDS), 12)]
    lines += [w.capitalize() + "." for w in _CORPUS_WORDS] + [w.upper() for w in _CORPUS_WORDS]
    lines += [f"{label} {n}/10." for label in ("Accuracy", "Fluency", "Prosody", "Total") for n in range(11)]
    lines += [
        "Read this sentence aloud: \"We call it bear.\"",
        "Overall: accuracy 8/10, fluency 9/10, prosody 7/10, total 8/10.",
        "Words to work on: \"GREY\" (accuracy 3/10): /EY/ was heard as /AH/.",
        "Advice: open your mouth wider on the vowel and keep it long.",
        "0123456789 .,;:!?'\"()[]{}-_/\\+*=%&#@$<>|~^` \n\t",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz",
    ]
    try:  # the product's own instruction, so prompts take about as many tokens as with Gemma's 262k vocabulary
        from pipeline.conversation.messages import SYSTEM_PROMPT, user_prompt

        lines += [SYSTEM_PROMPT] * 4 + [user_prompt("We call it bear.")] * 4
    except ImportError:  # pragma: no cover - dataset.py is part of the package
        pass
    return lines


def train_bpe_vocab(specials: list[str], text_vocab: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-fallback BPE vocabulary of exactly `text_vocab` ids on `_corpus()`, SentencePiece
    style (spaces as "▁", merges within "▁word" pieces, never across a newline).

    Ids: `specials` first (in order), 256 byte-fallback tokens `<0x00>`..`<0xFF>`, the learned tokens,
    then `<unusedN>` fillers up to `text_vocab`. Returns `(vocab, merges)` for `GemmaTokenizer`.
    Shared by the tiny stand-ins of every family (`make_tiny_model`, `pipeline.model.tiny_gemma4`).

    Raises:
        RuntimeError: the trainer learned more tokens than `text_vocab` holds.
    """
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer_model = Tokenizer(BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    trainer_model.normalizer = normalizers.Replace(" ", "▁")
    # Learn merges within "▁word" pieces only (like SentencePiece); GemmaTokenizer applies them as is.
    # and never across a newline, so `model\n` + answer keeps its token boundary as in Gemma's vocabulary.
    trainer_model.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(pattern="▁", behavior="merged_with_next"),
            pre_tokenizers.Split(pattern="\n", behavior="isolated"),
        ]
    )
    trainer = BpeTrainer(
        vocab_size=text_vocab,
        special_tokens=specials + byte_tokens,
        show_progress=False,
        min_frequency=1,
    )
    trainer_model.train_from_iterator(_corpus(), trainer=trainer)
    trained = json.loads(trainer_model.to_str())["model"]
    vocab: dict[str, int] = dict(trained["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    # Pad the text block to exactly T ids so the layout is fixed whatever the trainer learned.
    next_id = max(vocab.values()) + 1
    if next_id > text_vocab:
        raise RuntimeError(f"tiny tokenizer learned {next_id} tokens, more than the text block {text_vocab}")
    for i in range(next_id, text_vocab):
        vocab[f"<unused{i}>"] = i
    return vocab, merges


def _build_tokenizer(extra_special_tokens: dict[str, str]):
    """Train the BPE vocabulary (`train_bpe_vocab`) and wrap it in a real `GemmaTokenizer`.

    Returns `(tokenizer, text_vocab_size T)`. Ids: the Gemma specials first (pad 0, eos 1, bos 2,
    unk 3, mask 4, turn/image/audio starts), 256 byte-fallback tokens `<0x00>`..`<0xFF>`, the learned
    tokens, fillers up to T, then the vision block and the audio block of `_MULTIMODAL_VOCAB` ids each.
    """
    from transformers import GemmaTokenizer

    text_vocab = _TARGET_TEXT_VOCAB
    vocab, merges = train_bpe_vocab(_BASE_SPECIALS, text_vocab)
    multimodal = []
    for block, first_tokens in (("image", ["<end_of_image>", "<image_soft_token>"]), ("audio", ["<end_of_audio>", "<audio_soft_token>"])):
        tokens = first_tokens + [f"<{block}_reserved{k}>" for k in range(_MULTIMODAL_VOCAB - len(first_tokens))]
        multimodal += tokens
    for offset, token in enumerate(multimodal):
        vocab[token] = text_vocab + offset

    tokenizer = GemmaTokenizer(
        vocab=vocab,
        merges=merges,
        extra_special_tokens=extra_special_tokens,
        padding_side="left",
        add_bos_token=True,
        add_eos_token=False,
    )
    # Every control token is special (never split, skipped by decode(skip_special_tokens=True)).
    control = ["<start_of_turn>", "<end_of_turn>"] + [t for t in multimodal if t not in extra_special_tokens.values()]
    tokenizer.add_tokens(control, special_tokens=True)
    return tokenizer, text_vocab


def _build_config(tokenizer, text_vocab: int):
    """Tiny `Gemma3nConfig` whose token ids are the tokenizer's (see the module docstring)."""
    from transformers import (
        Gemma3nAudioConfig,
        Gemma3nConfig,
        Gemma3nTextConfig,
        Gemma3nVisionConfig,
    )

    ids = tokenizer.convert_tokens_to_ids
    eos_ids = [ids("<eos>"), ids("<end_of_turn>")]
    full_vocab = text_vocab + 2 * _MULTIMODAL_VOCAB
    text_config = Gemma3nTextConfig(
        vocab_size=full_vocab,
        vocab_size_per_layer_input=text_vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        # Multiples of 64 like the real sizes (256, 64): bitsandbytes' CPU 4-bit kernel packs blocks of
        # 32 output rows x 64 inputs.
        hidden_size_per_layer_input=64,
        laurel_rank=64,
        altup_num_inputs=4,
        # Two sliding + two full-attention layers; the last two reuse the KV of the first two, as
        # the last 10 layers of E2B do.
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        num_kv_shared_layers=2,
        sliding_window=128,
        activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0],
        max_position_embeddings=4096,
        pad_token_id=ids("<pad>"),
        bos_token_id=ids("<bos>"),
        eos_token_id=eos_ids,
    )
    audio_config = Gemma3nAudioConfig(
        vocab_size=_MULTIMODAL_VOCAB,
        vocab_offset=text_vocab + _MULTIMODAL_VOCAB,
        hidden_size=64,
        conf_num_attention_heads=4,
        conf_num_hidden_layers=2,
        sscp_conv_channel_size=[32, 8],
    )
    vision_config = Gemma3nVisionConfig(
        architecture="test_vit",
        hidden_size=64,
        vocab_size=_MULTIMODAL_VOCAB,
        vocab_offset=text_vocab,
    )
    return Gemma3nConfig(
        text_config=text_config,
        audio_config=audio_config,
        vision_config=vision_config,
        audio_soft_tokens_per_image=188,
        vision_soft_tokens_per_image=256,
        boi_token_id=ids("<start_of_image>"),
        eoi_token_id=ids("<end_of_image>"),
        image_token_id=ids("<image_soft_token>"),
        boa_token_id=ids("<start_of_audio>"),
        eoa_token_id=ids("<end_of_audio>"),
        audio_token_id=ids("<audio_soft_token>"),
        pad_token_id=ids("<pad>"),
        bos_token_id=ids("<bos>"),
        eos_token_id=eos_ids,
    )


def make_tiny_model(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write a tiny random Gemma 3n checkpoint + processor to `out_dir` and return its path.

    Args:
        out_dir: folder to write (created; existing files of the same names are overwritten).
        seed: torch seed for the random weights (the same seed gives the same weights).

    Returns:
        `Path(out_dir)`, loadable with `AutoProcessor.from_pretrained` and
        `Gemma3nForConditionalGeneration.from_pretrained` offline. ~3 M parameters (~13 MB fp32).

    Raises:
        ModelLoadError: `timm` (needed by the vision stub) is not installed.
    """
    import torch
    from transformers import (
        Gemma3nAudioFeatureExtractor,
        Gemma3nForConditionalGeneration,
        Gemma3nProcessor,
        SiglipImageProcessor,
    )

    from pipeline.errors import ModelLoadError

    try:
        import timm  # noqa: F401
    except ImportError as error:  # pragma: no cover - timm is in requirements.txt
        raise ModelLoadError(
            "Gemma 3n's vision tower needs the `timm` package; install it with `pip install timm`."
        ) from error

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = {
        "image_token": "<image_soft_token>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "audio_token": "<audio_soft_token>",
        "boa_token": "<start_of_audio>",
        "eoa_token": "<end_of_audio>",
    }
    tokenizer, text_vocab = _build_tokenizer(extra)
    config = _build_config(tokenizer, text_vocab)

    torch.manual_seed(seed)
    model = Gemma3nForConditionalGeneration(config).eval()
    processor = Gemma3nProcessor(
        feature_extractor=Gemma3nAudioFeatureExtractor(),
        image_processor=SiglipImageProcessor(size={"height": 768, "width": 768}),
        tokenizer=tokenizer,
        chat_template=GEMMA3N_CHAT_TEMPLATE,
        audio_seq_length=188,
        image_seq_length=256,
    )
    return save_tiny_checkpoint(out, model, config, processor, stands_in_for="google/gemma-3n-E2B-it",
                                text_vocab=text_vocab, seed=seed)


def save_tiny_checkpoint(out: Path, model, token_config, processor, *, stands_in_for: str, text_vocab: int,
                         seed: int, family: str | None = None) -> Path:
    """Save a tiny random model as a checkpoint loads: greedy generation settings with the ids of
    `token_config` (bos/eos/pad), the weights, `processor`, and the marker (`MARKER_FILE`: random
    weights, what it stands in for, its parameter count, text vocabulary and seed). Returns `out`."""
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        bos_token_id=token_config.bos_token_id,
        eos_token_id=token_config.eos_token_id,
        pad_token_id=token_config.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)
    marker = {
        "tiny_random_model": True,
        **({"family": family} if family else {}),
        "note": f"Random weights: a structural stand-in for {stands_in_for}; its text is meaningless.",
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "text_vocab_size": text_vocab,
        "seed": seed,
    }
    (out / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return out


def is_tiny_random_model(model: str | Path) -> bool:
    """True when `model` holds the marker `make_tiny_model` writes (random weights): a local folder, or a hub id
    whose files in the Hugging Face cache include it (a stand-in served from a hub, as the download tests do)."""
    path = Path(str(model)).expanduser()
    marker = path / MARKER_FILE
    if not marker.is_file():
        from pipeline.model.hub import is_local_model

        if is_local_model(str(model)):
            return False
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(str(model), MARKER_FILE)
        except Exception:  # noqa: BLE001 - not a hub id either: not the stand-in
            return False
        if not isinstance(cached, str):
            return False
        marker = Path(cached)
    try:
        return bool(json.loads(marker.read_text(encoding="utf-8")).get("tiny_random_model"))
    except (OSError, ValueError):
        return False
