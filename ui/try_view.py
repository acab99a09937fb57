"""The Try tab's text: the headline about the teacher's tutors, and what an export or an import of a run did.

Pure formatting of what the handlers found (the runs with a tutor) and of `pipeline.export.cli.export_run`'s
and `pipeline.export.import_run.import_run`'s result dicts: Markdown strings (the run names, paths and notes
HTML-escaped). No gradio, no file reading, no pipeline call; `ui/try_tab.py` and `ui/try_export.py` lay
them out.
"""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from pipeline.errors import in_words
from pipeline.units import plural, format_bytes
from ui.wording import app_wording


SCORER_CHOICE = "Classical scorer (no fine-tuning)"
"""The Try tab's tutor list's last entry: the classical scorer (`pipeline.scoring`), which needs no run."""
SCORER_BASE_NOTE = "(the classical scorer has no base model: it needs no fine-tuning)"
"""What the base model's box says when the classical scorer answered."""

ANSWERING = "The tutors are answering… (both answers grow as they are generated)"
"""The note under the button while the answers are being generated."""


def headline_markdown(tutors: Sequence[str]) -> str:
    """The tab's first line, about the teacher's tutors (`tutors`: the runs that saved an adapter, newest
    first): how many there are to try and the newest, or where to make one (Markdown)."""
    if not tutors:
        return ("No tuned tutor yet: train one on the **4 · Train** tab (a stopped run has a tutor too), then "
                "speak to it here and compare it with the base model. Until then, pick the **Classical scorer (no "
                "fine-tuning)**, last in the tutor list: it gives scores and words to practise from day one.")
    return (f"**{plural(len(tutors), 'tuned tutor')} to try** (newest: **{tutors[0]}**). Speak as a learner "
            "would; each answer comes from your tutor and, beside it, from the base model it was tuned from.")


def export_markdown(run_name: str, result: Mapping[str, Any], downloadable: bool = False) -> str:
    """What an export of `run_name` made (`export_run`'s result: format, path, bytes, the archive to upload
    for a cloud bundle, notes), with its size (`pipeline.units.format_bytes`: "312 bytes", "4 KiB", "1.20 GiB") unless `downloadable`: then the Download box under the
    note shows the file (the adapter zip, the bundle's archive, whose size `bytes` is) with its own size, and
    a second figure for it ("0.4 MiB" above "460.6 KB") would be the same size twice (Markdown)."""
    size = "" if downloadable else f" ({format_bytes(result['bytes'])})"
    lines = [f"✓ Exported **{html.escape(run_name)}** as {result['format']}: `{result['path']}`{size}."]
    if result.get("archive"):
        lines.append(f"Upload `{result['archive']}`; its README.md has the GPU VM and Vertex AI commands.")
    if result.get("format") in ("gguf", "gguf-text-only"):
        files = ", ".join(f"`{name}` ({format_bytes(size)})" for name, size in result.get("files", {}).items()
                          if name.endswith(".gguf") or name == "Modelfile")
        if not result.get("projector"):
            from pipeline.export.gguf import TEXT_ONLY

            lines.append(f"**{TEXT_ONLY[0].upper() + TEXT_ONLY[1:]}**: it answers typed questions only.")
        lines.append(f"Copy the folder to the student's computer: {files}. Its README.md has the llama.cpp "
                     f"(`llama-mtmd-cli`, `llama-server`) and Ollama (`ollama create {html.escape(run_name)} -f Modelfile`) commands.")
    lines += [f"- {app_wording(html.escape(note))}" for note in result.get("notes", [])]
    return "\n\n".join(lines)


def no_gguf_for_gemma3n(run_name: str) -> str:
    """Why a Gemma 3n run has no GGUF, in the Try tab's words: the choices this section offers, where the library's
    message (`pipeline.export.gguf.GEMMA3N_DEAF`) names the CLI's `--format merged`, `--format gguf-text-only`
    (no choice here) and `python -m pipeline serve`, which the app rewrote into the Samples tab's import Layout."""
    return (f"**{html.escape(run_name)}** is a Gemma 3n tutor, and llama.cpp and Ollama cannot hear with Gemma 3n yet: "
            "a file for them would not hear the learner. Keep trying it here, choose **To run with Python anywhere** (merged model) above to "
            "run it with Python, or train a tutor on google/gemma-4-E2B-it, whose file for Ollama hears.")


