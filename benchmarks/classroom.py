"""Benchmark: a class of students at once, through the API and through the practice page's answer path,
with batching on and off, side by side in one run.

For each number of students (`--students`, default 30 and 8, the goal's level), each path and each
mode, a fresh process answers, and N simulated students (threads) use it for `--seconds`:

- path `api`: `python -m pipeline serve --run bench --max-batch B` on a free loopback port; each
  student calls it with the official `openai` client (one client per student, kept for all its
  questions), `stream=True`, as an app would;
- path `page`: the practice page's answer path in a process of its own (`TUTOR_MAX_BATCH=B`): what
  the page's "Get feedback" handler runs (`ui.common.as_it_grows` over
  `pipeline.inbox.practice.answer_attempt`, the tutor's text as it grows, the attempt kept in the
  inbox when the student consented; every other student consents). Gradio's own queue and HTTP are
  left out (the page's answers wait in the tutor's batch, not in Gradio's queue: its limit is 16);
- mode `on`: up to `--batch` (default 8) answers generated together; `off`: one at a time (B = 1).

Each student starts at a random moment in the first `--ramp-s` seconds (a class does not press at the
same instant), then loops: takes its next real clip (the 60 speechocean762-mini recordings, in its
own seeded order), "records" it (waits the clip's length), sends it with its sentence, and reads the
answer as it arrives. Time to first token is from sending to the first piece of text; the whole
answer, to its last. Answers per minute count the answers completed within the window. At the end of
the window the students stop: open answers are abandoned (the API's streams are closed, which stops
their rows; the page path's students leave, which cancels theirs, so nothing is kept). Peak memory is
the answering process's high-water mark (VmHWM), model loading included. CPU per answer is the
answering process's CPU time during the window (all its threads: the engine, and the server's event
loop or the page path's students) over the answers completed: it does not depend on what else runs on
the machine, the wall-clock figures do. The inbox check compares,
for the page path, the consented answers the students received with the attempts in the inbox:
each exactly once, and nothing of an abandoned or unconsented attempt.

Setup, cached in `--cache` (default /tmp/classroom-bench): the mid-size random Gemma 3n stand-in
(`benchmarks/baseline_compare.mid_chat_model_dir`: hidden 512, 8 layers, a 65,792-entry vocabulary,
a 2-block audio encoder; `--model tiny` for the tiny one), a workspace with the 60 clips imported and
built, run `bench` trained one step (so a LoRA adapter answers, as on a teacher's computer), and the
practice page set to it with the clips' sentences as exercises. Answers are greedy and run to
`--max-tokens` (a random model does not stop by itself; the feedback template takes 40-120 tokens).

    .venv/bin/python benchmarks/classroom.py [--students 30 8] [--seconds 120] [--max-tokens 96]
        [--batch 8] [--paths api page] [--model mid|tiny|PATH] [--json]

Figures depend on the machine and on what else runs on it: the cores, the load average (before and
after each level) and the torch threads are printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from printout import print_report  # noqa: E402

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
KEY = "classroom-key-0123456789"
RUN = "bench"
GOAL = {"students": 8, "ratio": 2.5, "ttft_p95_s": 2.0}
"""Issue 31: at 8 students, at least 2.5x the answers per minute of one-at-a-time, p95 time to first token under 2 s."""


# -- setup -----------------------------------------------------------------------------------------

def speechocean_dir() -> Path:
    """`$SPEECHOCEAN_DIR`, else `shared/data/speechocean762-mini` beside the checkout or a folder above it."""
    if os.environ.get("SPEECHOCEAN_DIR"):
        return Path(os.environ["SPEECHOCEAN_DIR"])
    for folder in REPO.parents:
        candidate = folder / "shared" / "data" / "speechocean762-mini"
        if (candidate / "resource" / "scores.json").exists():
            return candidate
    raise SystemExit("speechocean762-mini not found: set SPEECHOCEAN_DIR=/path/to/speechocean762-mini")


def real_clips(root: Path) -> list[dict]:
    """The 60 clips: `{"path", "sentence", "seconds"}` in utterance order (Kaldi `wav.scp` and `text`)."""
    import soundfile

    clips = []
    for split in ("train", "test"):
        texts = dict(line.split(maxsplit=1) for line in (root / split / "text").read_text().splitlines() if line.strip())
        for line in (root / split / "wav.scp").read_text().splitlines():
            if line.strip():
                utt, rel = line.split(maxsplit=1)
                path = root / rel.strip()
                clips.append({"path": str(path), "sentence": texts[utt].strip(), "seconds": soundfile.info(str(path)).duration})
    return sorted(clips, key=lambda c: c["path"])


def _pipeline(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, check=True, stdout=subprocess.DEVNULL)


def prepare(cache: Path, model_name: str, clips: list[dict], data: Path) -> tuple[Path, Path]:
    """`(workspace, model folder)`: the clips imported and built, run `bench` trained one step, the practice
    page set to it with the clips' sentences as its exercises (in `clips` order). Built once per model."""
    os.environ.setdefault("MEMORY_BENCH_CACHE", str(cache / "models"))
    from baseline_compare import model_dir

    model = model_dir(model_name)
    ws = cache / f"ws-{model.name}"
    if not (ws / "runs" / RUN / "adapter" / "adapter_config.json").exists():
        shutil.rmtree(ws, ignore_errors=True)
        _pipeline("import", "--workspace", str(ws), "--source", str(data), "--format", "kaldi")
        _pipeline("build", "--workspace", str(ws), "--model", str(model), "--eval-fraction", "0")
        _pipeline("train", "--workspace", str(ws), "--run", RUN, "--model", str(model), "--max-steps", "1", "--device",
                  "cpu", "--quantization", "none", "--eval-steps", "0", "--save-steps", "0")
    from pipeline.inbox.practice import save_setup

    save_setup(ws, RUN, [c["sentence"] for c in clips], "read_aloud", source="classroom benchmark")
    return ws, model


