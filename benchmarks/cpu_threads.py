"""Benchmark: training step time with and without a concurrent Try answer, before and after the
thread rule of `pipeline.host.cpu_threads`; prints the figures side by side.

Builds a workspace from the bundled sample pack (8 real clips) with the offline tiny model, then for
each policy runs, as separate processes exactly as the app does:

- `train alone`: `python -m pipeline train` for `--steps` optimizer steps (grad accumulation 1);
- `train + Try`: the same while another process answers clips in a loop with `pipeline.tutor.infer`
  (the app's Try tab), loaded with the workspace so it sees the run training;
- `Try alone`: the answers without training.

Policies: `before` = torch's default, every core for the trainer AND for inference
(`TUTOR_TRAIN_THREADS` = `TUTOR_INFER_THREADS` = cores); `after` = the rule (trainer cores - 1,
inference 1 while a run trains, cores - 1 otherwise). Step time is the median of the per-step
`elapsed_s` differences in progress.jsonl (the first step, which includes warm-up, is left out);
answer time the median seconds per answer.

    .venv/bin/python benchmarks/cpu_threads.py [--steps 6] [--cores N] [--new-tokens 24] [--json]

`--cores N` pins every process to the first N CPUs (Linux), e.g. 2 to reproduce a 2-core laptop.
Figures depend on what else runs on the machine: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from printout import print_report  # benchmarks/, beside this script

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
PACK = REPO / "sample_data" / "speechocean762-pack"
CLIP = next(iter(sorted(PACK.glob("WAVE/*/*.WAV"))), None)

POLICY_COLUMNS = [
    ("policy", "<8", lambda r: r["policy"]),
    ("step s, alone", ">14", lambda r: r["step_s_alone"]),
    ("step s, with Try", ">17", lambda r: r["step_s_with_try"]),
    ("answer s, training", ">19", lambda r: r["answer_s_during_training"]),
    ("answer s, alone", ">16", lambda r: r["answer_s_alone"]),
]
"""The table's columns (`printout.print_report`): one row per thread policy (before / after)."""


def worker(ws: str, model: str, out: str, new_tokens: int) -> None:
    """Answer the same clip in a loop (the Try tab), appending each answer's seconds to `out`."""
    from pipeline.tutor.infer import load_tutor

    tutor = load_tutor(model, workspace=ws, device="cpu", quantization="none", use_cache=False)
    tutor.feedback(CLIP, "KATE'S GOT SOME GREY", max_new_tokens=2)  # warm-up
    with open(out, "a", encoding="utf-8") as handle:
        while True:
            started = time.perf_counter()
            tutor.feedback(CLIP, "KATE'S GOT SOME GREY", max_new_tokens=new_tokens)
            handle.write(f"{time.perf_counter() - started:.3f}\n")
            handle.flush()


def _env(policy: str, cores: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                            "TUTOR_TRAIN_THREADS", "TUTOR_INFER_THREADS")}
    env["PYTHONPATH"] = str(REPO)
    if policy == "before":  # torch's default: every core, in every process
        env.update(TUTOR_TRAIN_THREADS=str(cores), TUTOR_INFER_THREADS=str(cores), OMP_NUM_THREADS=str(cores))
    return env


def _step_times(progress: Path) -> list[float]:
    rows = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]
    elapsed = [r["elapsed_s"] for r in rows if r.get("kind") == "train"]
    return [b - a for a, b in zip(elapsed, elapsed[1:])]


def _train(ws: Path, model: Path, run: str, steps: int, env: dict) -> list[float]:
    command = [sys.executable, "-m", "pipeline", "train", "--workspace", str(ws), "--run", run, "--model", str(model),
               "--device", "cpu", "--quantization", "none", "--grad-accum", "1", "--max-steps", str(steps),
               "--save-steps", "0", "--eval-steps", "0", "--lora-rank", "4", "--lora-alpha", "8"]
    subprocess.run(command, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return _step_times(ws / "runs" / run / "progress.jsonl")


def _answers(path: Path) -> list[float]:
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def _start_worker(ws: Path, model: Path, out: Path, env: dict, new_tokens: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--worker", str(ws), str(model), str(out), str(new_tokens)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _wait_for_answers(path: Path, count: int, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while len(_answers(path)) < count and time.monotonic() < deadline:
        time.sleep(0.5)


def measure(policy: str, ws: Path, model: Path, steps: int, cores: int, new_tokens: int) -> dict:
    env = _env(policy, cores)
    alone = _train(ws, model, f"{policy}-alone", steps, env)
    answers = ws / f"{policy}-answers-during.txt"
    proc = _start_worker(ws, model, answers, env, new_tokens)
    try:
        _wait_for_answers(answers, 1)  # the worker is loaded and answering before training starts
        during = _train(ws, model, f"{policy}-with-try", steps, env)
        answered = _answers(answers)[1:]  # answers that overlapped the training (the first was a start-up check)
    finally:
        _stop(proc)
    quiet = ws / f"{policy}-answers-quiet.txt"
    proc = _start_worker(ws, model, quiet, env, new_tokens)
    try:
        _wait_for_answers(quiet, 3)
    finally:
        _stop(proc)
    median = lambda xs: round(statistics.median(xs), 3) if xs else None  # noqa: E731
    return {"policy": policy, "step_s_alone": median(alone[1:]), "step_s_with_try": median(during[1:]),
            "answer_s_during_training": median(answered), "answer_s_alone": median(_answers(quiet)),
            "answers_during_training": len(answered)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per training run")
    parser.add_argument("--cores", type=int, default=None, help="pin to the first N CPUs (Linux)")
    parser.add_argument("--new-tokens", type=int, default=24, help="tokens per answer")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", nargs=4, metavar=("WS", "MODEL", "OUT", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker[:3], int(args.worker[3]))
        return 0
    if args.cores:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    from pipeline.host.cpu_threads import available_cores, inference_threads, trainer_threads

    cores = available_cores()
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
        ws, model = Path(tmp) / "ws", Path(tmp) / "tiny"
        env = _env("after", cores)
        subprocess.run([sys.executable, "-m", "pipeline", "make-tiny-model", str(model)], cwd=REPO, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, "-m", "pipeline", "import", "--workspace", str(ws), "--source", str(PACK)],
                       cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, "-m", "pipeline", "build", "--workspace", str(ws), "--model", str(model),
                        "--eval-fraction", "0"], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
        rows = [measure(policy, ws, model, args.steps, cores, args.new_tokens) for policy in ("before", "after")]
    load = os.getloadavg()
    report = {"cores": cores, "load_average": [round(x, 2) for x in load], "steps": args.steps,
              "rule": {"trainer_threads": trainer_threads(cores), "inference_threads_while_training": inference_threads(True, cores)},
              "rows": rows}
    print_report(report, as_json=args.json, columns=POLICY_COLUMNS, rows=rows, title=[
        f"{cores} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; tiny Gemma 3n, {args.steps} steps, "
        f"{args.new_tokens}-token answers",
        f"rule: trainer {trainer_threads(cores)} thread(s), inference {inference_threads(True, cores)} while training, "
        f"{inference_threads(False, cores)} otherwise; 'before' = {cores} threads in every process"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
