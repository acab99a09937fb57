"""No leaked thought channel on any surface (issue 43): Gemma 4 is reported to write `<|channel>thought ...
<channel|>` into answers. Every answer is decoded through `pipeline.model.tokens.answer_text` (the whole
answer: Try, Judge, grounding, the practice page, the inbox, the API) or `TextDeltas` (streamed: the API's
stream, Try's growing text), and parsed through `parse_feedback`; each drops a channel, closed or not."""

from __future__ import annotations

import pytest

ANSWER = "Scores (0-10): accuracy 7, fluency 8, prosody 8, total 7\nWords to practise: none\nAdvice: slow down."
LEAKS = {
    "closed": f"<|channel>thought\nThe learner said bear.<channel|>{ANSWER}<turn|>",
    "closed, after a system prompt's echo": f"<|channel>thought\n<channel|><|channel>thought\nhm<channel|>{ANSWER}",
    "unclosed at the end": f"{ANSWER}<|channel>thought\nand now I think",
}


@pytest.fixture(scope="module")
def gemma4_tokenizer(tiny_gemma4_dir):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_gemma4_dir).tokenizer


@pytest.mark.parametrize("leak", sorted(LEAKS))
def test_a_whole_answer_and_a_streamed_one_hold_no_channel(gemma4_tokenizer, leak):
    from pipeline.model.tokens import answer_text
    from pipeline.tutor.batching import TextDeltas

    tok = gemma4_tokenizer
    ids = tok(LEAKS[leak], add_special_tokens=False)["input_ids"]
    assert tok.convert_tokens_to_ids("<|channel>") in ids  # the control token itself, as generate writes it
    assert answer_text(tok, ids) == ANSWER
    deltas = TextDeltas(tok)
    pieces = [deltas.push(t) for t in ids]
    whole, last = deltas.finish()
    assert whole == ANSWER and "".join(pieces) + last == ANSWER
    assert not any("thought" in p or "think" in p for p in pieces)


def test_an_unclosed_channel_from_the_start_shows_nothing(gemma4_tokenizer):
    from pipeline.model.tokens import answer_text

    ids = gemma4_tokenizer("<|channel>thought\nstill thinking", add_special_tokens=False)["input_ids"]
    assert answer_text(gemma4_tokenizer, ids) == ""


@pytest.mark.parametrize("leak", sorted(LEAKS))
def test_the_parser_reads_a_leaked_answer_as_the_clean_one(leak):
    """Text that spells the channel (llama.cpp's output, a client's history): parsed as the clean answer."""
    from pipeline.conversation.feedback import parse_feedback, without_thought_text

    text = LEAKS[leak].replace("<turn|>", "")
    assert without_thought_text(text) == ANSWER
    assert parse_feedback(text) == parse_feedback(ANSWER)
    assert parse_feedback(ANSWER).accuracy == 7


def test_gemma_3n_answers_are_decoded_as_before(tiny_model_dir):
    """A family without a thought channel: `answer_text` is `decode(skip_special_tokens=True).strip()`."""
    from transformers import AutoProcessor

    from pipeline.model.tokens import answer_text

    tok = AutoProcessor.from_pretrained(tiny_model_dir).tokenizer
    ids = tok(" Good job. <end_of_turn>", add_special_tokens=False)["input_ids"]
    assert answer_text(tok, ids) == tok.decode(ids, skip_special_tokens=True).strip() == "Good job."