# -- measuring -----------------------------------------------------------------------------------

def peak_rss_bytes(pid: int | str = "self") -> int | None:
    """The process's resident-memory high-water mark (Linux `VmHWM`), bytes; None where not available."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cpu_seconds(pid: int | str = "self") -> float | None:
    """CPU time (user + system) the process has used so far, seconds (Linux `/proc/PID/stat`); None where not available."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_answer(before: float | None, after: float | None, answers: int) -> float | None:
    """Seconds of CPU per answer completed (None when not measured or no answer)."""
    return None if before is None or after is None or not answers else round((after - before) / answers, 2)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between the closest ranks (NumPy's default); None when empty."""
    import numpy as np

    return float(np.percentile(values, q)) if values else None


class Class:
    """N students sharing one clock: each a thread running `ask(student, clip, exercise) -> record` in a loop."""

    def __init__(self, students: int, seconds: float, ramp_s: float, clips: list[dict], seed: int):
        self.students, self.seconds, self.ramp_s, self.clips, self.seed = students, seconds, ramp_s, clips, seed
        self.records: list[dict] = []
        self.lock = threading.Lock()

    def run(self, ask) -> float:
        """Run the class; returns the clock's start (`time.monotonic()`); records land in `self.records`."""
        self.start = time.monotonic()
        self.end = self.start + self.seconds
        threads = [threading.Thread(target=self._student, args=(i, ask), daemon=True) for i in range(self.students)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.start

    def _student(self, number: int, ask) -> None:
        rng = random.Random(self.seed * 1000 + number)
        order = list(range(len(self.clips)))
        rng.shuffle(order)
        time.sleep(rng.uniform(0, self.ramp_s))
        for turn in range(10**6):
            index = order[turn % len(order)]
            time.sleep(self.clips[index]["seconds"])  # recording the clip
            if time.monotonic() >= self.end:
                return
            sent = time.monotonic()
            record = {"student": number, "exercise": index, "sent": sent - self.start, **ask(number, index, self)}
            with self.lock:
                self.records.append(record)


def summary(records: list[dict], seconds: float) -> dict:
    """Answers per minute (completed within the window), time to first token and to the whole answer (p50,
    p95, seconds), answers abandoned at the window's end, refusals."""
    done = [r for r in records if r.get("done") is not None and r["sent"] + r["done"] <= seconds]
    first = [r["first"] for r in done if r.get("first") is not None]
    whole = [r["done"] for r in done]
    return {"answers": len(done), "answers_per_minute": round(len(done) / seconds * 60, 2),
            "ttft_p50_s": percentile(first, 50), "ttft_p95_s": percentile(first, 95),
            "whole_p50_s": percentile(whole, 50), "whole_p95_s": percentile(whole, 95),
            "tokens_per_answer": round(statistics.mean(r["tokens"] for r in done), 1) if done else None,
            "abandoned": sum(1 for r in records if r.get("done") is None and not r.get("refused")),
            "refused": sum(1 for r in records if r.get("refused"))}


def api_level(ws: Path, clips: list[dict], *, students: int, batch: int, args) -> dict:
    """One level through `python -m pipeline serve`: the server in its own process, the students' `openai` clients here."""
    import openai

    from tests.processes import stop_process_group

    log = args.cache / f"serve-{students}-{batch}.log"
    with open(log, "wb") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "serve", "--workspace", str(ws), "--run", RUN, "--port", "0",
             "--api-key", KEY, "--max-batch", str(batch), "--queue-size", str(max(8, students)), "--json"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)
    try:
        line = server.stdout.readline()
        if not line:
            raise SystemExit(f"the server did not start:\n{log.read_text(errors='replace')[-2000:]}")
        url = json.loads(line)["url"]
        audio = {}
        clients: dict[int, openai.OpenAI] = {}

        def ask(student: int, index: int, klass: Class) -> dict:
            import base64

            if index not in audio:
                audio[index] = base64.b64encode(Path(clips[index]["path"]).read_bytes()).decode()
            if student not in clients:  # one client per student, as an app keeps one (its connection pool)
                clients[student] = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)
            client = clients[student]
            messages = [{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": audio[index], "format": "wav"}},
                {"type": "text", "text": clips[index]["sentence"]}]}]
            sent = time.monotonic()
            first = tokens = None
            try:
                stream = client.chat.completions.create(
                    model=RUN, messages=messages, max_tokens=args.max_tokens, stream=True,
                    stream_options={"include_usage": True}, timeout=max(1.0, klass.end - sent + 1.0))
                for chunk in stream:
                    if first is None and chunk.choices and chunk.choices[0].delta.content:
                        first = time.monotonic() - sent
                    if chunk.usage is not None:
                        tokens = chunk.usage.completion_tokens
                    if time.monotonic() > klass.end:
                        stream.close()  # the window is over: leave (the server stops this answer)
                        return {"first": first, "done": None}
                return {"first": first, "done": time.monotonic() - sent, "tokens": tokens}
            except openai.RateLimitError:
                time.sleep(2)
                return {"refused": True, "done": None}
            except (openai.APITimeoutError, openai.APIConnectionError):
                return {"first": first, "done": None}

        ask(-1, 0, type("Warm", (), {"end": time.monotonic() + 600})())  # the first answer pays one-time costs
        klass = Class(students, args.seconds, args.ramp_s, clips, args.seed)
        before = cpu_seconds(server.pid)
        klass.run(ask)
        after = cpu_seconds(server.pid)
        peak = peak_rss_bytes(server.pid)
    finally:
        stop_process_group(server.pid)
        server.wait(timeout=60)
        for client in clients.values():
            client.close()
    figures = summary(klass.records, args.seconds)
    return {**figures, "peak_rss_bytes": peak, "cpu_s_per_answer": cpu_per_answer(before, after, figures["answers"])}


