"""Keep the checkpoint that agrees best with the experts, and stop when it no longer improves.

With `TrainConfig.keep_best`, every evaluation of a run (`--eval-steps`) also answers a fixed subset
of the eval split by generation (`--judge-clips` clips: the first read-aloud rows with expert
scores, by id), exactly as the tutor answers in the app (`pipeline.tutor.infer.Tutor`, greedy), and
scores the answers against the experts:

    expert_agreement = 1 - mean(|tutor total - expert total|) / 10        (in [0, 1])

over the subset, where an answer that does not follow the template (`pipeline.tutor.metrics`'s
`parsed`) counts as the largest error, 10: every answer counts, as in `evaluate`. The sentence
score is the template's `total` (else `accuracy`, `pipeline.tutor.grounding.sentence_score`). A
mean error rather than a correlation, because a correlation over a handful of clips is undefined
as soon as the answers agree on one score. Where the eval split has no read-aloud row with expert
scores (free speech, dialogues), the criterion is the eval loss (lower is better).

The best state's LoRA adapter is written to `runs/NAME/best/` (atomically) with `best.json`
(`{"criterion", "value", "step", "clips", "evaluations", "since_best", "history"}`); the trainer
copies it into the run's `adapter/` at the end (`pipeline.training.train`), so Try, Judge and
export use the best checkpoint. With `--early-stopping-patience N`, the run stops after N
evaluations in a row without improvement. Each evaluation appends a `"kind": "judge"` line to
progress.jsonl with its figure and the seconds it took (the time cost the Train tab shows).
A resumed run reads `best.json` back, so the best is kept across resumes.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from pipeline.fileio import append_jsonl, atomic_write_json, staged_folder
from pipeline.units import plural

log = logging.getLogger("pipeline.training.train")

AGREEMENT = "expert_agreement"
EVAL_LOSS = "eval_loss"
UNPARSED_ERROR = 10.0
"""The error an answer without the template's sentence score counts as (the whole 0-10 scale)."""


def judge_rows(eval_data: Any, clips: int) -> list[dict]:
    """The fixed subset: the first `clips` read-aloud rows of `eval_data` (a `datasets.Dataset`) that
    carry expert scores, ordered by id; [] when there are none (the criterion is then the eval loss)."""
    if eval_data is None or clips < 1:
        return []
    columns = [c for c in ("id", "kind", "scores") if c in eval_data.column_names]
    chosen = sorted((str(row["id"]), index) for index, row in enumerate(eval_data.select_columns(columns))
                    if (row.get("kind") or "read_aloud") == "read_aloud" and row.get("scores"))
    return [eval_data[index] for _, index in chosen[:clips]]


def expert_agreement(answers: list[str], rows: list[dict]) -> float:
    """`1 - mean error / 10` of the answers' sentence scores against the rows' expert scores (module
    docstring); an unparsed answer counts as error 10. Raises `ValueError` on no rows or a length mismatch."""
    from pipeline.tutor.grounding import sentence_score
    from pipeline.tutor.metrics import reference_from, score_clip
    from pipeline.conversation.feedback import parse_feedback

    if not rows or len(answers) != len(rows):
        raise ValueError(f"expert_agreement needs one answer per row, got {len(answers)} answers for {len(rows)} rows")
    errors = []
    for answer, row in zip(answers, rows):
        reference = json.loads(row["scores"])
        expert = sentence_score(reference_from(reference, row["target_text"]))
        told = sentence_score(parse_feedback(answer)) if score_clip(answer, reference, target_text=row["target_text"])["parsed"] else None
        errors.append(UNPARSED_ERROR if told is None or expert is None else min(UNPARSED_ERROR, abs(told - expert)))
    return round(1.0 - sum(errors) / len(errors) / UNPARSED_ERROR, 6)


