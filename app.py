#!/usr/bin/env python
"""Pronunciation Tutor Studio: the Gradio app (Samples -> Dataset -> Memory -> Train -> Try -> Judge).

    python app.py [--workspace DIR] [--port N] [--host 127.0.0.1] [--share]

Serves on 127.0.0.1 only unless `--host`/`--share` say otherwise, and prints the URL. This file is
the entry point: the arguments, the page (the tabs of `ui/` wired together) and the launch. Each
tab's widgets and handlers live in its own module (`ui/samples_tab.py`, `ui/dataset_tab.py`,
`ui/memory_tab.py`, `ui/train_tab.py`, `ui/try_tab.py`, `ui/judge_tab.py`); every handler reads its
widgets, calls ONE function of `pipeline/`, and formats the result with `ui.formatting`; a
`PipelineError` becomes a `gr.Error` in one place (`ui.common.ui_errors`). Widget defaults come
from `pipeline.config.TrainConfig`, like the command line's flags.

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

from pipeline.workspace import DEFAULT_WORKSPACE  # noqa: E402
from ui.common import CONFIG_FIELDS, REPO_ROOT  # noqa: E402
from ui.dataset_tab import dataset_tab  # noqa: E402
from ui.judge_tab import judge_tab  # noqa: E402
from ui.memory_tab import memory_tab  # noqa: E402
from ui.samples_tab import samples_tab  # noqa: E402
from ui.state import model_picker  # noqa: E402
from ui.train_tab import train_tab  # noqa: E402
from ui.try_tab import try_tab  # noqa: E402
from ui.tutor_app import TutorApp  # noqa: E402

ASSETS_DIR = REPO_ROOT / "assets"

__all__ = ["TutorApp", "build_ui", "main", "parse_args"]


def build_ui(app: TutorApp) -> gr.Blocks:
    """Build the `gr.Blocks` page for `app`'s workspace (no heavy imports happen here).

    Each tab lays out its widgets and wires the events that stay inside it; the events that cross
    tabs (the settings spread over Memory and Train, the run lists shared by Train and Try, and what
    a page (re)load restores) are wired here.
    """
    with gr.Blocks(title="Pronunciation Tutor Studio", analytics_enabled=False) as demo:
        gr.HTML(_header_html(app.ws.root), elem_id="header", padding=False)
        model, _model_note = model_picker(app.state)
        with gr.Tabs(elem_id="tabs"):
            samples = samples_tab(app.samples)
            dataset = dataset_tab()
            memory = memory_tab(app.memory)
            train = train_tab(app.train)
            tryout = try_tab(app.tryout, app.export)
            judge = judge_tab(app.judge, model)

        # The settings: one `TrainConfig` from the model picker, the Memory tab and the Train tab.
        settings = {"model": model, **memory.settings, **train.settings}
        setting_widgets = [settings[name] for name in CONFIG_FIELDS]
        for name, widget in settings.items():
            if name != "model":
                widget.elem_id = widget.elem_id or f"set-{name.replace('_', '-')}"

        # A build sets the Memory tab's max length to the longest row.
        dataset_outputs = [*dataset.outputs, settings["max_length"]]
        dataset.build_button.click(
            app.dataset.build_dataset, inputs=[model, dataset.eval_fraction, dataset.seed, dataset.build_max_length],
            outputs=dataset_outputs)

        estimate_inputs = [memory.memory_gb, *setting_widgets]
        memory.estimate_button.click(app.memory.estimate, inputs=estimate_inputs, outputs=memory.estimate_outputs)
        for event in (memory.estimate_button.click, memory.detect_button.click, memory.tab.select):
            event(app.memory.plan, inputs=estimate_inputs, outputs=memory.plan_out)
        for index, button in enumerate(memory.suggestion_buttons):
            button.click(functools.partial(app.memory.apply_suggestion, index), inputs=memory.suggestions_state,
                         outputs=setting_widgets).then(
                app.memory.estimate, inputs=estimate_inputs, outputs=memory.estimate_outputs)
        # The "Next run" line; settings are remembered only once this page shows the saved ones (`restored`).
        restored = gr.State(False)
        summary_inputs = [restored, *setting_widgets]
        train.tab.select(app.train.page_settings_summary, inputs=summary_inputs, outputs=train.settings_note)
        for widget in setting_widgets:
            widget.change(app.train.page_settings_summary, inputs=summary_inputs, outputs=train.settings_note,
                          show_progress="hidden")
        memory.measure_button.click(app.memory.measure, inputs=estimate_inputs,
                                    outputs=[memory.measured_out, memory.memory_plot])

        # The run lists: the Past runs table, the run to resume, and the Try tab's run.
        run_lists = [train.runs_df, train.resume_choice, tryout.run]
        poll_outputs = [*train.poll_outputs, *run_lists]
        train.start_button.click(app.train.start_training, inputs=[train.run_name, *setting_widgets],
                                 outputs=train.started)
        poll_inputs = [train.current_run, train.seen_rows]
        train.timer.tick(app.train.poll, inputs=poll_inputs, outputs=poll_outputs, show_progress="hidden")
        train.refresh_runs.click(app.train.refresh_run_lists, outputs=run_lists)
        tryout.refresh.click(app.train.refresh_run_lists, outputs=run_lists)
        tryout.imported.success(app.train.refresh_run_lists, outputs=run_lists)  # an imported run joins the lists

        # A (re)opened page: re-attach to a running job, show the last build, restore the settings.
        demo.load(app.train.on_load, outputs=[train.current_run, train.timer, train.train_status, train.runs_df,
                                              tryout.run, train.resume_choice, train.seen_rows]).then(
            app.train.poll, inputs=poll_inputs, outputs=poll_outputs, show_progress="hidden")
        demo.load(app.dataset.dataset_on_load, outputs=dataset_outputs)
        demo.load(samples.restore, outputs=[samples.progress, samples.item])  # the recording session goes on
        demo.load(app.judge.show_saved, outputs=judge.shown)  # saved evaluations show without re-running
        demo.load(app.judge.on_load, outputs=judge.attach)  # re-attach to a running evaluation job
        demo.load(app.state.restore_settings, outputs=setting_widgets).then(lambda: True, outputs=restored).then(
            app.train.page_settings_summary, inputs=summary_inputs, outputs=train.settings_note,
            show_progress="hidden").then(
            app.judge.refresh_choices, inputs=[model, judge.choices], outputs=judge.choices)
    return demo


def _header_html(workspace: Path) -> str:
    """Logo, title, the workflow in one line, and the workspace folder."""
    import html

    logo = ASSETS_DIR / "logo.svg"
    svg = logo.read_text(encoding="utf-8") if logo.exists() else ""
    return (
        f'<div class="app-header"><div class="logo">{svg}</div><div class="app-title">'
        "<h1>Pronunciation Tutor Studio</h1>"
        "<p>Turn recordings into a <b>fine-tuned pronunciation tutor</b> (LoRA on Google's Gemma 3n), in the "
        "order you work: <b>1 Samples → 2 Dataset → 3 Memory → 4 Train → 5 Try → 6 Judge</b>. Everything is saved in the "
        f"workspace folder <code>{html.escape(str(workspace))}</code>, so closing this tab loses nothing.</p>"
        "</div></div>"
    )


def _css() -> str:
    """The page's style sheet (`assets/app.css`; empty when missing)."""
    path = ASSETS_DIR / "app.css"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: --workspace, --host, --port, --share."""
    parser = argparse.ArgumentParser(
        prog="python app.py",
        description="Pronunciation Tutor Studio: record, build, check memory, fine-tune Gemma 3n, try the tutor.",
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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Build the page and serve it until Ctrl+C; prints the URL."""
    args = parse_args(argv)
    app = TutorApp(args.workspace)
    demo = build_ui(app)
    demo.queue(default_concurrency_limit=4)
    try:
        _, local_url, share_url = demo.launch(
            server_name=args.host, server_port=args.port, share=args.share, inbrowser=False,
            prevent_thread_lock=True, quiet=True, ssr_mode=False, css=_css(), theme=gr.themes.Soft(),
            allowed_paths=[str(app.ws.root)], footer_links=["gradio"],
        )
    except OSError as error:
        print(f"error: cannot serve on {args.host}:{args.port} ({error}). Is the app already running? "
              f"Open it at http://{args.host}:{args.port}/ or start another copy with --port {args.port + 1}.",
              file=sys.stderr)
        return 1
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"Listening on {args.host}: other computers on your network can open this app.", flush=True)
    print(f"Pronunciation Tutor Studio is running at {local_url}  (workspace: {app.ws.root}; "
          f"up {time.perf_counter() - _STARTED:.1f} s after start)", flush=True)
    if share_url:
        print(f"Public link (anyone with it can use the app): {share_url}", flush=True)
    print("Press Ctrl+C to stop.", flush=True)
    try:
        demo.block_thread()
    except KeyboardInterrupt:
        pass
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