def page_level(ws: Path, clips: list[dict], *, students: int, batch: int, args) -> dict:
    """One level through the practice page's answer path, in a process of its own (`--page-worker`)."""
    from pipeline.inbox.store import Inbox

    for folder in ("attempts", "audio"):
        shutil.rmtree(ws / "inbox" / folder, ignore_errors=True)
    env = {**os.environ, "TUTOR_MAX_BATCH": str(batch)}
    command = [sys.executable, str(Path(__file__).resolve()), "--page-worker", "--workspace", str(ws),
               "--students", str(students), "--seconds", str(args.seconds), "--ramp-s", str(args.ramp_s),
               "--max-tokens", str(args.max_tokens), "--seed", str(args.seed)]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.seconds + 1800)
    if done.returncode != 0:
        raise SystemExit(f"the practice-page worker failed:\n{done.stderr[-3000:]}")
    worker = json.loads(done.stdout.strip().splitlines()[-1])
    records = worker["records"]
    # Every consented answer the students received is in the inbox exactly once; nothing else is.
    received = sorted((f"student-{r['student']:02d}", clips[r["exercise"]]["sentence"], r["text"])
                      for r in records if r.get("done") is not None and r["consent"])
    kept = sorted((a.student, a.exercise, a.answer) for a in Inbox(ws).list())
    figures = summary(records, args.seconds)
    return {**figures, "peak_rss_bytes": worker["peak_rss_bytes"],
            "cpu_s_per_answer": cpu_per_answer(worker["cpu_before"], worker["cpu_after"], figures["answers"]),
            "inbox": {"consented_answers": len(received), "attempts_in_inbox": len(kept), "exactly_once": received == kept}}


