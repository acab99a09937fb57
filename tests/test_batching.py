"""Answers generated together equal the answers generated alone (greedy), and stream as they grow.

The reference is transformers' own `generate` on one conversation at a time (no padding); the batch
engine (`pipeline.tutor.batching`) reads each question alone and then generates the rows together,
joining their key/value caches with left padding (`pipeline.model.batch_cache`). The questions differ
in sentence, clip and kind (a dialogue with two clips), they join while others are mid-answer, and
they leave at different lengths, so the padding, the joins and the rows leaving are all exercised,
and every prompt is longer than the tiny model's sliding window (128 positions). Real learner clips
(speechocean762). Both the bf16/fp32 weights and the 4-bit ones (bitsandbytes' CPU kernels) are
checked: a batch changes the shapes of the matrix products. The other tests use one unquantized tutor.
"""

from __future__ import annotations

import threading

import pytest

from pipeline.conversation.messages import build_dialogue_messages, build_messages

CLIPS = ["WAVE/SPEAKER0001/000010011.WAV", "WAVE/SPEAKER0001/000010035.WAV", "WAVE/SPEAKER0003/000030012.WAV",
         "WAVE/SPEAKER0005/000050005.WAV"]
SENTENCES = ["WE CALL IT BEAR", "I LIKE TO READ BOOKS IN THE MORNING", "YES", "THE WEATHER IS NICE TODAY"]


def load(tiny_model_dir, quantization: str):
    from pipeline.host.cpu_threads import apply_threads
    from pipeline.tutor.infer import load_tutor

    apply_threads(1)  # the reference and the engine run the same thread count (TUTOR_INFER_THREADS below)
    return load_tutor(str(tiny_model_dir), device="cpu", quantization=quantization, use_cache=False)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    from pipeline.host.cpu_threads import INFER_THREADS_ENV

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(INFER_THREADS_ENV, "1")
        yield


@pytest.fixture(scope="module")
def tutor(tiny_model_dir, one_thread):
    return load(tiny_model_dir, "none")


def clips(speechocean_dir):
    from pipeline.data.audio import load_audio

    paths = sorted(speechocean_dir.glob("WAVE/*/*.WAV"))
    chosen = [speechocean_dir / c if (speechocean_dir / c).exists() else paths[i * 7] for i, c in enumerate(CLIPS)]
    return [load_audio(path) for path in chosen]


NEAR_TIE = 5e-3
"""Top-2 logit margin under which the same model may pick another token when the arithmetic differs a little:
rows generated together are padded and reduced in other orders than a row alone, which moves a random tiny
model's logits by ~1e-5 to 1e-4 (a CPU's vector width decides how much). Up to the first near-tie the answers
must agree token for token; after it they may part."""


def alone(tutor, make_messages, samples, max_new_tokens):
    """The reference: `generate` on this one conversation, greedy; (text, generated tokens), and the text up to
    the first near-tie (`NEAR_TIE`; None when there is none: then the whole answer must be equal)."""
    import torch

    with tutor._lock, torch.inference_mode():
        inputs = tutor._inputs(make_messages, samples)
        output = tutor.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                      eos_token_id=tutor._eos_ids(), pad_token_id=tutor.processor.tokenizer.pad_token_id,
                                      output_scores=True, return_dict_in_generate=True)
    new = output.sequences[0, inputs["input_ids"].shape[1]:]
    margins = [float(torch.topk(step[0].float(), 2).values.diff().abs()) for step in output.scores]
    tie = next((k for k, margin in enumerate(margins) if margin < NEAR_TIE), None)
    decode = tutor.processor.tokenizer.decode
    before_tie = None if tie is None else decode(new[:tie], skip_special_tokens=True).strip()
    return (decode(new, skip_special_tokens=True).strip(), int(new.numel())), before_tie


def assert_same_answers(answers, expected):
    """Each answer generated together equals the one generated alone, or, where the alone answer met a near-tie,
    agrees with it up to that point."""
    for answer, ((text, tokens), before_tie) in zip(answers, expected):
        if before_tie is None:
            assert (answer.text, answer.new_tokens) == (text, tokens)
        else:
            assert answer.text.startswith(before_tie.rstrip("\ufffd")), (answer.text, before_tie)


