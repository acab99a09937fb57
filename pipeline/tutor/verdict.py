"""A verdict before the statistics: is a tuned run better than its base model, in one line?

A run is compared with the evaluation of its own base model on the same dataset build (same
`dataset_key`) on one figure: how closely the total scores follow the experts' (Pearson's r, PCC,
with its 95 % percentile-bootstrap interval from `pipeline.tutor.metrics`). The rule:

- **better**: the run's interval lies wholly above the base model's (or the base model gave no
  readable total score at all while the run did);
- **worse**: wholly below (or the run gave no readable total score while the base model did);
- **can't tell yet**: the intervals overlap. How many more test recordings would separate them is
  estimated from the way a bootstrap interval narrows, about as 1/sqrt(n) (the standard error of a
  correlation, Fisher 1921; Efron & Tibshirani 1993, ch. 13): with n clips now and half-widths a (run,
  towards the base) and b (base, towards the run), the intervals part once
  d > (a + b) * sqrt(n / n'), d = |r_run - r_base|, i.e. n' > n * ((a + b) / d) ** 2. It is an
  estimate: it assumes the difference stays as it is.

Pure: dicts in (`pipeline.tutor.evaluate` results), a dict out; no model, no files.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from pipeline.tutor.metrics import NO_LIKELY_RANGE

VERDICT_ASPECT = "total"
"""The sentence score the verdict rests on (the experts' overall judgement of a clip)."""


def _key(model: Any) -> str:
    from pipeline.tutor.evaluate import model_slug

    return model_slug(str(model or ""))


SCORER_MODEL = "classical-scorer"
"""A saved evaluation's `model` when it is the classical scorer's (`pipeline.scoring.scorer.SCORER_MODEL_ID`)."""


def scorer_for(run_result: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The classical scorer's evaluation on the same dataset build as `run_result` among `results`, or None."""
    for result in results:
        if result.get("model") == SCORER_MODEL and not result.get("run") and result.get("dataset_key") == run_result.get("dataset_key"):
            return result
    return None


def against_scorer(run_result: Mapping[str, Any], scorer_result: Mapping[str, Any] | None) -> dict[str, Any]:
    """Whether a run beats the classical scorer, the yardstick: the same rule as `verdict` (total-score PCC
    intervals), worded for the scorer. `{"outcome": "better" | "worse" | "cant_tell" | "no_scorer", "line",
    "more_recordings"}`; `line` starts "beats the classical scorer", "worse than the classical scorer" or
    "can't tell yet"."""
    if scorer_result is None:
        return {"outcome": "no_scorer", "more_recordings": None,
                "line": "can't tell yet against the classical scorer: it has no evaluation on these test recordings; "
                        "tick it and press Evaluate (`evaluate --scorer`)"}
    out = dict(verdict(run_result, scorer_result))
    out["line"] = (out["line"].replace("better than the base model", "beats the classical scorer")
                   .replace("worse than the base model", "worse than the classical scorer")
                   .replace("the base model's", "the classical scorer's").replace("the base model", "the classical scorer"))
    if out["outcome"] == "cant_tell":
        out["line"] = out["line"].replace("can't tell yet:", "can't tell yet whether it beats the classical scorer:", 1)
    return out


def base_for(run_result: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The evaluation of `run_result`'s base model on the same dataset build among `results`, or None."""
    for result in results:
        if (not result.get("run") and result.get("dataset_key") == run_result.get("dataset_key")
                and _key(result.get("model")) == _key(run_result.get("model"))):
            return result
    return None


def more_recordings_needed(n: int, estimate_run: float, interval_run: Sequence[float],
                           estimate_base: float, interval_base: Sequence[float]) -> int | None:
    """Estimated further test recordings (clips) after which the two 95 % intervals would no longer overlap.

    Args:
        n: clips the intervals were computed from (> 0).
        estimate_run, interval_run: the run's PCC and its [low, high] interval.
        estimate_base, interval_base: the same for the base model.

    Returns:
        the smallest n' - n with n' > n * ((a + b) / d) ** 2 (at least 1), where d is the gap between the estimates and a, b
        the half-widths that face each other (see the module docstring); None when d == 0 (no
        difference to resolve, so no number of recordings can be estimated).
    """
    gap = estimate_run - estimate_base
    if n <= 0 or gap == 0:
        return None
    if gap > 0:  # the run above: its lower half against the base's upper half
        facing = (estimate_run - interval_run[0]) + (interval_base[1] - estimate_base)
    else:
        facing = (interval_run[1] - estimate_run) + (estimate_base - interval_base[0])
    needed = math.floor(n * (facing / abs(gap)) ** 2) + 1  # strictly more: touching intervals still overlap
    return max(1, needed - n)


def _figure(result: Mapping[str, Any]) -> str:
    score = result["scores"][VERDICT_ASPECT]
    if score.get("pcc") is None:
        if result.get("clips") and result.get("unparsed") == result.get("clips"):
            return f"– (none of its {result['clips']} answers to read-aloud recordings could be read)"  # no number for missing data
        return (f"no readable total score ({result.get('unparsed', '?')} of its {result.get('clips', '?')} answers to "
                "read-aloud recordings could not be read)")
    interval = score.get("pcc_ci")
    return f"{score['pcc']:.2f}" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else f" ({NO_LIKELY_RANGE})")


def verdict(run_result: Mapping[str, Any], base_result: Mapping[str, Any] | None) -> dict[str, Any]:
    """Whether a tuned run agrees with the experts better than its base model, in one line.

    Args:
        run_result: an evaluation of a run (`evaluate_tutor`'s dict: `scores.total.pcc`, `pcc_ci`, `clips`).
        base_result: the evaluation of its base model on the same dataset build, or None.

    Returns:
        `{"outcome": "better" | "worse" | "cant_tell" | "no_base", "line": str, "more_recordings": int |
        None}`. `line` names the figure the verdict rests on (the total-score PCC of both, with their
        intervals); `more_recordings` is the estimate of `more_recordings_needed` when they overlap.
    """
    from pipeline.tutor.evaluate import model_name

    if base_result is None:
        return {"outcome": "no_base", "more_recordings": None,
                "line": f"can't tell yet: the base model ({model_name(run_result.get('model'))}) has no "
                        "evaluation on these test recordings to compare with; tick it and press Evaluate"}
    run_score, base_score = run_result["scores"][VERDICT_ASPECT], base_result["scores"][VERDICT_ASPECT]
    rests = (f"(how well the total score agrees with the experts' (PCC) [likely range]: {_figure(run_result)} "
             f"against the base model's {_figure(base_result)})")
    run_pcc, base_pcc = run_score.get("pcc"), base_score.get("pcc")
    if run_pcc is not None and base_pcc is None:
        return {"outcome": "better", "more_recordings": None, "line": f"better than the base model {rests}"}
    if run_pcc is None and base_pcc is not None:
        return {"outcome": "worse", "more_recordings": None, "line": f"worse than the base model {rests}"}
    if run_pcc is None:
        return {"outcome": "cant_tell", "more_recordings": None,
                "line": f"can't tell yet: neither gave readable total scores to compare {rests}"}
    run_ci, base_ci = run_score.get("pcc_ci"), base_score.get("pcc_ci")
    if not run_ci or not base_ci:
        return {"outcome": "cant_tell", "more_recordings": None,
                "line": f"can't tell yet: too few test recordings for a likely range; more would help {rests}"}
    if run_ci[0] > base_ci[1]:
        return {"outcome": "better", "more_recordings": None, "line": f"better than the base model {rests}"}
    if run_ci[1] < base_ci[0]:
        return {"outcome": "worse", "more_recordings": None, "line": f"worse than the base model {rests}"}
    n = int(min(run_score.get("n") or 0, base_score.get("n") or 0))
    more = more_recordings_needed(n, run_pcc, run_ci, base_pcc, base_ci)
    coverage = min(run_score.get("coverage") or 1.0, base_score.get("coverage") or 1.0)
    if more is not None and 0 < coverage < 1:  # only a share of the recordings gives a readable score
        more = math.ceil(more / coverage)
    if more is None:
        advice = "both agree with the experts equally so far, so more recordings may not separate them"
    else:
        advice = (f"about {more} more test recording{'s' if more != 1 else ''} would help (an estimate, if the "
                  "difference stays as it is; Why? a likely range narrows about as 1/√n)")
    return {"outcome": "cant_tell", "more_recordings": more,
            "line": f"can't tell yet: their likely ranges overlap; {advice} {rests}"}


def verdicts(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`verdict` of every run among `results` against its base model's evaluation there, each with `run`, and
    `scorer`: `against_scorer` (the run against the classical scorer on the same build)."""
    return [dict(verdict(result, base_for(result, results)), run=result["run"],
                 scorer=against_scorer(result, scorer_for(result, results)))
            for result in results if result.get("run")]