def page_worker(args) -> int:
    """`--page-worker`: the students of one level on the practice page's answer path, in this process;
    prints one JSON line (`records`, `peak_rss_bytes`, the process's CPU seconds before and after the window)."""
    from pipeline.inbox.practice import answer_attempt, load_setup
    from pipeline.workspace import Workspace
    from ui.common import as_it_grows

    ws = Workspace(args.workspace)
    setup = load_setup(ws)
    clips = real_clips(speechocean_dir())
    assert setup is not None and setup.items == [c["sentence"] for c in clips], "the practice setup is not the clips' sentences"

    def ask(student: int, index: int, klass: Class) -> dict:
        """As the page's "Get feedback" handler: the answer in a thread of its own, its text as it grows;
        at the window's end the student leaves (closing the updates cancels the answer: nothing kept)."""
        consent = student % 2 == 0
        sent = time.monotonic()
        first = None
        updates = as_it_grows(answer_attempt, ws, clips[index]["path"], index, student=f"student-{student:02d}",
                              consent=consent, max_new_tokens=args.max_tokens)
        for text, result in updates:
            if result is not None:
                return {"first": first, "done": time.monotonic() - sent, "consent": consent, "text": result["text"],
                        "kept": result["attempt"] is not None}
            if first is None and text:
                first = time.monotonic() - sent
            if time.monotonic() > klass.end:
                updates.close()
                break
        return {"first": first, "done": None, "consent": consent}

    warm = answer_attempt(ws, clips[0]["path"], 0, student="warm-up", consent=False, max_new_tokens=4)
    assert warm["attempt"] is None
    klass = Class(args.students, args.seconds, args.ramp_s, clips, args.seed)
    cpu_before = cpu_seconds()
    klass.run(ask)
    cpu_after = cpu_seconds()
    from pipeline.tutor.infer import load_tutor

    tutor = load_tutor(None, run=setup.run, workspace=ws)
    for record in klass.records:
        if record.get("done") is not None:
            record["tokens"] = len(tutor.processor.tokenizer(record["text"], add_special_tokens=False)["input_ids"])
    print(json.dumps({"records": klass.records, "peak_rss_bytes": peak_rss_bytes(), "cpu_before": cpu_before,
                      "cpu_after": cpu_after}))
    return 0


# -- the run ---------------------------------------------------------------------------------------

def gib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**30:.2f} GiB"


def seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