@pytest.mark.slow  # two models, 5 answers each alone and together: ~45 s
@pytest.mark.parametrize("quantization", ["none", "4bit"])
def test_answers_generated_together_equal_answers_generated_alone(tiny_model_dir, speechocean_dir, quantization):
    tutor = load(tiny_model_dir, quantization)
    audio = clips(speechocean_dir)
    turns = [{"role": "learner", "clip": 0}, {"role": "tutor", "text": "Say BEAR again, slowly."},
             {"role": "learner", "clip": 1, "text": "Like this?"}]
    questions = [  # (kind, what the tutor is asked, max_new_tokens): each leaves the batch at its own time
        ("read_aloud", dict(audio=audio[0], text=SENTENCES[0]), 40),
        ("read_aloud", dict(audio=audio[1], text=SENTENCES[1]), 12),
        ("free_speech", dict(audio=audio[2], text="Describe your last holiday."), 30),
        ("dialogue", dict(turns=[{**t, "audio": audio[2 + t["clip"]]} if "clip" in t else t for t in turns]), 20),
        ("read_aloud", dict(audio=audio[3], text=SENTENCES[3]), 25),
    ]
    expected = []
    for kind, asked, tokens in questions:
        make_messages, _, samples = tutor._conversation(kind, **asked)
        expected.append(alone(tutor, make_messages, samples, tokens))

    tutor.engine.set_max_batch(8)
    started: list[threading.Event] = []
    pending = []

    def ask(index: int) -> None:
        kind, asked, tokens = questions[index]
        first = threading.Event()
        started.append(first)
        pending.append(tutor.ask(kind, max_new_tokens=tokens, notify=lambda event: first.set(), **asked))

    ask(0)
    ask(1)
    assert started[0].wait(600) and started[1].wait(600)  # two rows generating: the others join them
    ask(2)
    ask(3)
    assert started[3].wait(600)
    ask(4)
    answers = [p.feedback() for p in pending]
    assert_same_answers(answers, expected)
    assert tutor.engine.prefixes.hits >= 2  # the read-aloud questions continued from their kept start
    assert [a.finish_reason for a, ((_, n), tie) in zip(answers, expected) if tie is None] == [
        "length" if n == q[2] else "stop" for ((_, n), tie), q in zip(expected, questions) if tie is None]
    assert all(a.prompt_tokens > 128 for a in answers)  # past the sliding window
    assert tutor.engine.running == 0 and tutor.engine.waiting == 0


def test_the_text_streams_in_pieces_that_make_the_answer(tutor, speechocean_dir):
    audio = clips(speechocean_dir)
    seen: list[str] = []
    answer = tutor.feedback(audio[0], SENTENCES[0], max_new_tokens=12, on_text=seen.append)
    assert seen and seen[-1] == answer.text
    assert all(later.startswith(earlier) for earlier, later in zip(seen, seen[1:]))
    assert answer.first_token_s is not None and answer.first_token_s <= answer.seconds

    pieces = list(tutor.ask("read_aloud", audio=audio[1], text=SENTENCES[1], max_new_tokens=10))
    whole = tutor.feedback(audio[1], SENTENCES[1], max_new_tokens=10).text
    assert "".join(pieces) == whole


def test_one_at_a_time_and_a_withdrawn_question(tutor, speechocean_dir):
    audio = clips(speechocean_dir)
    tutor.engine.set_max_batch(1)
    try:
        first = tutor.ask("read_aloud", audio=audio[0], text=SENTENCES[0], max_new_tokens=20)
        second = tutor.ask("read_aloud", audio=audio[1], text=SENTENCES[1], max_new_tokens=6)
        done, later = first.answer.result(600), second.answer.result(600)
        # With one row the second question is read only once the first answer has ended.
        assert first.answer.submitted + done.seconds <= second.answer.submitted + later.first_token_s
    finally:
        tutor.engine.set_max_batch(8)
    started = threading.Event()
    withdrawn = tutor.ask("read_aloud", audio=audio[2], text=SENTENCES[2], max_new_tokens=200,
                          notify=lambda event: started.set())
    assert started.wait(600)
    withdrawn.cancel()
    result = withdrawn.answer.result(600)
    assert result.finish_reason == "stop" and result.new_tokens < 200


def test_a_control_token_is_refused_when_the_prompt_is_built(tutor, speechocean_dir):
    from pipeline.errors import DatasetError

    audio = clips(speechocean_dir)
    special = tutor.processor.tokenizer.convert_ids_to_tokens(tutor.processor.tokenizer.audio_token_id)
    with pytest.raises(DatasetError):
        tutor.feedback(audio[0], f"BEAR {special}", max_new_tokens=4)
    assert tutor.feedback(audio[0], SENTENCES[0], max_new_tokens=4).new_tokens >= 1  # the engine goes on


