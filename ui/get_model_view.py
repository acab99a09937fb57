"""The Get-the-model panel's text: whether the picked model is on this computer (where, how big), what getting
it takes (its size, the free disk, the licence and the token for a gated model), and the download's progress
bar (bytes of total, speed, time left, the file being fetched) or how it ended ("ready: MODEL (SIZE) in FOLDER").

Pure functions of `pipeline.model.download_job.model_facts` and `download_status` dicts: no gradio, no file
reading, no pipeline call.
"""

from __future__ import annotations

import html

from pipeline.model.download import ready_line
from pipeline.model.hub_failures import TOKENS_PAGE
from pipeline.units import format_bytes, format_seconds
from ui.wording import ENVIRONMENT_FIXES, app_wording


def status_text(facts: dict) -> str:
    """The panel's Markdown for `model_facts(...)`: on this computer, or what getting it takes. It alone says the
    model is not on this computer (the note under the picker does not repeat it). The hub out of reach is no
    warning before a download is asked for: one calm line that getting it needs the internet (offline mode:
    nothing, the note says it); a download that fails says why in the bar."""
    model = facts.get("model") or ""
    local, hub = facts.get("local") or {}, facts.get("hub") or {}
    if local.get("complete"):
        return (f"✓ **On this computer**: `{model}`, {format_bytes(local.get('size_bytes'))}, in "
                f"`{local.get('folder')}`.")
    offline = hub.get("unreachable") == "offline"  # Get the model cannot fetch it: the note says what to do
    lines = [f"**`{model}` is not on this computer yet.** Training needs it here first"
             + ("." if offline else ": click **Get the model**.")]
    if hub.get("unreachable") == "network":  # nothing asked for yet: said calmly, once (a download's failure says more)
        lines.append("Getting it needs an internet connection to Hugging Face.")
    elif hub.get("error") and not hub.get("unreachable"):  # offline mode: the note under the picker says it, once
        lines.append(f"⚠ {app_wording(hub['error'])}")
    cache, free = facts.get("cache_dir"), facts.get("free_bytes")
    total = hub.get("total_bytes")
    here = int(local.get("size_bytes") or 0) + int(local.get("partial_bytes") or 0)
    if total:
        size = f"It is {format_bytes(total)} from Hugging Face"
        if here:
            size += f", of which {format_bytes(here)} is here already (the download continues from there)"
        lines.append(f"{size}; the disk that keeps it (`{cache}`) has {format_bytes(free)} free.")
        needed = int(facts.get("needed_bytes") or 0)
        if free is not None and free < needed:
            lines.append(app_wording(f"⚠ That is not enough room: free {format_bytes(needed - free)} first, or set "
                                     "HF_HOME to a folder on a larger disk and restart the app."))
    elif cache:
        lines.append(f"It goes to `{cache}` ({format_bytes(free)} free there).")
    if needs_token(facts) and (facts.get("download") or {}).get("state") not in ("running", "cancelling"):
        lines.append(f"It is a gated model: first [accept the licence with your Hugging Face account]"
                     f"({facts.get('licence_url')}), then make a *Read* token at [{TOKENS_PAGE}]({TOKENS_PAGE}) and "
                     "paste it below. Hugging Face's own login keeps it on this computer (never in the workspace).")
        if facts.get("token_saved"):
            lines.append("A Hugging Face token is saved on this computer already; paste one only to replace it.")
    return "\n\n".join(lines)


def needs_token(facts: dict) -> bool:
    """True when the panel shows the licence link and the token box: the model is not all here, and the hub
    says it is gated (or, the hub out of reach, its family lists a licence page); never in offline mode."""
    hub = facts.get("hub") or {}
    if not facts.get("hub_id") or (facts.get("local") or {}).get("complete") or hub.get("unreachable") == "offline":
        return False  # here already, or offline mode: no download to give a token to
    return bool(hub.get("gated")) if "gated" in hub else bool(facts.get("family_gated"))


_PHASE_WORDS = {
    "listing": "Asking Hugging Face for the list of files…",
    "checking": "Checking {file} against Hugging Face's checksum (file {number} of {files})…",
    "fetching": "Fetching {file} (file {number} of {files})",
    "placing": "Putting the files in place…",
}


def progress_html(status: dict | None) -> str:
    """The download's bar for `download_status(...)`: while it runs, a `<progress>` with bytes of total, the
    speed, the time left and the file; once ended, "ready: …", the cancel or the error; "" when never started."""
    if not status or status.get("state") == "not_started":
        return ""
    state = status.get("state")
    if state == "completed":
        result = (status.get("result") or {}).get("result") or {}
        return f'<div class="get-model-done">✓ {html.escape(ready_line(result))}</div>' if result else ""
    progress = status.get("progress") or {}
    done, total = int(progress.get("done_bytes") or 0), int(progress.get("total_bytes") or 0)
    if state in ("cancelled", "failed"):
        mark = "■" if state == "cancelled" else "✗"
        reason = status.get("reason") or state
        whys = "".join(f"<details><summary>Why?</summary>{html.escape(why.replace('`', ''))}</details>"
                       for pattern, _words, why in ENVIRONMENT_FIXES if pattern.search(reason))
        return (f'<div class="get-model-ended">{mark} {html.escape(app_wording(reason, markdown=False))}'
                f'{whys}</div>')
    figures = [f"{format_bytes(done)} of {format_bytes(total)}" + (f" ({100 * done / total:.0f} %)" if total else "")]
    rate, eta = progress.get("rate_bytes_per_s"), progress.get("eta_s")
    if rate:
        figures.append(f"{format_bytes(rate)}/s")
    if eta is not None and rate:
        figures.append(f"about {format_seconds(eta)} left")
    phase = progress.get("phase") or "listing"
    doing = _PHASE_WORDS.get(phase, phase).format(file=progress.get("file") or "", number=progress.get("file_number"),
                                                    files=progress.get("files"))
    if state == "cancelling":
        doing = "Cancelling after the chunk in flight; what arrived is kept…"
    return ('<div class="get-model-running">'
            f'<progress value="{done}" max="{max(total, 1)}" style="width:100%"></progress>'
            f'<div class="get-model-figures">{html.escape(" · ".join(figures))}</div>'
            f'<div class="get-model-file">{html.escape(doing)}</div></div>')