CLASSROOM_COLUMNS = [
    ("path", ">5", lambda level: level["path"]),
    ("students", ">8", lambda level: level["students"]),
    ("batching", ">9", lambda level: f"{level['batching']} ({level['max_batch']})"),
    ("answers/min", ">11", lambda level: f"{level['answers_per_minute']:.1f}"),
    ("TTFT p50", ">9", lambda level: seconds(level["ttft_p50_s"])),
    ("p95", ">6", lambda level: seconds(level["ttft_p95_s"])),
    ("whole p50", ">10", lambda level: seconds(level["whole_p50_s"])),
    ("p95", ">6", lambda level: seconds(level["whole_p95_s"])),
    ("peak RSS", ">10", lambda level: gib(level["peak_rss_bytes"])),
    ("CPU s/ans", ">9", lambda level: seconds(level["cpu_s_per_answer"])),
    ("refused", ">7", lambda level: level["refused"]),
    ("load", ">11", lambda level: f"{level['load_before']:>5.1f}-{level['load_after']:<5.1f}"),
]
"""The table's columns (`printout.print_report`): one row per level (students x path x batching on / off)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, nargs="+", default=[30, 8], help="students per level (default 30 8)")
    parser.add_argument("--seconds", type=float, default=120.0, help="each level's window, seconds (default 120)")
    parser.add_argument("--ramp-s", type=float, default=10.0, help="students start within this many seconds (default 10)")
    parser.add_argument("--max-tokens", type=int, default=96, help="answer length in tokens (default 96)")
    parser.add_argument("--batch", type=int, default=8, help="answers generated together with batching on (default 8)")
    parser.add_argument("--paths", nargs="+", choices=("api", "page"), default=["api", "page"])
    parser.add_argument("--model", default="mid", help="mid (default), tiny, or a model folder")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/classroom-bench"), help="where the setup is kept")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--page-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.page_worker:
        args.students = args.students[0]
        return page_worker(args)

    from pipeline.host.cpu_threads import available_cores, inference_threads

    args.cache.mkdir(parents=True, exist_ok=True)
    data = speechocean_dir()
    clips = real_clips(data)
    ws, model = prepare(args.cache, args.model, clips, data)
    levels = []
    for students in args.students:
        for path in args.paths:
            for mode, batch in (("on", args.batch), ("off", 1)):
                before = os.getloadavg()[0]
                run = api_level if path == "api" else page_level
                figures = run(ws, clips, students=students, batch=batch, args=args)
                levels.append({"students": students, "path": path, "batching": mode, "max_batch": batch,
                               "load_before": round(before, 2), "load_after": round(os.getloadavg()[0], 2), **figures})
                if not args.json:
                    print(f"  done: {path} {students} students batching {mode}: {figures['answers_per_minute']} answers/min",
                          file=sys.stderr, flush=True)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": available_cores(),
              "threads": inference_threads(False), "model": str(model), "max_tokens": args.max_tokens,
              "seconds": args.seconds, "levels": levels}
    print_report(result, as_json=args.json, columns=CLASSROOM_COLUMNS, rows=levels, title=[
        f"classroom, {Path(result['model']).name}, {result['date']}, {result['cores']} cores, {result['threads']} torch "
        f"thread(s) answering, {args.max_tokens}-token answers, {args.seconds:g} s per level"])
    if args.json:
        return 0
    for students in args.students:
        for path in args.paths:
            on, off = (next(x for x in levels if (x["students"], x["path"], x["batching"]) == (students, path, mode))
                       for mode in ("on", "off"))
            ratio = on["answers_per_minute"] / off["answers_per_minute"] if off["answers_per_minute"] else float("inf")
            line = f"{path} {students} students: batching on / off = {ratio:.2f}x answers per minute"
            if students == GOAL["students"]:
                met = ratio >= GOAL["ratio"] and (on["ttft_p95_s"] or 1e9) < GOAL["ttft_p95_s"]
                line += (f"; goal (>= {GOAL['ratio']}x, p95 TTFT < {GOAL['ttft_p95_s']:g} s): "
                         f"{'met' if met else 'NOT met'}")
            print(line)
    for level in levels:
        if "inbox" in level:
            inbox = level["inbox"]
            print(f"inbox, page {level['students']} students batching {level['batching']}: "
                  f"{inbox['consented_answers']} consented answers, {inbox['attempts_in_inbox']} attempts in the inbox, "
                  f"each exactly once: {'yes' if inbox['exactly_once'] else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