def import_markdown(result: Mapping[str, Any]) -> str:
    """What an import of a run trained elsewhere brought in (`import_run`'s result: the run's name, status,
    steps and base model) and what differs from this workspace, in a teacher's words from the result's facts
    (`dataset_matches`, `workspace_fingerprint`, `model_here`, `model_differences`); the result's `differences`
    and `notes` sentences are the command line's, which name the run folder's files (Markdown)."""
    lines = [f"✓ Imported **{html.escape(result['run'])}** ({result.get('status')}, {result.get('steps')} steps; base "
             f"model `{result['model']}`). It is in the run lists now."]
    if result.get("model_differences"):
        lines.append("- ⚠ It was trained on another version of this base model: its answers here may be wrong.")
    if result.get("dataset_matches") is False:
        lines.append("- ⚠ It was trained on other recordings than this workspace's dataset: Judge's test recordings "
                     "may include some it learned from, which would flatter it there.")
    elif result.get("dataset_matches") is None:
        lines.append("- Its recordings could not be compared with this workspace's dataset (" +
                     ("build one on the **2 · Dataset** tab to compare)" if not result.get("workspace_fingerprint")
                      else "the run did not record which recordings it trained on)"))
    if result.get("model_here") is False:
        lines.append(f"- The base model `{html.escape(str(result['model']))}` is not on this computer yet: get it "
                     "(top of the page) before trying the run.")
    return "\n".join(lines)


_NOT_TRAINED = {"failed": "its training failed", "running": "it was still training when it was copied",
                "stopped": "it stopped before it saved what it learned"}
"""Why a run has no tutor yet, by its status (`import_refusal`'s no_adapter)."""


def import_refusal(reason: str, facts: Mapping[str, Any]) -> str:
    """Why a run could not be imported, in a teacher's words, and what to do: `reason` and `facts` of a
    `pipeline.errors.ImportRunError` (the command line's message names the run folder's files; here only the
    path the teacher typed, the run's names, and the app's own widgets). Lists are joined in words (Markdown)."""
    path = f"`{html.escape(str(facts.get('path', '')))}`"
    if reason == "nothing_there":
        return (f"There is nothing at {path}. Type where the run you copied back from the other machine is: its "
                "folder, or its .tar.gz file.")
    if reason == "cannot_unpack":
        return (f"{path} cannot be opened as a .tar.gz file: it may be damaged or only partly copied. Copy it "
                "again from the other machine, or type the run's folder instead.")
    if reason == "not_a_run":
        return (f"{path} does not hold a trained run. Type the run's own folder: the one named after the run, in "
                "the `runs` folder the training made on the other machine (or a .tar.gz of it).")
    if reason == "several_runs":
        runs = [str(run) for run in facts.get("runs", [])]
        return (f"{path} holds {len(runs)} runs ({html.escape(in_words(runs))}). Type the folder of the one to "
                f"import, e.g. `{html.escape(str(facts.get('path', '')).rstrip('/') + '/' + runs[0])}`." if runs else
                f"{path} holds several runs: type the folder of the one to import.")
    if reason == "no_adapter":
        why = _NOT_TRAINED.get(str(facts.get("status")), "it has not saved what it learned yet")
        return (f"The run in {path} has no tutor to try yet: {why}. Let it finish on the other machine (or stop "
                "it there: a stopped run keeps what it learned), then import it again.")
    if reason == "name_taken":
        return (f"A run named **{html.escape(str(facts.get('name')))}** is already here. Type another name in "
                "**Name here (optional)** and press **Import run** again.")
    if reason == "other_base_model":
        return (f"This run was trained on another base model than the `{html.escape(str(facts.get('model')))}` on "
                "this computer, and it works only with the one it learned on. Get that model (top of the page), "
                "then import the run again.")
    raise ValueError(f"unknown import refusal {reason!r}")