def test_a_kept_prompt_start_gives_the_prefill_and_the_answer_of_the_whole_prompt(tutor, speechocean_dir):
    """Prefix caching: a prefill that continues from the kept cache of its prompt's start (the
    instructions before the clip) gives the logits and the cache that reading the whole prompt gives,
    and the same greedy answer as `generate` alone; the kept start is not changed by the answers that
    continue from it, and each kind of question keeps its own start."""
    import torch

    from pipeline.model.batch_cache import returned_cache

    audio = clips(speechocean_dir)
    engine = tutor.engine
    make_messages, _, samples = tutor._conversation("read_aloud", audio=audio[1], text=SENTENCES[1])
    with tutor._lock, torch.inference_mode():
        inputs = tutor._inputs(make_messages, samples)
        shared = tutor._shared_prefix(inputs["input_ids"][0].tolist())
        assert 16 <= shared < inputs["input_ids"].shape[1] - 100  # the instructions; the clip comes after
        kept, engine.shared_prefix = engine.shared_prefix, None
        try:
            whole = engine._read(inputs, False)
        finally:
            engine.shared_prefix = kept
        continued = [engine._read(inputs, False) for _ in range(2)]  # the start read and kept, then reused
    assert engine.prefixes.hits >= 1
    for output in continued:
        assert torch.allclose(output.logits[0, -1], whole.logits[0, -1], atol=1e-4)
        assert int(output.logits[0, -1].argmax()) == int(whole.logits[0, -1].argmax())
        for mine, reference in zip(returned_cache(output).layers, returned_cache(whole).layers):
            if getattr(reference, "keys", None) is not None and reference.keys.numel():
                assert mine.keys.shape == reference.keys.shape
                assert torch.allclose(mine.keys, reference.keys, atol=1e-5)
                assert torch.allclose(mine.values, reference.values, atol=1e-5)
        assert returned_cache(output).get_seq_length() == returned_cache(whole).get_seq_length()

    hits = engine.prefixes.hits
    for kind, text in (("read_aloud", SENTENCES[0]), ("free_speech", "Describe your last holiday.")):
        make_messages, _, samples = tutor._conversation(kind, audio=audio[0], text=text)
        expected = alone(tutor, make_messages, samples, 16)
        for _ in range(2):
            answer = tutor.ask(kind, audio=audio[0], text=text, max_new_tokens=16).feedback()
            assert_same_answers([answer], [expected])
    assert engine.prefixes.hits >= hits + 3  # the second read aloud, then the second free speech
    assert len(engine.prefixes) >= 2  # one start per kind
    for start in engine.prefixes._caches.values():  # nothing extended a kept start
        lengths = {layer.keys.shape[-2] for layer in start.layers if getattr(layer, "keys", None) is not None}
        assert len(lengths) == 1 and lengths.pop() < inputs["input_ids"].shape[1] - 100


def test_prefix_cache_keeps_starts_per_adapter_state_and_drops_the_least_recently_used(monkeypatch):
    from pipeline.tutor.batching import PREFIX_CACHE_ENV, BatchEngine, PrefixCache

    starts = PrefixCache(entries=2)
    assert starts.get((False, (1, 2))) is None and starts.misses == 1
    starts.put((False, (1, 2)), {"tuned": 1})
    starts.put((True, (1, 2)), {"base": 1})  # the same tokens without the adapter: another start
    assert starts.get((False, (1, 2))) == {"tuned": 1} and starts.hits == 1
    copy = starts.get((True, (1, 2)))
    copy["base"] = 2  # a copy: the kept start is unchanged
    assert starts.get((True, (1, 2))) == {"base": 1}
    starts.put((False, (3,)), {"other": 1})  # the least recently used, (False, (1, 2)), is dropped
    assert len(starts) == 2 and starts.get((False, (1, 2))) is None

    monkeypatch.setenv(PREFIX_CACHE_ENV, "0")
    off = BatchEngine(None, None, lock=threading.Lock(), device="cpu", eos_ids=[], shared_prefix=lambda ids: 5)
    assert off.shared_prefix is None
    monkeypatch.delenv(PREFIX_CACHE_ENV)
    on = BatchEngine(None, None, lock=threading.Lock(), device="cpu", eos_ids=[], shared_prefix=lambda ids: 5)
    assert on.shared_prefix is not None


