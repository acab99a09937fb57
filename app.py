#!/usr/bin/env python
"""Pronunciation Tutor Studio: the Gradio app (Samples -> Dataset -> Memory -> Train -> Try -> Judge).

    python app.py [--workspace DIR] [--port N] [--host 127.0.0.1] [--share]
                  [--auth USER:PASSWORD | --auth-file FILE] [--shared]
                  [--practice-run RUN --practice-list session|FILE] [--practice-port N]

Serves on 127.0.0.1 only unless `--host`/`--share` say otherwise, and prints the URL. Beyond this
computer (or with `--shared`) a login is required and typed paths stay inside the workspace
(`pipeline.access.accounts`). The students' practice page (`ui/practice_page.py`) is its own page on its own
port (`--practice-port`, default the studio's port + 1): teachers' accounts open both, students'
accounts the practice page only. This file is
the entry point: the arguments, the page (the tabs of `ui/` wired together) and the launch. Every tab
is a pair (`ui/__init__.py`): `ui/X_tab.py`, its widgets and handlers, and `ui/X_view.py`, its text,
tables and figures, for X in samples, dataset, memory, train, try, judge and inbox. Every handler reads
its widgets, calls ONE function of `pipeline/`, and lays the result out with its tab's view; a
`PipelineError` becomes a message in one place (`ui.common.ui_errors`). Widget defaults come from
`pipeline.config.TrainConfig`, like the command line's flags.

This module deliberately imports no torch / transformers / datasets at import time or while
building the page: those load inside the handlers (or in the training process), so the first
page is up in a few seconds.
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()  # launch time is measured from here (before gradio is imported)

import argparse  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

from pipeline.access.logins import SESSION_HOURS  # noqa: E402
from pipeline.inbox.practice import DEFAULT_ATTEMPTS_PER_HOUR  # noqa: E402
from pipeline.workspace import DEFAULT_WORKSPACE  # noqa: E402
from ui.common import CONFIG_FIELDS, REPO_ROOT  # noqa: E402
from ui.dataset_tab import dataset_tab, wire_dataset_tab  # noqa: E402
from ui.get_model import get_model_panel  # noqa: E402
from ui.inbox_tab import inbox_tab  # noqa: E402
from ui.judge_tab import judge_tab  # noqa: E402
from ui.memory_tab import memory_tab, wire_memory_tab  # noqa: E402
from ui.samples_tab import samples_tab  # noqa: E402
from ui.state import model_picker  # noqa: E402
from ui.train_tab import train_tab  # noqa: E402
from ui.try_tab import try_tab  # noqa: E402
from ui.tutor_app import TutorApp  # noqa: E402

ASSETS_DIR = REPO_ROOT / "assets"

__all__ = ["TutorApp", "build_ui", "main", "parse_args"]


def build_ui(app: TutorApp, logins: bool = False) -> gr.Blocks:
    """Build the `gr.Blocks` page for `app`'s workspace (no heavy imports happen here); `logins`: the page has
    accounts (a Log out link in the header).

    Each tab lays out its widgets and wires the events that stay inside it; the events that cross
    tabs (the settings spread over Memory and Train, the run lists shared by Train and Try, and what
    a page (re)load restores) are wired here.
    """
    with gr.Blocks(title="Pronunciation Tutor Studio", analytics_enabled=False) as demo:
        gr.HTML(_header_html(app.ws.root, logins), elem_id="header", padding=False)
        model, model_note = model_picker(app.state)
        get_model = get_model_panel(app.get_model, model, model_note)  # is it here? get it (token, bar, cancel)
        with gr.Tabs(elem_id="tabs"):
            samples = samples_tab(app.samples)
            dataset = dataset_tab(app.dataset)
            memory = memory_tab(app.memory)
            train = train_tab(app.train, model)
            tryout = try_tab(app.tryout, app.export, model)
            judge = judge_tab(app.judge, model)
            inbox = inbox_tab(app.inbox)

        # The settings: one `TrainConfig` from the model picker, the Memory tab and the Train tab.
        settings = {"model": model, **memory.settings, **train.settings}
        setting_widgets = [settings[name] for name in CONFIG_FIELDS]
        for name, widget in settings.items():
            if name != "model":
                widget.elem_id = widget.elem_id or f"set-{name.replace('_', '-')}"

        # Build (it sets the Memory tab's max length to the longest row), and what follows the model picker.
        dataset_outputs = wire_dataset_tab(app.dataset, dataset, model, settings["max_length"])

        # Set once this page shows the saved settings: nothing is remembered or estimated from the defaults before.
        restored = gr.State(False)
        # The Memory tab: machine presets, Estimate, the plan table, Calibrate, the suggestion buttons.
        wire_memory_tab(app.memory, memory, model, setting_widgets, restored)
        # The "Next run" line; settings are remembered only once this page shows the saved ones (`restored`).
        summary_inputs = [restored, *setting_widgets]
        train.tab.select(app.train.page_settings_summary, inputs=summary_inputs, outputs=train.settings_note)
        for widget in setting_widgets:
            widget.change(app.train.page_settings_summary, inputs=summary_inputs, outputs=train.settings_note,
                          show_progress="hidden")

        # The run lists: the Past runs table, the run to resume, and the Try tab's run.
        run_lists = [train.runs_df, train.resume_choice, tryout.run]
        poll_outputs = [*train.poll_outputs, *run_lists, train.headline, train.settings_note, train.train_status]
        train.start_button.click(app.train.start_training, inputs=[train.run_name, *setting_widgets],
                                 outputs=train.started).then(app.train.headline, inputs=model, outputs=train.headline,
                                                             show_progress="hidden")
        poll_inputs = [train.current_run, train.seen_rows, restored, *setting_widgets]
        train.timer.tick(app.train.poll, inputs=poll_inputs, outputs=poll_outputs, show_progress="hidden")
        train.refresh_runs.click(app.train.refresh_run_lists, outputs=run_lists)
        tryout.refresh.click(app.train.refresh_run_lists, outputs=run_lists)
        tryout.imported.success(app.train.refresh_run_lists, outputs=run_lists)  # an imported run joins the lists
        train.deleted.then(app.train.refresh_run_lists, outputs=run_lists)  # a deleted run leaves them

        # A (re)opened page: re-attach to a running job, show the last build, restore the settings.
        demo.load(app.train.on_load, outputs=[train.current_run, train.timer, train.train_status, train.runs_df,
                                              tryout.run, train.resume_choice, train.seen_rows]).then(
            app.train.poll, inputs=poll_inputs, outputs=poll_outputs, show_progress="hidden")
        demo.load(app.dataset.dataset_on_load, outputs=dataset_outputs)
        demo.load(samples.restore, outputs=[samples.progress, samples.item])  # the recording session goes on
        demo.load(app.judge.show_saved, outputs=judge.shown)  # saved evaluations show without re-running
        demo.load(app.judge.on_load, outputs=judge.attach)  # re-attach to a running evaluation job
        # The saved settings first, then a calibration still running (it sets the machine to this computer):
        # in this order, so the machine picker and the Device setting shown are the same machine.
        demo.load(app.state.restore_settings, outputs=setting_widgets).then(lambda: True, outputs=restored).then(
            app.memory.calibration_on_load, outputs=[memory.machine, memory.memory_gb, memory.verdict_out,
                                                     memory.measured_out, memory.calibration_timer]).then(
            app.train.page_settings_summary, inputs=summary_inputs, outputs=train.settings_note,
            show_progress="hidden").then(
            app.judge.refresh_choices, inputs=[model, judge.choices], outputs=judge.choices).then(
            app.dataset.model_note, inputs=model, outputs=dataset.model_note, show_progress="hidden")
        demo.load(app.get_model.on_load, inputs=model, outputs=get_model.outputs)  # a download still going shows
        demo.load(app.inbox.show, outputs=inbox.outputs)  # students' attempts waiting
        demo.load(app.inbox.setup_fields, outputs=inbox.setup_outputs)
    return demo


def _header_html(workspace: Path, logins: bool = False) -> str:
    """Logo, title, the workflow in one line, the workspace folder, and Log out when there are accounts."""
    import html

    logo = ASSETS_DIR / "logo.svg"
    svg = logo.read_text(encoding="utf-8") if logo.exists() else ""
    return (
        f'<div class="app-header"><div class="logo">{svg}</div><div class="app-title">'
        "<h1>Pronunciation Tutor Studio</h1>"
        "<p>Turn recordings into a <b>pronunciation tutor</b>: Google's Gemma model (3n or 4, picked below), taught "
        "with your recordings and feedback, in the "
        "order you work: <b>1 Samples → 2 Dataset → 3 Memory → 4 Train → 5 Try → 6 Judge → 7 Inbox</b>. Everything is saved in the "
        f"workspace folder <code>{html.escape(str(workspace))}</code>, so closing this tab loses nothing.</p>"
        + ('<p><a href="logout" id="studio-logout">Log out</a></p>' if logins else "") + "</div></div>"
    )


def _css() -> str:
    """The page's style sheet (`assets/app.css`; empty when missing)."""
    path = ASSETS_DIR / "app.css"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: --workspace, --host, --port, --share."""
    parser = argparse.ArgumentParser(
        prog="python app.py",
        description="Pronunciation Tutor Studio: record, build, check memory, fine-tune Gemma 3n or Gemma 4, try the tutor.",
    )
    parser.add_argument("--workspace", default=str(DEFAULT_WORKSPACE),
                        help=f"folder holding samples, dataset and runs (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this computer only; 0.0.0.0 exposes it "
                             "to your network)")
    parser.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    parser.add_argument("--share", action="store_true",
                        help="also create a public gradio.live link (off by default: anyone with the link can "
                             "use the app)")
    parser.add_argument("--auth", metavar="USER",
                        help="the teacher's login, the password in $TUTOR_AUTH_PASSWORD (required beyond this "
                             "computer: --host other than 127.0.0.1, or --share); USER:PASSWORD also works, but "
                             "every user of this computer sees it in `ps`")
    parser.add_argument("--auth-file", metavar="FILE",
                        help="accounts, one per person (teachers: the studio and the practice page; students: the "
                             "practice page only); made with `python -m pipeline users --file FILE add NAME`; "
                             "changes count at once")
    parser.add_argument("--session-hours", type=float, default=SESSION_HOURS,
                        help=f"how long a login lasts (default {SESSION_HOURS:g} h)")
    parser.add_argument("--max-upload-mb", type=float, default=200.0,
                        help="largest file the studio takes in one upload, in MB (default 200)")
    parser.add_argument("--practice-max-upload-mb", type=float, default=10.0,
                        help="largest recording a student may upload, in MB (default 10: a 30 s clip is under 6 MB)")
    parser.add_argument("--attempts-per-hour", type=int, default=DEFAULT_ATTEMPTS_PER_HOUR,
                        help=f"practice attempts one student may send per hour (default {DEFAULT_ATTEMPTS_PER_HOUR})")
    parser.add_argument("--shared", action="store_true",
                        help="treat the address as shared even on 127.0.0.1 (e.g. behind a reverse proxy or a "
                             "tunnel): login required, typed paths limited to the workspace")
    parser.add_argument("--practice-run", metavar="RUN", help="the run whose tutor answers on the practice page")
    parser.add_argument("--practice-list", metavar="session|FILE",
                        help="the practice exercises: `session` (the recording session's list) or a .txt/.csv file")
    parser.add_argument("--practice-kind", choices=("read_aloud", "free_speech"),
                        help="what --practice-list FILE holds (default read_aloud)")
    parser.add_argument("--practice-port", type=int, default=None,
                        help="port of the students' practice page (default: the studio's port + 1, else a free one)")
    return parser.parse_args(argv)


MISSING_GRADIO_WORDS = {"common.complete": "Done"}
"""Gradio's own status words its frontend asks for but does not translate (6.x reads `common.complete` after
every finished event, in the screen-reader status line, and shows the raw key when it is missing): ours."""


def _launch_kwargs(args: argparse.Namespace, gate, max_upload_mb: float) -> dict:
    """What both pages' `launch` share: address, share link, upload cap, and the login guard (`ui.login_guard`)."""
    from ui.login_guard import guard_kwargs

    return dict(server_name=args.host, share=args.share, inbrowser=False, prevent_thread_lock=True, quiet=True,
                ssr_mode=False, css=_css(), theme=gr.themes.Soft(), footer_links=["gradio"],
                max_file_size=int(max_upload_mb * 1e6), i18n=gr.I18n(en=dict(MISSING_GRADIO_WORDS)),
                **guard_kwargs(gate))


