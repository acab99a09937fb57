"""Dataset rows as the model sees them: each sample read into a row, its conversation rendered, its
tokens counted (text tokens + the audio span of every clip, `pipeline.model.tokens`: fixed for Gemma 3n,
by clip length for Gemma 4), and kept only when it fits `--max-length` with room for the answer.

The rule is the trainer's and the estimate's: a row too long is left out with the `--max-length`
that keeps it, never cut (`pipeline.data.dataset.build_dataset` reports it). This module does not
split, save or describe the dataset (`pipeline.data.dataset`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pipeline.errors import PipelineError
from pipeline.model.tokens import MAX_AUDIO_S, TokenCounter
from pipeline.data.rows import row_clip_lengths, row_messages, sample_row


@dataclass
class Rendered:
    """A sample's row (`pipeline.data.rows.sample_row`) with its conversation rendered as the
    tokenizer sees it: `full` (the training text: every answer, the last after the generation prompt,
    `TokenCounter.render_training`) and `prompt` (up to the first answer, with the generation prompt)."""

    row: dict
    full: str
    prompt: str


def render_rows(samples: list, library: Any, counter: TokenCounter,
                report_progress: Callable[[int, int, str], None]) -> tuple[list[Rendered], list[dict]]:
    """Read each sample into a row (its clips decoded and checked, at most `MAX_AUDIO_S` seconds each)
    and render its conversation (`pipeline.conversation.messages`, through `row_messages`).

    Returns `(rendered, excluded)`: the rows in library order, and `[{id, reason}]` for samples that
    cannot become one (a clip that cannot be used, or a control token in a person's text: the same
    rule as training and inference, `PipelineError`'s message as the reason).
    """
    excluded: list[dict] = []
    rendered: list[Rendered] = []
    for index, sample in enumerate(samples):
        row, reason = sample_row(sample, library, MAX_AUDIO_S)
        if reason is not None:
            excluded.append({"id": sample.id, "reason": reason})
            continue
        try:  # the same rule as training and inference: no control token in a person's text
            tokenizer = counter.tokenizer
            lengths = row_clip_lengths(row)
            full = counter.render_training(row_messages(row, lengths, tokenizer=tokenizer))
            prompt = counter.render(row_messages(row, lengths, answers=False, tokenizer=tokenizer), add_generation_prompt=True)
        except PipelineError as error:
            excluded.append({"id": sample.id, "reason": str(error)})
            continue
        rendered.append(Rendered(row, full, prompt))
        if index % 50 == 0:
            report_progress(index, len(samples), "reading clips")
    return rendered, excluded


def rows_that_fit(rendered: list[Rendered], counter: TokenCounter,
                  max_length: int) -> tuple[list[dict], list[dict], set[int]]:
    """Count each rendered row's tokens (text tokens + audio positions, `TokenCounter`) and keep the
    rows whose prompt leaves room for the answer within `max_length` and whose whole conversation fits
    (never cut). A kept row gets `num_tokens` (a column) and `answer_tokens` (the supervised count,
    for the build report only).

    Returns `(rows, too_long, token_ids)`: the kept rows in order, `[{id, reason, num_tokens}]` for
    the rows left out (the reason names the `--max-length` that keeps them), and the distinct token
    ids of the kept rows (per-layer embedding rows read on CPU).
    """
    encoded = counter.encode_texts([r.full for r in rendered])
    prompts = counter.count_texts([r.prompt for r in rendered])
    rows: list[dict] = []
    too_long: list[dict] = []
    seen_tokens: set[int] = set()
    for row, ids, prompt in zip((r.row for r in rendered), encoded, prompts):
        total = len(ids)
        if prompt >= max_length:
            too_long.append(
                {
                    "id": row["id"],
                    "reason": f"the prompt alone (instructions, audio, target text) is {prompt} tokens, not under "
                    f"--max-length {max_length}: no room for the answer; raise --max-length to at least {total}",
                    "num_tokens": total,
                }
            )
        elif total > max_length:
            too_long.append(
                {
                    "id": row["id"],
                    "reason": f"{total} tokens > --max-length {max_length}: the answer ({total - prompt} tokens) "
                    f"would be cut; raise --max-length to {total} or shorten the feedback",
                    "num_tokens": total,
                }
            )
        else:
            row["num_tokens"] = total
            row["answer_tokens"] = counter.supervised_tokens(ids)  # build report only, not a column
            row["audio_tokens"] = sum(counter.audio_tokens(x) for x in row.get("clip_seconds") or [])
            rows.append(row)
            seen_tokens.update(ids)
    return rows, too_long, seen_tokens


def asked_turn_rows(rows: list[dict], counter: TokenCounter) -> tuple[list[dict], dict]:
    """The training rows of `rows` (kept rows of the train split, `rows_that_fit`), so that every tutor
    answer of a dialogue is supervised after exactly the prompt the tutor is asked it with.

    Where the template asks as its history shows (`pipeline.model.tokens.asked_extra` empty: Gemma 3n,
    Gemma 4 E2B's own template) the rows are returned as they are: one row supervises every tutor turn.
    Where it asks with more (the empty thought channel), a row supervises only its last answer (past
    answers render as history, without the channel), so a dialogue with several tutor answers becomes
    one row per answer: the dialogue cut after each (id `ID@N`, N the number of the tutor turn that
    ends it; the last keeps `ID`), holding the clips its learner turns name. A cut whose learner turns
    name no clip is left out (`uncut`), its answer then only history.

    Returns `(rows, cost)`: the training rows (each cut with `num_tokens`, `answer_tokens`,
    `audio_tokens` counted as `rows_that_fit` does), and `{"template_adds", "rows_before", "rows",
    "tokens_before", "tokens", "supervised_before", "supervised", "uncut"}`: what the generation prompt
    adds, and rows, tokens and supervised tokens as a row rendered whole would have them (before the
    rule) and as trained now.
    """
    from pipeline.model.tokens import asked_extra

    extra, _ = asked_extra(counter.tokenizer)
    whole = counter.encode_texts([counter.render(row_messages(r, row_clip_lengths(r), tokenizer=counter.tokenizer))
                                  for r in rows])
    out: list[dict] = []
    uncut = 0
    for row in rows:
        cuts = _dialogue_cuts(row) if extra else []
        for cut in cuts[:-1]:
            if cut is None:
                uncut += 1
                continue
            text = counter.render_training(row_messages(cut, row_clip_lengths(cut), tokenizer=counter.tokenizer))
            ids = counter.encode_texts([text])[0]
            cut.update(num_tokens=len(ids), answer_tokens=counter.supervised_tokens(ids),
                       audio_tokens=sum(counter.audio_tokens(x) for x in cut["clip_seconds"]))
            out.append(cut)
        out.append(row)
    cost = {"template_adds": extra, "rows_before": len(rows), "rows": len(out),
            "tokens_before": sum(len(ids) for ids in whole), "tokens": sum(r["num_tokens"] for r in out),
            "supervised_before": sum(counter.supervised_tokens_as_history(ids) for ids in whole),
            "supervised": sum(r.get("answer_tokens", 0) for r in out), "uncut": uncut}
    return out, cost


def _dialogue_cuts(row: dict) -> list[dict | None]:
    """A dialogue row cut after each tutor answer (consecutive tutor turns are one answer), in order; the
    last cut is the whole row. A cut whose learner turns name no clip is None. [] for other kinds."""
    import json

    from pipeline.conversation.messages import TUTOR
    from pipeline.data.rows import row_kind, row_turns

    if row_kind(row) != "dialogue":
        return []
    turns = row_turns(row)
    ends = [i for i, t in enumerate(turns) if str(t.get("role", "")).lower() == TUTOR
            and (i + 1 == len(turns) or str(turns[i + 1].get("role", "")).lower() != TUTOR)]
    wavs = [row["audio_wav"]] + list(row.get("extra_audio_wavs") or [])
    seconds = list(row.get("clip_seconds") or [])
    cuts: list[dict | None] = []
    for end in ends:
        kept = turns[: end + 1]
        named = [t["clip"] for t in kept if isinstance(t.get("clip"), int)]
        if not named:
            cuts.append(None)
            continue
        n = max(named) + 1
        cuts.append({**row, "id": f"{row['id']}@{end + 1}", "turns": json.dumps(kept, ensure_ascii=False),
                     "audio_wav": wavs[0], "extra_audio_wavs": wavs[1:n], "clips": n, "clip_seconds": seconds[:n],
                     "duration_s": round(sum(seconds[:n]), 3), "longest_clip_s": round(max(seconds[:n]), 3)})
    return cuts
