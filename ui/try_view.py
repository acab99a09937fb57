"""The Try tab's text: the headline about the teacher's tutors, and what an export or an import of a run did.

Pure formatting of what the handlers found (the runs with a tutor) and of `pipeline.export.cli.export_run`'s
and `pipeline.export.import_run.import_run`'s result dicts: Markdown strings (the run names, paths and notes
HTML-escaped). No gradio, no file reading, no pipeline call; `ui/try_tab.py` and `ui/try_export.py` lay
them out.
"""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from ui.counts import plural


ANSWERING = "The tutors are answering… (both answers grow as they are generated)"
"""The note under the button while the answers are being generated."""


def headline_markdown(tutors: Sequence[str]) -> str:
    """The tab's first line, about the teacher's tutors (`tutors`: the runs that saved an adapter, newest
    first): how many there are to try and the newest, or where to make one (Markdown)."""
    if not tutors:
        return ("No tuned tutor yet: train one on the **4 · Train** tab (a stopped run has a tutor too), then "
                "speak to it here and compare it with the base model.")
    return (f"**{plural(len(tutors), 'tuned tutor')} to try** (newest: **{tutors[0]}**). Speak as a learner "
            "would; each answer comes from your tutor and, beside it, from the base model it was tuned from.")


def export_markdown(run_name: str, result: Mapping[str, Any], downloadable: bool = False) -> str:
    """What an export of `run_name` made (`export_run`'s result: format, path, bytes, the archive to upload
    for a cloud bundle, notes), with its size in MiB unless `downloadable`: then the Download box under the
    note shows the file (the adapter zip, the bundle's archive, whose size `bytes` is) with its own size, and
    a second figure for it ("0.4 MiB" above "460.6 KB") would be the same size twice (Markdown)."""
    size = "" if downloadable else f" ({result['bytes'] / 1024**2:.1f} MiB)"
    lines = [f"✓ Exported **{html.escape(run_name)}** as {result['format']}: `{result['path']}`{size}."]
    if result.get("archive"):
        lines.append(f"Upload `{result['archive']}`; its README.md has the GPU VM and Vertex AI commands.")
    if result.get("format") == "gguf":
        files = ", ".join(f"`{name}` ({size / 1024**2:.1f} MiB)" for name, size in result.get("files", {}).items()
                          if name.endswith(".gguf") or name == "Modelfile")
        lines.append(f"Copy the folder to the student's computer: {files}. Its README.md has the llama.cpp "
                     f"(`llama-mtmd-cli`, `llama-server`) and Ollama (`ollama create {html.escape(run_name)} -f Modelfile`) commands.")
    lines += [f"- {html.escape(note)}" for note in result.get("notes", [])]
    return "\n\n".join(lines)


def no_gguf_for_gemma3n(run_name: str) -> str:
    """Why a Gemma 3n run has no GGUF, in the Try tab's words: the choices this section offers, where the library's
    message (`pipeline.export.gguf.GEMMA3N_DEAF`) names the CLI's `--format merged`, `--format gguf-text-only`
    (no choice here) and `python -m pipeline serve`, which the app rewrote into the Samples tab's import Layout."""
    return (f"**{html.escape(run_name)}** is a Gemma 3n tutor, and llama.cpp and Ollama cannot hear with Gemma 3n yet: "
            "its GGUF would not hear the learner. Keep trying it here, export it as a **Merged model** (above) to run "
            "it with transformers, or train a tutor on google/gemma-4-E2B-it, whose GGUF hears.")


def import_markdown(result: Mapping[str, Any]) -> str:
    """What an import of a run trained elsewhere brought in (`import_run`'s result: the run's name, status,
    steps and base model) and what was found to differ from this workspace, with the import's notes (Markdown)."""
    lines = [f"✓ Imported **{html.escape(result['run'])}** ({result.get('status')}, {result.get('steps')} steps; base "
             f"model `{result['model']}`). It is in the run lists now."]
    lines += [f"- differs: {html.escape(d)}" for d in result["differences"]]
    lines += [f"- note: {html.escape(n)}" for n in result["notes"]]
    return "\n".join(lines)
