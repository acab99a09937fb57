"""Benchmark: seconds per answer (p50, p95) and answers per minute of `python -m pipeline serve`, with 1
and 4 concurrent clients, called with the official `openai` client as an app would.

Without `--workspace`, builds a workspace in a temporary folder with the commands a person would run
(`make-tiny-model`, `import` of the bundled sample pack's 8 real clips, `build`, `train --max-steps 1`),
i.e. the tiny random stand-in; with `--workspace WS --run NAME` it serves that run instead. The server
runs in its own process on a free loopback port. Each client sends the same read-aloud request (a real
clip of the pack and its sentence) in a loop; one warm-up answer is left out. A client's seconds per
answer run from sending the request to having the whole response; answers per minute are the answers
of a level divided by its wall time. With one loaded model the answers queue on it (one answer
generates at a time), so 4 clients mostly measure the queue's wait.

    .venv/bin/python benchmarks/serve_latency.py [--requests 16] [--max-tokens 32] [--concurrency 1 4]
        [--workspace WS --run NAME] [--json]

Figures depend on the machine and on what else runs on it: the cores, the load average and the torch
threads the server used are printed with them.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from printout import print_report  # benchmarks/, beside this script

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
PACK = REPO / "sample_data" / "speechocean762-pack"
KEY = "benchmark-key-0123456789"
LEVEL_COLUMNS = [
    ("clients", ">8", lambda level: level["clients"]),
    ("answers", ">8", lambda level: level["answers"]),
    ("p50 s", ">8", lambda level: f"{level['p50_s']:.2f}"),
    ("p95 s", ">8", lambda level: f"{level['p95_s']:.2f}"),
    ("answers/min", ">12", lambda level: f"{level['answers_per_minute']:.1f}"),
    ("tokens/answer", ">14", lambda level: f"{level['mean_completion_tokens']:.1f}"),
]
"""The table's columns (`printout.print_report`): one row per number of concurrent clients."""


def _run(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, check=True, stdout=subprocess.DEVNULL)


def make_workspace(root: Path) -> tuple[Path, str]:
    """A workspace with the sample pack, built and trained one step on the tiny stand-in; `(ws, run)`."""
    ws, model = root / "ws", root / "tiny-gemma3n"
    _run("make-tiny-model", str(model))
    _run("import", "--workspace", str(ws), "--source", str(PACK))
    _run("build", "--workspace", str(ws), "--model", str(model), "--eval-fraction", "0")
    _run("train", "--workspace", str(ws), "--run", "bench", "--model", str(model), "--max-steps", "1",
         "--device", "cpu", "--quantization", "none", "--eval-steps", "0", "--save-steps", "0")
    return ws, "bench"


def request_of_pack() -> tuple[bytes, str]:
    """A real clip of the sample pack and the sentence read in it (Kaldi `text`)."""
    sentences = dict(line.split(maxsplit=1) for line in (PACK / "text").read_text(encoding="utf-8").splitlines() if line.strip())
    clip = sorted(PACK.glob("WAVE/*/*.WAV"))[0]
    return clip.read_bytes(), sentences[clip.stem].strip()


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between the closest ranks (NumPy's default)."""
    import numpy as np

    return float(np.percentile(values, q))


def measure(client, clip: bytes, sentence: str, *, model: str, clients: int, requests: int, max_tokens: int) -> dict:
    """`requests` answers spread over `clients` threads; seconds per answer and answers per minute."""
    messages = [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}},
        {"type": "text", "text": sentence}]}]
    seconds: list[float] = []
    tokens: list[int] = []
    lock = threading.Lock()
    todo = list(range(requests))

    def loop() -> None:
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            started = time.perf_counter()
            answer = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens)
            with lock:
                seconds.append(time.perf_counter() - started)
                tokens.append(answer.usage.completion_tokens)

    started = time.perf_counter()
    threads = [threading.Thread(target=loop) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return {"clients": clients, "answers": len(seconds), "p50_s": round(percentile(seconds, 50), 3),
            "p95_s": round(percentile(seconds, 95), 3), "answers_per_minute": round(len(seconds) / wall * 60, 1),
            "mean_completion_tokens": round(statistics.mean(tokens), 1), "wall_s": round(wall, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, default=None, help="serve this workspace's --run (default: build one)")
    parser.add_argument("--run", default=None, help="with --workspace: the run to serve")
    parser.add_argument("--requests", type=int, default=16, help="answers measured per concurrency level")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens of each request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4], help="concurrent clients per level")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if (args.workspace is None) != (args.run is None):
        parser.error("give --workspace and --run together (or neither, to build a tiny workspace)")
    import openai

    from tests.processes import stop_process_group

    with tempfile.TemporaryDirectory(prefix="serve-latency-") as tmp:
        ws, run = (args.workspace, args.run) if args.workspace else make_workspace(Path(tmp))
        with open(Path(tmp) / "serve.log", "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "serve", "--workspace", str(ws), "--run", run, "--port", "0",
                 "--api-key", KEY, "--queue-size", str(max(8, max(args.concurrency))), "--json"],
                cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
        try:
            line = server.stdout.readline()
            if not line:
                raise SystemExit(f"the server did not start:\n{(Path(tmp) / 'serve.log').read_text(errors='replace')[-2000:]}")
            ready = json.loads(line)
            client = openai.OpenAI(base_url=ready["url"], api_key=KEY, max_retries=0, timeout=600)
            clip, sentence = request_of_pack()
            measure(client, clip, sentence, model=run, clients=1, requests=1, max_tokens=args.max_tokens)  # warm-up
            levels = [measure(client, clip, sentence, model=run, clients=c, requests=args.requests,
                              max_tokens=args.max_tokens) for c in args.concurrency]
        finally:
            stop_process_group(server.pid)
            server.wait(timeout=30)
    from pipeline.host.cpu_threads import available_cores, inference_threads

    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": available_cores(),
              "load_average": [round(x, 2) for x in os.getloadavg()], "server_threads": inference_threads(False),
              "model": "tiny random stand-in" if args.workspace is None else f"{ws} run {run}",
              "max_tokens": args.max_tokens, "levels": levels}
    print_report(result, as_json=args.json, columns=LEVEL_COLUMNS, rows=levels, title=[
        f"serve latency, {result['model']}, {result['date']}, {result['cores']} cores "
        f"(load average {result['load_average'][0]}), {result['server_threads']} torch thread(s), max_tokens {args.max_tokens}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
