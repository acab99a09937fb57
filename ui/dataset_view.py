"""The Dataset tab's text, tables and figure: the build's summary, what changed in the library and who
moved between the splits since the last build, the token-length histogram, speakers per split, the rows
left out.

Pure formatting of a build report (`pipeline.data.dataset.load_build_report`, the dict `build_dataset`
saves) and of `pipeline.data.dataset.library_changes`: Markdown strings, `pandas.DataFrame`s and a
`matplotlib.figure.Figure` (object-oriented, no `pyplot`). No gradio, no file reading, no pipeline call;
`ui/dataset_tab.py` reads the report and applies the app's words (`ui.wording`) to its notes first.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from pipeline.units import plural
from ui.counts import some_ids
from ui.fields import get_field
from ui.figures import PALETTE

def summary_markdown(report: Mapping[str, Any], notes: Sequence[str] = (), clip_tokens: str = "?") -> str:
    """A build in lines of Markdown, a teacher's words first: rows per split and rows left out, the longest
    row against the limit (tokens: what one clip costs, `clip_tokens`, as the model's family says it,
    `ModelFamily.clip_tokens_text`, read by the tab), rows per sample kind, `notes` (the report's notes in the
    app's words) and who moved between the splits (`moves_lines`); then, behind "Advanced", how the rows were
    split (method and seed), the length statistics (min, median, p90) and where the dataset was saved."""
    splits = report.get("splits", {})
    stats = report.get("length_stats", {}) or {}
    excluded = len(report.get("excluded", []))
    lines = [
        f"**Split:** {splits.get('train', 0)} to train on, {splits.get('eval', 0)} to test the tutor with"
        + (f"; {excluded} left out (listed below, with the reason)" if excluded else "; none left out")
        + share_note(report),
    ]
    advanced = [f"Split by {report.get('split_method', '?')} with **Split seed** {report.get('seed')} "
                "(the same seed and recordings give the same split): " + ", ".join(
                    f"{name} {rows}" for name, rows in splits.items()) + " rows."]
    train_lengths = stats.get("row_tokens") or []
    if stats.get("count"):
        lines.append(
            f"**Length:** the longest recording takes **{stats['max']}** tokens (Longest row to keep: "
            f"{report.get('max_length')}); half take at most {stats['median']:g}. "
            f"*A token is a piece of a word, and each clip takes {clip_tokens}.*"
        )
        longest_train = f"; longest train row {max(train_lengths)}" if train_lengths else ""
        advanced.append(f"Tokens per row (train and eval): min {stats['min']}, median {stats['median']:g}, p90 "
                        f"{stats['p90']} (9 rows in 10 are at most this long), longest {stats['max']}{longest_train}.")
    for kind, k in (report.get("kinds") or {}).items():  # per sample kind (read aloud, free speech, dialogue)
        t = k.get("tokens") or {}
        # every recording of the kind, kept (`rows`) and left out, as the Samples tab counts them
        left_out = f", {k['excluded']} left out" if k["excluded"] else ""
        lines.append(f"**{kind.replace('_', ' ')}:** {plural(k['rows'] + k['excluded'], 'recording')} ({k['train']} to train "
                     f"on, {k['eval']} to test with{left_out})" + (f", {t['min']}–{t['max']} tokens" if t else ""))
    if report.get("drafts"):  # the Classical scorer's drafts, left out until a teacher accepts them
        lines.append(f"**Drafts:** {plural(report['drafts'], 'recording')} with draft feedback waiting for you to accept "
                     "it (**Draft feedback** below); left out until accepted.")
    lines += [f"- {note}" for note in notes]
    lines += moves_lines(report.get("split_changes"))
    advanced.append(f"Saved to `{report.get('path')}` (model `{report.get('model')}`).")
    lines.append("<details><summary>Advanced</summary>\n\n" + "\n\n".join(advanced) + "\n\n</details>")
    return "\n\n".join(lines)


SHARE_SLACK = 0.05
"""How far (as a share of the kept rows) the test set may be from the **Held-out share** asked for before
the summary says why: 5 percentage points, under which the difference is rounding."""


def share_note(report: Mapping[str, Any]) -> str:
    """Why the test set's share of the kept rows differs from the **Held-out share** asked for (the report's
    `eval_fraction`), when it does by more than `SHARE_SLACK` and the split was by learner: whole learners go
    to the test set, so the share is as near as they allow (`pipeline.data.dataset.split_ids`). A sentence
    starting with ". " to end the Split line, or "" (the share is near, or the split was not by learner)."""
    splits = report.get("splits") or {}
    train, held_out = int(splits.get("train") or 0), int(splits.get("eval") or 0)
    asked = float(report.get("eval_fraction") or 0)
    if report.get("split_method") != "speaker" or not train + held_out or abs(held_out / (train + held_out) - asked) <= SHARE_SLACK:
        return ""
    speakers = report.get("speakers") or {}
    kept_apart, learners = len(speakers.get("eval") or []), len(set().union(*(set(v) for v in speakers.values())))
    return (f". That is {100 * held_out / (train + held_out):.0f} % of the recordings set apart for testing, not the **Held-out "
            f"share** "
            f"of {asked:g} ({100 * asked:.0f} %): whole learners go to the test set so that no learner is in both, and here "
            f"{plural(kept_apart, 'learner')} of {learners} {'is' if kept_apart == 1 else 'are'} the nearest to it.")


def library_changes_markdown(changes: Mapping[str, Any] | None) -> str:
    """Beside Build: how the sample library changed since the last build (`pipeline.data.dataset.library_changes`:
    added, edited, deleted sample ids, whether edits are known), that it did not, or "" when nothing is built
    yet (None: the tab's headline says so) or the build was the first and nothing changed since (Markdown)."""
    if changes is None:
        return ""  # the tab's headline says "No dataset yet" (`ui.common.dataset_sentence`): said once
    if not changes["changed"]:  # after a first build there is no "last build" to speak of: nothing to say
        return "" if changes.get("first_build") else "The library has not changed since the last build."
    parts = [f"{plural(len(changes[key]), 'sample')} {word} ({some_ids(changes[key], 6)})"
             for key, word in (("added", "added"), ("edited", "edited"), ("deleted", "deleted")) if changes[key]]
    unknown = "" if changes["edits_known"] else " (edits are not known for a build this old)"
    return f"**Since the last build:** {'; '.join(parts)}{unknown}. Build again to train on the library as it is now."


def moves_lines(moves: dict | None) -> list[str]:
    """The build's split changes (`pipeline.data.dataset.split_changes`) in a teacher's words: who moved
    between the training and test sets since the previous build, and why; [] when nobody moved."""
    if not moves or not moves.get("moved"):
        return []
    moved = []
    for key, rows_key, where in (("to_eval", "rows_to_eval", "into the test set"),
                                 ("to_train", "rows_to_train", "into training")):
        who = [f"learner {name}" for name in moves.get(key) or []]
        if moves.get(rows_key):
            who.append(f"{plural(len(moves[rows_key]), 'sample')} with no learner ({some_ids(moves[rows_key], 6)})")
        if who:
            moved.append(f"{', '.join(who)} moved {where}")
    why = "; ".join(moves.get("reasons") or []) or "the split was drawn again"
    return [f"**Moved since the last build:** {'; '.join(moved)}. Why: {why}. Whole learners go to the test "
            "set, drawn by the split seed until they hold about the held-out share, so a change in the learners "
            "or rows can redraw it; a run trained on the old split cannot be resumed on this one without ticking "
            "**Resume even though the dataset was rebuilt** (Train tab)."]


def length_histogram_bins(histogram: Sequence[Mapping[str, int]], max_length: int | None = None,
                          longest: int | None = None, train_lengths: Sequence[int] | None = None,
                          clip_tokens: str = "?"):
    """Bar chart of a `LengthStats.histogram` (`[{lo, hi, count}]`, tokens per row, train and eval rows
    together) with the limit line; its axis says what a clip costs (`clip_tokens`, as in `summary_markdown`).

    With `train_lengths` (the train split's row lengths, `LengthStats.row_tokens`) each bar is split
    into its train rows and its eval rows (stacked, with a legend); without them the bars are every
    row, and the title says so. Returns a `matplotlib.figure.Figure`.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7, 3.2), layout="constrained")
    ax = fig.add_subplot()
    bins = [b for b in histogram if b.get("hi") is not None]
    if not bins:
        ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    lefts = [b["lo"] for b in bins]
    widths = [b["hi"] - b["lo"] for b in bins]
    totals = [b["count"] for b in bins]
    if train_lengths:
        last = len(bins) - 1
        train = [sum(1 for n in train_lengths if b["lo"] <= n < b["hi"] or (i == last and n == b["hi"]))
                 for i, b in enumerate(bins)]
        evals = [max(0, total - count) for total, count in zip(totals, train)]
        ax.bar(lefts, train, width=widths, align="edge", color=PALETTE[0], edgecolor="white", label="train rows")
        ax.bar(lefts, evals, width=widths, bottom=train, align="edge", color=PALETTE[3], edgecolor="white",
               label="eval rows")
        title = "Token length of each row (train and eval)"
    else:
        ax.bar(lefts, totals, width=widths, align="edge", color=PALETTE[0], edgecolor="white", label="rows")
        title = "Token length of every row (train and eval together)"
    if longest:
        ax.axvline(longest, color=PALETTE[1], linewidth=1.5, label=f"longest row {longest}")
    top = max(b["hi"] for b in bins)
    if max_length and max_length <= 1.3 * top:
        ax.axvline(max_length, color="#e15759", linestyle="--", linewidth=1.5, label=f"limit {max_length}")
    elif max_length:
        title += f" (limit {max_length}, off the chart)"
    ax.set_xlabel(f"tokens per row (text + {clip_tokens} per clip)")
    ax.set_ylabel("rows")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    return fig


SPLIT_WORDS = {"train": "train", "eval": "test"}
"""A split as the screens name it: the held-out rows are the "test recordings" everywhere a teacher reads."""


def speakers_frame(speakers: Mapping[str, Any]):
    """Table: split -> number of speakers and their ids (`speakers`: split -> list of ids or a count); a split in
    the words the other screens use (`SPLIT_WORDS`: "eval" is "test")."""
    import pandas as pd

    rows = []
    for split, value in speakers.items():
        split = SPLIT_WORDS.get(split, split)
        if isinstance(value, (list, tuple, set)):
            ids = sorted(str(v) for v in value)
            rows.append({"split": split, "speakers": len(ids), "ids": ", ".join(ids)})
        else:
            rows.append({"split": split, "speakers": value, "ids": ""})
    return pd.DataFrame(rows, columns=["split", "speakers", "ids"])


def excluded_frame(excluded: Iterable[Any]):
    """Table of rows left out of the dataset: sample id and the reason."""
    import pandas as pd

    rows = [{"sample": get_field(item, "id"), "reason": get_field(item, "reason")} for item in excluded]
    return pd.DataFrame(rows, columns=["sample", "reason"])
