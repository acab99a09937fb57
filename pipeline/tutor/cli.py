"""The tutor stage's command line: `python -m pipeline infer`, `evaluate` and `eval-job`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError, EvaluationError
from pipeline.tutor.eval_jobs import (
    count_words,
    describe,
    job_status,
    jobs_dir,
    list_jobs,
    request_cancel,
    run_job,
    start_job,
)
from pipeline.tutor.evaluate import evaluate_tutor, save_evaluation
from pipeline.tutor.infer import DEFAULT_MAX_NEW_TOKENS, load_tutor
from pipeline.tutor.metrics import summary
from pipeline.workspace import DEFAULT_WORKSPACE, Workspace


def _read_turns(path: Path) -> list[dict]:
    """The `--turns` file: a JSON list of turns; audio paths made relative to the file's folder."""
    try:
        turns = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"`--turns {path}` cannot be read as JSON ({error}); give a JSON list of turns.") from None
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise ConfigError(f"`--turns {path}` must hold a JSON list of turns like "
                          '[{"role": "learner", "audio": "a.wav"}, {"role": "tutor", "text": "..."}].')
    for turn in turns:
        if isinstance(turn.get("audio"), str):
            turn["audio"] = str(path.parent / turn["audio"])
    return turns


def infer_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline infer --workspace WS --model M [--run NAME] [--kind K] --audio FILE --text "TARGET"
    [--prompt "QUESTION"] [--turns TURNS.json] [--json]`."""
    parser = argparse.ArgumentParser(prog="python -m pipeline infer", description="Tutor feedback for one clip, base or tuned.")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help=f"workspace folder (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--model", default=None, help="hub id or local folder (default: the run's model; required without --run)")
    parser.add_argument("--run", default=None, help="run whose LoRA adapter to apply (default: the base model)")
    parser.add_argument("--kind", choices=("read_aloud", "free_speech", "dialogue"), default="read_aloud",
                        help="read_aloud (--audio + --text), free_speech (--audio + --prompt), dialogue (--turns)")
    parser.add_argument("--audio", default=None, help="audio file (wav, flac, ogg, mp3, m4a, webm)")
    parser.add_argument("--text", default=None, help="read_aloud: the sentence the learner was asked to read")
    parser.add_argument("--prompt", default=None, help="free_speech: the question the learner answered")
    parser.add_argument("--turns", type=Path, default=None,
                        help='dialogue: a JSON list of turns, [{"role": "learner", "audio": "a.wav"}, {"role": "tutor", '
                             '"text": "..."}, ...], ending with the learner; audio paths relative to the file')
    parser.add_argument("--device", choices=("auto", "cuda", "mps", "cpu"), default=None, help="default: the run's, else auto")
    parser.add_argument("--quantization", choices=("4bit", "8bit", "none"), default=None, help="default: the run's, else per device")
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS, help="longest answer in tokens")
    parser.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        raise ConfigError(f"`--max-new-tokens` must be >= 1, got {args.max_new_tokens}.")
    needs = {"read_aloud": ("audio", "text"), "free_speech": ("audio", "prompt"), "dialogue": ("turns",)}[args.kind]
    missing = [f"--{name}" for name in needs if getattr(args, name) in (None, "")]
    if missing:
        raise ConfigError(f"`--kind {args.kind}` needs {' and '.join(missing)}; see `python -m pipeline infer --help`.")
    turns = _read_turns(args.turns) if args.kind == "dialogue" else None
    tutor = load_tutor(args.model, run=args.run, workspace=args.workspace, device=args.device, quantization=args.quantization, use_cache=False)
    options = dict(max_new_tokens=args.max_new_tokens, do_sample=args.sample)
    if args.kind == "free_speech":
        result = tutor.free_speech_feedback(args.audio, args.prompt, **options)
    elif args.kind == "dialogue":
        result = tutor.dialogue_reply(turns, **options)
    else:
        result = tutor.feedback(args.audio, args.text, **options)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        who = f"run `{result.run}`" if result.run else "base model"
        print(f"Tutor ({who}, {result.model}, {result.device}, {result.quantization}):\n{result.text}")
        if result.note:
            print(f"\nnote: {result.note}")
    return 0


def evaluate_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline evaluate --workspace WS (--run NAME | --model M) [--split eval] [--limit N] [--json]`."""
    from pipeline.fileio import atomic_write_json

    parser = argparse.ArgumentParser(
        prog="python -m pipeline evaluate",
        description="Score a tutor's answers on the built dataset's eval split against the experts' scores, and save them.",
    )
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help="workspace folder")
    parser.add_argument("--model", default=None, help="base model (default: the run's model, else google/gemma-3n-E2B-it)")
    parser.add_argument("--run", default=None, help="training run whose adapter to evaluate (default: the base model)")
    parser.add_argument("--scorer", action="store_true",
                        help="judge the classical scorer (pocketsphinx, no fine-tuning) instead of a model")
    parser.add_argument("--split", default="eval", help="dataset split (default eval)")
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N clips")
    parser.add_argument("--device", choices=("auto", "cuda", "mps", "cpu"), default=None, help="default: the run's, else auto")
    parser.add_argument("--quantization", choices=("4bit", "8bit", "none"), default=None, help="default: the run's, else per device")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="longest answer in tokens (default 256)")
    parser.add_argument("--out", type=Path, default=None, help="also write the result JSON here")
    parser.add_argument("--no-save", action="store_true", help="do not save it under runs/NAME/eval/ or evals/")
    parser.add_argument("--grounding", action="store_true",
                        help="also check that the tutor hears the recording: up to 3 more answers per clip (noise "
                             "instead of the clip, another learner's clip of the sentence, another sentence)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    def progress(done: int, total: int, message: str, checks: tuple[int, int] = (0, 0)) -> None:
        print(f"[{count_words(done, total, *checks)}] {message}", file=sys.stderr, flush=True)

    ws = Workspace(args.workspace)
    result = evaluate_tutor(
        ws, args.model, run=args.run, split=args.split, limit=args.limit, device=args.device,
        quantization=args.quantization, max_new_tokens=args.max_new_tokens,
        progress=None if args.json else progress, grounding=args.grounding, scorer=args.scorer,
    )
    saved = [] if args.no_save else [save_evaluation(ws, result)]
    if args.out:
        atomic_write_json(args.out, result)
        saved.append(args.out)
    result["saved"] = [str(p) for p in saved]
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        who = "the classical scorer" if args.scorer else f"run {args.run}" if args.run else f"base model {result['model']}"
        print(f"Evaluated {who} on {result['clips']} {args.split} clips ({result['dataset_key']}) in {result['seconds']} s")
        from pipeline.tutor.by_kind import by_kind_summary

        print(summary(result))
        print(by_kind_summary(result["by_kind"]))
        from pipeline.tutor.grounding import blame_summary, grounding_text

        print(blame_summary(result))
        if result.get("grounding"):
            print(grounding_text(result["grounding"]))
        if result["note"]:
            print(f"note: {result['note']}")
        for path in result["saved"]:
            print(f"saved {path}")
    return 0


def eval_job_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline eval-job {start,status,list,cancel,run} --workspace WS ...`."""
    parser = argparse.ArgumentParser(prog="python -m pipeline eval-job",
                                     description="Evaluations as background jobs (the app's Judge tab uses these).")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start evaluating base models and runs in a background process")
    start.add_argument("--model", action="append", default=[], help="a base model to evaluate (repeatable)")
    start.add_argument("--run", action="append", default=[], help="a run to evaluate (repeatable)")
    start.add_argument("--scorer", action="store_true", help="also judge the classical scorer (the yardstick)")
    start.add_argument("--max-new-tokens", type=int, default=None, help="longest answer in tokens (default 256)")
    start.add_argument("--limit", type=int, default=None, help="evaluate only the first N clips")
    start.add_argument("--grounding", action="store_true",
                       help="also check that the tutor hears the recording (up to 3 more answers per clip)")
    for name, purpose in (("status", "where a job stands (default: the newest)"), ("cancel", "stop a running job"),
                          ("run", "the job process itself (started by `start`)")):
        sub = commands.add_parser(name, help=purpose)
        sub.add_argument("--job", required=name == "run", default=None, help="job id (a folder in WS/eval_jobs/)")
    commands.add_parser("list", help="every evaluation job, newest first")
    for sub in commands.choices.values():
        sub.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help="workspace folder")
        sub.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    ws = Workspace(args.workspace)

    def show(payload: Any, text: str) -> None:
        print(json.dumps(payload, ensure_ascii=False) if args.json else text)

    if args.command == "run":
        result = run_job(ws, args.job)
        show(result, f"{args.job}: {result['status']}" + (f" ({result['reason']})" if result["reason"] else ""))
        return 0 if result["status"] != "failed" else 1
    if args.command == "start":
        started = start_job(ws, [{"scorer": True}] * args.scorer + [{"model": m} for m in args.model]
                            + [{"run": r} for r in args.run],
                            max_new_tokens=args.max_new_tokens, limit=args.limit, grounding=args.grounding)
        show(started, f"started evaluation job {started['job']} (pid {started['pid']}); follow it with "
                      f"`python -m pipeline eval-job status --workspace {ws.root} --job {started['job']}`")
        return 0
    if args.command == "list":
        jobs = list_jobs(ws)
        show(jobs, "\n".join(describe(s) for s in jobs) or "no evaluation jobs")
        return 0
    job_id = args.job or next((s["job"] for s in list_jobs(ws)), None)
    if job_id is None:
        raise EvaluationError(f"No evaluation job in {jobs_dir(ws)}; start one with `python -m pipeline eval-job start`.")
    status = request_cancel(ws, job_id) if args.command == "cancel" else job_status(ws, job_id)
    show(status, describe(status))
    return 0