def test_joined_caches_keep_each_row(tiny_model_dir):
    """`batch_cache.join` and `keep_rows` on real caches: the rows' keys are the ones each had alone,
    right-aligned, and columns that are padding in every kept row are dropped."""
    import torch

    from pipeline.model.batch_cache import batchable, join, keep_rows
    from pipeline.model.loading import load_model

    model, _ = load_model(str(tiny_model_dir), device="cpu", quantization="none")
    caches, masks = [], []
    for length in (20, 150, 60):
        ids = torch.randint(10, 200, (1, length))
        with torch.inference_mode():
            caches.append(model(input_ids=ids, use_cache=True).past_key_values)
        masks.append(torch.ones(1, length, dtype=torch.long))
    assert batchable(caches[0])
    alone = [[None if layer.keys is None else layer.keys.clone() for layer in cache.layers] for cache in caches]
    mask = join(caches[0], masks[0], caches[1], masks[1])
    mask = join(caches[0], mask, caches[2], masks[2])
    assert mask.shape == (3, 150) and mask.sum(-1).tolist() == [20, 150, 60]
    for index, layer in enumerate(caches[0].layers):
        if layer.keys is None:
            continue
        for row in range(3):
            own = alone[row][index]
            assert torch.equal(layer.keys[row, :, -own.shape[-2]:], own[0]) or own.shape[-2] > layer.keys.shape[-2]
    mask = keep_rows(caches[0], mask, [2, 0])
    assert mask.shape == (2, 60) and mask.sum(-1).tolist() == [60, 20]
    for index, layer in enumerate(caches[0].layers):
        if layer.keys is not None and type(layer).__name__ == "DynamicLayer":
            assert layer.keys.shape[-2] == 60 and torch.equal(layer.keys[0], alone[2][index][0])


def test_text_deltas_make_the_decoded_answer_and_hold_back_what_cannot_be_shown_yet(tutor):
    """The streamed pieces join into exactly the answer `decode(..., skip_special_tokens=True).strip()`
    gives, token by token: no leading space is sent, and a character split across tokens (U+FFFD when
    decoded alone) waits for its next token."""
    from pipeline.tutor.batching import TextDeltas

    tokenizer = tutor.processor.tokenizer
    text = "  Très bien: the vowel in “bear” 🐻 is open."
    tokens = tokenizer.encode(text, add_special_tokens=False)
    deltas = TextDeltas(tokenizer)
    pieces = [deltas.push(token) for token in tokens]
    whole, last = deltas.finish()
    assert whole == tokenizer.decode(tokens, skip_special_tokens=True).strip()
    assert "".join(pieces) + last == whole and not any("\ufffd" in piece for piece in pieces)
    assert not pieces[0].startswith(" ")


def test_the_batch_size_is_a_setting_with_a_safe_default(monkeypatch):
    from pipeline.errors import ConfigError
    from pipeline.tutor.batching import DEFAULT_MAX_BATCH, MAX_BATCH_ENV, default_max_batch

    monkeypatch.delenv(MAX_BATCH_ENV, raising=False)
    assert default_max_batch() == DEFAULT_MAX_BATCH
    monkeypatch.setenv(MAX_BATCH_ENV, "1")
    assert default_max_batch() == 1
    monkeypatch.setenv(MAX_BATCH_ENV, "none")
    with pytest.raises(ConfigError, match=MAX_BATCH_ENV):
        default_max_batch()


def test_a_tutor_answers_with_fused_attention_and_training_keeps_eager(tutor, tiny_model_dir, monkeypatch):
    """`load_tutor` switches the model to `sdpa` (`pipeline.model.loading.use_answer_attention`; the
    greedy answers above are checked with it), `TUTOR_ANSWER_ATTENTION=eager` keeps the training's
    attention, and a value that is neither is refused by name."""
    from pipeline.errors import ConfigError
    from pipeline.model.loading import ANSWER_ATTENTION_ENV, load_model, use_answer_attention

    assert tutor.model.config._attn_implementation == "sdpa"
    model, _ = load_model(str(tiny_model_dir), device="cpu", quantization="none")
    assert model.config._attn_implementation == "eager"  # as training loads it
    monkeypatch.setenv(ANSWER_ATTENTION_ENV, "eager")
    assert use_answer_attention(model) == "eager" and model.config._attn_implementation == "eager"
    monkeypatch.setenv(ANSWER_ATTENTION_ENV, "flash")
    with pytest.raises(ConfigError, match=ANSWER_ATTENTION_ENV):
        use_answer_attention(model)
    monkeypatch.delenv(ANSWER_ATTENTION_ENV)
    assert use_answer_attention(model) == "sdpa" and model.config._attn_implementation == "sdpa"