def main(argv: list[str] | None = None) -> int:
    """Build the page and serve it until Ctrl+C; prints the URL."""
    from pipeline.access.accounts import AccountBook, auth_teacher, check_sharing, needs_login
    from pipeline.errors import ConfigError, PipelineError
    from pipeline.inbox.practice import AttemptRate
    from ui.login_guard import page_gates

    args = parse_args(argv)
    shared = args.shared or needs_login(args.host, args.share)
    try:
        book = AccountBook(args.auth_file, auth_teacher(args.auth))
        check_sharing(args.host, args.share, book.current(), forced=args.shared)
        rate = AttemptRate(args.attempts_per_hour)
        gates = page_gates(book, practice_url=lambda: app.inbox.practice_url, session_hours=args.session_hours)
        for flag, cap in (("--max-upload-mb", args.max_upload_mb), ("--practice-max-upload-mb", args.practice_max_upload_mb)):
            if not cap > 0:
                raise ConfigError(f"`{flag}` must be above 0, got {cap:g}; e.g. 10 MB takes a 30 s recording.")
        if args.auth and ":" in args.auth:
            print("warning: `--auth USER:PASSWORD` shows the password to every user of this computer (`ps`); "
                  "give `--auth USER` with the password in $TUTOR_AUTH_PASSWORD, or use --auth-file.", file=sys.stderr)
        if args.practice_run or args.practice_list:
            from pipeline.inbox.practice import setup_from_list

            if not (args.practice_run and args.practice_list):
                raise ConfigError("Give both --practice-run RUN and --practice-list session|FILE (e.g. "
                                  "`--practice-run run-1 --practice-list session`).")
            setup_from_list(args.workspace, args.practice_run, args.practice_list, args.practice_kind)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    app = TutorApp(args.workspace, shared=shared)
    demo = build_ui(app, logins=bool(book))
    demo.queue(default_concurrency_limit=4)
    try:
        _, local_url, share_url = demo.launch(server_port=args.port, allowed_paths=[str(app.ws.root)],
                                              **_launch_kwargs(args, gates.studio, args.max_upload_mb))
    except OSError as error:
        print(f"error: cannot serve on {args.host}:{args.port} ({error}). Is the app already running? "
              f"Open it at http://{args.host}:{args.port}/ or start another copy with --port {args.port + 1}.",
              file=sys.stderr)
        return 1
    # the studio first (its first page is not delayed), then the students' page; the Inbox tab shows its URL
    from ui.practice_page import serve_practice

    practice, practice_url, practice_share = serve_practice(
        app.ws, args.practice_port or args.port + 1, _launch_kwargs(args, gates.practice, args.practice_max_upload_mb),
        rate=rate, own_files=gates.practice.own_files, logins=bool(book))
    app.inbox.practice_url = practice_share or practice_url
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"Listening on {args.host}: other computers on your network can open this app.", flush=True)
    print(f"Pronunciation Tutor Studio is running at {local_url}  (workspace: {app.ws.root}; "
          f"up {time.perf_counter() - _STARTED:.1f} s after start)", flush=True)
    if share_url:
        print(f"Public link (anyone with it can use the app): {share_url}", flush=True)
    if practice_url:
        print(f"Students' practice page: {practice_share or practice_url}", flush=True)
    if book:
        print("Login required: teachers' accounts open the studio and the practice page, students' the practice "
              "page only.", flush=True)
    print("Press Ctrl+C to stop.", flush=True)
    try:
        demo.block_thread()
    except KeyboardInterrupt:
        pass
    finally:
        demo.close()
        if practice is not None:
            practice.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