def read_best(best_dir: Path) -> dict | None:
    """`best.json` of a run's `best/` folder, or None when there is none (or it cannot be read)."""
    try:
        return json.loads((best_dir / "best.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def best_reason(best: dict | None) -> str | None:
    """One sentence on which checkpoint the adapter is and why, e.g. "the adapter is step 40's: its
    answers agreed best with the experts on 8 eval clips (agreement 0.83, 3 evaluations)"."""
    if not best:
        return None
    if best["criterion"] == AGREEMENT:
        why = (f"its answers agreed best with the experts on {plural(best['clips'], 'eval clip')} "
               f"(agreement {best['value']:.2f} of 1)")
        if best["value"] <= 0:  # every evaluation tied at nothing: the earliest is kept
            why = (f"no evaluation's answers could be compared with the experts' scores yet on {plural(best['clips'], 'eval clip')} "
                   "(a model this new writes no readable feedback), so the earliest evaluation is kept")
    else:
        why = f"it had the lowest eval loss ({best['value']:.4f}; the eval split has no expert scores to compare answers with)"
    return f"the adapter is step {best['step']}'s: {why}, the best of {plural(best['evaluations'], 'evaluation')}"


def judge_now(model, processor: Any, rows: list[dict], *, model_id: str, device: str,
              quantization: str) -> tuple[float, float]:
    """(agreement with the experts, seconds) of `model` as it is now, answering `rows` (`judge_rows`) as the
    tutor does: generation with the KV cache on (restored after), torch's thread count restored, and the
    model put back in training mode."""
    import torch

    from pipeline.tutor.infer import Tutor

    threads = torch.get_num_threads()
    caches = [c for c in (model.config, getattr(model.config, "text_config", None)) if c is not None]
    kept = [getattr(c, "use_cache", None) for c in caches]
    started = time.perf_counter()
    try:
        for c in caches:
            c.use_cache = True
        tutor = Tutor(model, processor, model_id=model_id, run=None, adapter_dir=None, device=device,
                      quantization=quantization)
        answers = [tutor.feedback(row["audio_wav"], row["target_text"]).text for row in rows]
    finally:
        for c, value in zip(caches, kept):
            c.use_cache = value
        torch.set_num_threads(threads)
        model.train()
    return expert_agreement(answers, rows), round(time.perf_counter() - started, 3)


def make_best_checkpoint_callback(paths: dict[str, Path], config: Any, processor: Any, eval_data: Any, device: str,
                                  quantization: str):
    """The `transformers.TrainerCallback` that judges, keeps the best adapter and stops early (module
    docstring). `paths`: `pipeline.training.run_folder.run_paths`; `eval_data`: the eval split (or None)."""
    from transformers import TrainerCallback

    from pipeline.host import distributed

    class BestCheckpointCallback(TrainerCallback):
        def __init__(self):
            self.rows = judge_rows(eval_data, config.judge_clips)
            self.criterion = AGREEMENT if self.rows else EVAL_LOSS
            self.best = read_best(paths["best"])
            self.early_stopped = False
            self.last_judged_step: int | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            """On resume: forget evaluations an interrupted process made after the checkpoint (they run
            again); the best adapter itself is kept, it was a state the run really reached."""
            if self.best:
                history = [h for h in self.best.get("history", [])
                           if h["step"] <= state.global_step or h["step"] == self.best["step"]]
                self.best = dict(self.best, history=history, evaluations=len(history),
                                 since_best=sum(1 for h in history if h["step"] > self.best["step"]))

        def finish(self, trainer, stopped: bool) -> dict | None:
            """At the end of training: judge the last step too unless it was (or the run was stopped
            by request), so the best of every state is kept; returns the best (`best.json`) or None."""
            if not stopped and self.last_judged_step != trainer.state.global_step:
                trainer.evaluate()
            return self.best

        def summary(self) -> dict:
            """What result.json says of it: `best` (without its history), `best_reason`, `early_stopped`."""
            return {"best": {k: v for k, v in (self.best or {}).items() if k != "history"} or None,
                    "best_reason": best_reason(self.best), "early_stopped": self.early_stopped}

        def judge(self, model) -> tuple[float, float]:
            """(agreement, seconds) of the model as it is now on the subset (`judge_now`)."""
            return judge_now(model, processor, self.rows, model_id=config.model, device=device,
                             quantization=quantization)

        def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
            if self.criterion == AGREEMENT:
                value, seconds = self.judge(model) if distributed.is_main_process() else (0.0, 0.0)
            else:
                value, seconds = (metrics or {}).get("eval_loss"), 0.0
                if value is None:
                    return control
            self.last_judged_step = state.global_step
            best = self.best
            better = best is None or (value > best["value"] if self.criterion == AGREEMENT else value < best["value"])
            history = (best or {}).get("history", []) + [{"step": state.global_step, "value": value, "seconds": seconds}]
            if better:
                best = {"criterion": self.criterion, "value": value, "step": state.global_step,
                        "clips": len(self.rows), "since_best": 0}
                if distributed.is_main_process():
                    self._save(model, best)
            else:
                best = dict(best, since_best=best.get("since_best", 0) + 1)
            best.update(evaluations=len(history), history=history)
            self.best = best
            if distributed.is_main_process():
                atomic_write_json(paths["best"] / "best.json", best)
                append_jsonl(paths["progress"], {
                    "kind": "judge", "step": state.global_step, "max_steps": state.max_steps,
                    "criterion": self.criterion, "value": value, "best_step": best["step"], "best_value": best["value"],
                    "clips": len(self.rows), "seconds": seconds, "time": round(time.time(), 3)})
                log.info("step %d: %s %.4f (best %.4f at step %d; %.1f s)", state.global_step, self.criterion, value,
                         best["value"], best["step"], seconds)
            patience = config.early_stopping_patience
            if distributed.any_process(bool(patience) and best["since_best"] >= patience):
                log.info("No improvement in %s: stopping early; keeping step %d.", plural(patience, "evaluation"), best["step"])
                self.early_stopped = True
                control.should_training_stop = True
                control.should_save = True
            return control

        def _save(self, model, best: dict) -> None:
            """Write the model's LoRA adapter to `best/`, replacing the previous best atomically."""
            with staged_folder(paths["best"]) as staging:
                model.save_pretrained(str(staging))
                atomic_write_json(staging / "best.json", best)

    return BestCheckpointCallback()


def best_checkpoint_keeper(paths: dict[str, Path], config: Any, session: Any):
    """The keep-best callback for a run's `session` (`pipeline.training.session.Session`), or None (with
    a warning in the log) when the dataset has no eval split to judge on."""
    if session.eval_data is None:
        log.warning("--keep-best needs an eval split to judge on; this dataset has none, so the last step is kept.")
        return None
    keeper = make_best_checkpoint_callback(paths, config, session.processor, session.eval_data, session.device,
                                           session.quantization.method)
    log.info("Keeping the best checkpoint by %s%s.", keeper.criterion,
             f" on {plural(len(keeper.rows), 'eval clip')} answered at every evaluation" if keeper.rows else "")
    return keeper
