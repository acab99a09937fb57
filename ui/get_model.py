"""Get the model: the panel under the model picker (above every tab) that says whether the picked model is on
this computer and gets it there: the licence link and the token box for a gated model, **Get the model** with
a progress bar, **Cancel**, and "ready: MODEL (SIZE) in FOLDER" at the end.

The download is a background job (`pipeline.model.download_job`): its own process, followed through its
folder by a timer, so closing the tab does not stop it and a reopened page shows it still going; a second
click continues a cancelled or failed one where it stopped. The token is handed to huggingface_hub's own
login (`pipeline.model.download.save_token`) and cleared from the box at once; it never reaches the workspace
or a log. Text and bar: `ui/get_model_view.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
import gradio as gr

from pipeline.errors import ModelLoadError, PipelineError
from ui import get_model_view as view
from ui.common import TabHandlers, model_text, ui_errors
from ui.wording import app_wording

POLL_S = 1.0
"""Seconds between two looks at a running download."""
RUNNING = ("running", "cancelling")


@dataclass
class GetModelPanel:
    """The panel's widgets; `outputs` is what every handler returns, in this order."""

    group: gr.Group
    status: gr.Markdown
    token: gr.Textbox
    get_button: gr.Button
    cancel_button: gr.Button
    progress: gr.HTML
    timer: gr.Timer
    watching: gr.State
    """The model whose download the timer follows ("" when none)."""

    @property
    def outputs(self) -> list:
        return [self.group, self.status, self.token, self.cancel_button, self.progress, self.timer, self.watching,
                self.get_button]


class GetModelHandlers(TabHandlers):
    """The panel's handlers; each asks `pipeline.model.download_job` once and lays the answer out with the view."""

    def _facts(self, model: str | None) -> dict:
        from pipeline.model.download_job import model_facts

        try:
            return model_facts(self.ws, model_text(model))
        except PipelineError as error:  # a folder outside a shared studio's workspace: the note says why
            return {"model": str(model or ""), "hub_id": False, "error": str(error)}

    def _layout(self, facts: dict, *, keep_token: bool = True) -> tuple:
        """The panel for `facts`: (group, status, token box, cancel button, bar, timer, watching, Get the model)."""
        if not facts.get("hub_id"):
            return (gr.Group(visible=False), "", gr.skip(), gr.skip(), "", gr.Timer(active=False), "", gr.skip())
        facts = _in_app_words(facts)
        download = facts.get("download") or {}
        running = download.get("state") in RUNNING
        asks = view.needs_token(facts) and not running
        token = gr.Textbox(visible=asks) if keep_token else gr.Textbox(value="", visible=asks)
        return (gr.Group(visible=True), view.status_text(facts), token, gr.Button(visible=running),
                view.progress_html(download), gr.Timer(active=running), facts["model"] if running else "",
                gr.Button(visible=not (facts.get("local") or {}).get("complete")))

    def show(self, model: str | None) -> tuple:
        """The picked model changed (or the page opened): what the panel says of it."""
        return self._layout(self._facts(model))

    def on_load(self, model: str | None) -> tuple:
        """A (re)opened page: follow the download running in this workspace, whichever model it is, else show the
        picked model."""
        from pipeline.model.download_job import running_download

        return self._layout(self._facts(running_download(self.ws) or model))

    @ui_errors(message_at=1, outputs=8)
    def start(self, model: str | None, token: str | None) -> tuple:
        """**Get the model**: save a pasted token (huggingface_hub's login; the box is cleared), then start the
        download job, or follow the one already running (`start_download`: a gated model without any token is
        refused at once, with the licence link and the token box, before a process starts)."""
        from pipeline.model.download_job import start_download

        model = model_text(model)
        start_download(self.ws, model, token=token)
        return self._layout(self._facts(model), keep_token=False)

    def poll(self, model: str | None, watching: str | None) -> tuple:
        """The timer: the followed download's bar; when it ended, the panel of the picked model (with "ready")."""
        facts = self._facts(watching or model)
        layout = self._layout(facts)
        if (facts.get("download") or {}).get("state") not in RUNNING:
            return layout[:5] + (gr.Timer(active=False), "") + layout[7:]
        return layout

    @ui_errors(message_at=1, outputs=8)
    def cancel(self, model: str | None, watching: str | None) -> tuple:
        """**Cancel**: ask the download to stop after the chunk in flight; what arrived is kept for the next click."""
        from pipeline.model.download_job import cancel_download

        target = watching or model_text(model)
        if not target:
            raise ModelLoadError("No download to cancel.")
        cancel_download(self.ws, target)
        return self._layout(self._facts(target))


def _in_app_words(facts: dict) -> dict:
    """`facts` with the messages `pipeline/` wrote for the command line (the hub's error, why a download ended)
    in the app's words (`ui.wording.app_wording`); the download's reason is plain text (it goes into HTML)."""
    hub, download = facts.get("hub") or {}, facts.get("download") or {}
    if hub.get("error"):
        hub = {**hub, "error": app_wording(hub["error"])}
    if download.get("reason"):
        download = {**download, "reason": app_wording(download["reason"], markdown=False)}
    return {**facts, "hub": hub or facts.get("hub"), "download": download}


def get_model_panel(handlers: GetModelHandlers, model: gr.Dropdown, model_note: gr.Markdown | None = None) -> GetModelPanel:
    """Lay out the panel under the model picker and wire it; the page wires `on_load` (`app.py`)."""
    with gr.Group(visible=False, elem_id="get-model-panel") as group:
        status = gr.Markdown(elem_id="get-model-status")
        with gr.Row(equal_height=True):
            token = gr.Textbox(label="Hugging Face token", type="password", placeholder="hf_…", elem_id="hf-token",
                               visible=False, scale=3,
                               info="A Read token of the account that accepted the licence; kept by Hugging Face's "
                                    "own login on this computer.")
            get_button = gr.Button("Get the model", variant="primary", elem_id="get-model", scale=0, min_width=180)
            cancel_button = gr.Button("Cancel", elem_id="cancel-get-model", visible=False, scale=0, min_width=120)
        progress = gr.HTML(elem_id="get-model-progress")
    timer = gr.Timer(POLL_S, active=False)
    watching = gr.State("")
    panel = GetModelPanel(group, status, token, get_button, cancel_button, progress, timer, watching)
    model.change(handlers.show, inputs=model, outputs=panel.outputs, show_progress="hidden")
    started = get_button.click(handlers.start, inputs=[model, token], outputs=panel.outputs)
    timer.tick(handlers.poll, inputs=[model, watching], outputs=panel.outputs, show_progress="hidden")
    cancel_button.click(handlers.cancel, inputs=[model, watching], outputs=panel.outputs)
    if model_note is not None:  # a model that arrived may say more of itself (e.g. random weights)
        started.then(handlers.state.describe_model, inputs=model, outputs=model_note, show_progress="hidden")
        timer.tick(handlers.state.describe_model, inputs=model, outputs=model_note, show_progress="hidden")
    return panel
