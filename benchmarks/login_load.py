"""Benchmark: does a burst of wrong logins stall a page? Gradio's own login with our scrypt check as its
`auth=` callable (what the app did before issue 31: the check ran on the server's event loop, unthrottled)
against the page behind `ui.login_guard` (the check in a worker thread, failures throttled), side by side
in one run.

Each page is a small `gr.Blocks` served by Gradio in this process on a free loopback port, with one
teacher account (scrypt n=2**14, as `pipeline.access.accounts` stores it). For each page, `--logins`
wrong logins (each with another name, so only the per-address throttle can hold them back) are sent at
once from `--logins` threads while one more thread asks the page for a cheap answer (`GET /login_check`,
401) every 20 ms; printed are that probe's worst and p95 latency during the burst, the burst's wall time,
how many password hashes ran, and how many logins were refused without one (429).

    .venv/bin/python benchmarks/login_load.py [--logins 40]

Figures depend on the machine and on what else runs on it: the cores and the load average are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _serve(mode: str, users: Path) -> tuple[object, str, dict]:
    """A page served in `mode` (`before`: Gradio's login, the check on the event loop; `after`: the guard);
    returns (page, base URL, counters)."""
    import gradio as gr

    from pipeline.access.accounts import PRACTICE, AccountBook, role_opens
    from tests.browser import free_port
    from ui.login_guard import guard_kwargs, page_gates

    book = AccountBook(users)
    counters = {"hashes": 0}
    real_role = book.role

    def counted(name: str, password: str):
        counters["hashes"] += 1
        return real_role(name, password)

    book.role = counted
    with gr.Blocks() as page:
        gr.Textbox()
    if mode == "before":
        kwargs = {"auth": lambda name, password: role_opens(counted(name, password), PRACTICE)}  # sync: on the loop
    else:
        kwargs = guard_kwargs(page_gates(book, practice_url=lambda: None, session_hours=1).practice)
    port = free_port()
    page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                **kwargs)
    return page, f"http://127.0.0.1:{port}", counters


def _burst(base: str, logins: int) -> dict:
    """Send `logins` wrong logins at once while probing the page every 20 ms; returns the figures."""
    import httpx

    probes: list[float] = []
    statuses: list[int] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=60) as client:
            while not done.is_set():
                began = time.perf_counter()
                client.get(base + "/gradio_api/login_check")
                probes.append(time.perf_counter() - began)
                time.sleep(0.02)

    def login(n: int) -> None:
        with httpx.Client(timeout=120) as client:
            statuses.append(client.post(base + "/login", data={"username": f"guess-{n}", "password": "wrong-pass"}).status_code)

    watcher = threading.Thread(target=probe)
    watcher.start()
    time.sleep(0.3)
    began = time.perf_counter()
    threads = [threading.Thread(target=login, args=(n,)) for n in range(logins)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    done.set()
    watcher.join()
    during = sorted(probes)
    return {"wall_s": wall, "probe_max_s": during[-1], "probe_p95_s": during[int(0.95 * (len(during) - 1))],
            "probe_p50_s": statistics.median(during), "refused_429": statuses.count(429)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logins", type=int, default=40, help="wrong logins sent at once (default 40)")
    args = parser.parse_args()
    from pipeline.access.accounts import Accounts

    users = Path(tempfile.mkdtemp(prefix="login-load-")) / "users.json"
    accounts = Accounts()
    accounts.add("ms-lee", "teacher-pass", role="teacher")
    accounts.save(users)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {args.logins} wrong logins at once")
    print(f"{'login check':<34}{'burst s':>9}{'probe p50 s':>13}{'p95 s':>8}{'max s':>8}{'hashes':>8}{'429':>6}")
    for mode, label in (("before", "on the event loop, unthrottled"), ("after", "worker thread + throttle (guard)")):
        page, base, counters = _serve(mode, users)
        try:
            figures = _burst(base, args.logins)
        finally:
            page.close()
        print(f"{label:<34}{figures['wall_s']:>9.2f}{figures['probe_p50_s']:>13.3f}{figures['probe_p95_s']:>8.3f}"
              f"{figures['probe_max_s']:>8.3f}{counters['hashes']:>8}{figures['refused_429']:>6}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
