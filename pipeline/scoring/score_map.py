"""The map from alignment features to scores: ridge regressions, fitted, checked across speakers, saved.

One linear map per target: sentence `accuracy`, `fluency`, `prosody`, `total` (0-10), word `accuracy`
(0-10) and phone accuracy (0-2), each on its few features (`pipeline.scoring.features`). Fitting
(numpy least squares, no scikit-learn needed):

- features are standardised on the fitting clips; ridge regression (Hoerl & Kennard 1970) with an
  unpenalised intercept; the penalty is picked from `ALPHAS` by cross-validation over speakers
  (leave one speaker out, or `CV_FOLDS` folds of clips with fewer than 3 speakers), the least mean
  absolute error winning;
- monotone-sane: a feature whose fitted weight has the wrong sign (`*_SIGNS`: e.g. a better GOP
  lowering the score) is dropped and the map refitted, so a reader who sounds better never scores
  lower on that feature; the map reports which it dropped;
- weak readings (`pipeline.scoring.augment`: a clip scored against its sentence with words replaced) are
  fitted on beside the real clips, weighing as much as the real clips together (`_balanced`);
- predictions are clipped to the scale (0-10, 0-2).

`ScoreMap` is JSON (`to_dict` / `from_dict`): `note` says what it was fitted on, and is shown wherever
the map's scores are.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from pipeline.conversation.feedback import SENTENCE_KEYS
from pipeline.scoring.augment import is_weak
from pipeline.scoring.features import (ASPECT_FEATURES, PHONE_FEATURES, PHONE_SIGNS, SENTENCE_FEATURES, SENTENCE_SIGNS,
                                       WORD_FEATURES, WORD_SIGNS)

ALPHAS = (0.01, 0.1, 0.3, 1.0)
"""Ridge penalties tried (on standardised features, times the number of clips). Capped at 1: on clips of
readers who all read about as well (speechocean762-mini's children) cross-validation would pick a
penalty that flattens the map to the mean, scoring a weak reader like a good one; a capped penalty
keeps each feature's (sign-checked) direction."""
CV_FOLDS = 5
MAP_VERSION = 2
"""2: fitted with weak readings (`pipeline.scoring.augment`), fluency and prosody without the speaking rate;
1: the first maps (real clips only; a weak reader scored almost like a good one)."""


@dataclass
class Linear:
    """One fitted target: `score = intercept + sum(weight_i * (x_i - mean_i) / scale_i)`, clipped to
    [`low`, `high`]. `features` names the inputs, `dropped` those removed for a wrong sign; `cv` holds the
    cross-validated `{"mae", "mean_mae", "pcc", "n", "alpha"}` (mean_mae: predicting the mean)."""

    features: list[str]
    mean: list[float]
    scale: list[float]
    weight: list[float]
    intercept: float
    low: float
    high: float
    dropped: list[str] = field(default_factory=list)
    cv: dict = field(default_factory=dict)

    def predict(self, values: dict[str, float]) -> float:
        """The score for one item's feature values (a dict with every name of `features`)."""
        total = self.intercept + sum(w * (values[f] - m) / s for f, m, s, w in
                                     zip(self.features, self.mean, self.scale, self.weight))
        return float(min(self.high, max(self.low, total)))


def _ridge(x: np.ndarray, y: np.ndarray, alpha: float, w: np.ndarray | None = None) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """(weights, intercept, mean, scale) of ridge regression on standardised `x` (n, k) to `y` (n,), each row
    weighing `w` (n,) (None: 1 each) in the means, the spread and the squared errors."""
    w = np.ones(len(y)) if w is None else w
    mean = np.average(x, axis=0, weights=w)
    scale = np.sqrt(np.average((x - mean) ** 2, axis=0, weights=w))
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    k = z.shape[1]
    centre = float(np.average(y, weights=w))
    weights = (np.linalg.solve((z * w[:, None]).T @ z + alpha * w.sum() * np.eye(k), (z * w[:, None]).T @ (y - centre))
               if k else np.zeros(0))
    return weights, centre, mean, scale


def _folds(groups: Sequence[str]) -> list[np.ndarray]:
    """Held-out index sets: one per speaker with 3 speakers or more, else `CV_FOLDS` interleaved folds."""
    groups = np.asarray([str(g) for g in groups])
    names = sorted(set(groups))
    if len(names) >= 3:
        return [np.flatnonzero(groups == name) for name in names]
    n = len(groups)
    return [np.arange(i, n, CV_FOLDS) for i in range(min(CV_FOLDS, n))]


def _cv_predictions(x: np.ndarray, y: np.ndarray, folds: list[np.ndarray], alpha: float, low: float, high: float,
                    weights: np.ndarray) -> np.ndarray:
    out = np.empty_like(y)
    for held in folds:
        keep = np.setdiff1d(np.arange(len(y)), held)
        w, b, m, s = _ridge(x[keep], y[keep], alpha, weights[keep])
        out[held] = np.clip(b + ((x[held] - m) / s) @ w, low, high)
    return out


def fit_linear(rows: Sequence[dict[str, float]], targets: Sequence[float], groups: Sequence[str],
               names: Sequence[str], signs: Sequence[int], low: float, high: float,
               weights: Sequence[float] | None = None) -> Linear:
    """Fit one target (see the module docstring) from feature dicts `rows`, `targets` and each row's
    speaker in `groups` (for the cross-validation); `weights`: each row's weight in the fit (None: 1 each;
    the cross-validated figures weigh every row alike). Needs at least 2 rows."""
    y = np.asarray(targets, dtype=float)
    weight = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=float)
    names, signs = list(names), list(signs)
    dropped: list[str] = []
    folds = _folds(groups)
    while True:
        x = np.asarray([[row[n] for n in names] for row in rows], dtype=float).reshape(len(y), len(names))
        errors = {a: float(np.average(np.abs(_cv_predictions(x, y, folds, a, low, high, weight) - y), weights=weight))
                  for a in ALPHAS}
        alpha = min(errors, key=errors.get)
        w, b, m, s = _ridge(x, y, alpha, weight)
        wrong = [i for i, (weight, sign) in enumerate(zip(w, signs)) if weight * sign < 0]
        if not wrong:
            break
        worst = max(wrong, key=lambda i: abs(w[i]))
        dropped.append(names.pop(worst))
        signs.pop(worst)
    predicted = _cv_predictions(x, y, folds, alpha, low, high, weight)
    mean_only = np.concatenate([np.abs(y[h] - np.delete(y, h).mean()) for h in folds])
    pcc = float(np.corrcoef(predicted, y)[0, 1]) if np.std(predicted) > 1e-9 and np.std(y) > 1e-9 else None
    cv = {"mae": round(float(np.mean(np.abs(predicted - y))), 4), "mean_mae": round(float(mean_only.mean()), 4),
          "pcc": None if pcc is None or math.isnan(pcc) else round(pcc, 4), "n": len(y), "alpha": alpha}
    return Linear(names, m.tolist(), s.tolist(), w.tolist(), b, low, high, dropped, cv)


@dataclass
class ScoreMap:
    """Every target's `Linear` map: `sentence` (aspect -> map), `word`, `phone`; `note` says what it was
    fitted on (shown beside its scores), `build` the dataset build it was fitted on (fingerprint and
    train ids; None for the shipped default), `clips` how many clips it saw."""

    sentence: dict[str, Linear]
    word: Linear
    phone: Linear
    note: str
    clips: int
    build: dict | None = None
    default: bool = False
    version: int = MAP_VERSION

    def to_dict(self) -> dict:
        """Plain JSON-safe dict (`WS/scoring/map.json`, `assets/scorer_default_map.json`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ScoreMap":
        """Read back `to_dict`'s JSON. Raises `KeyError`/`TypeError` on another layout (callers word it)."""
        return cls(sentence={k: Linear(**v) for k, v in data["sentence"].items()}, word=Linear(**data["word"]),
                   phone=Linear(**data["phone"]), note=data["note"], clips=int(data["clips"]), build=data.get("build"),
                   default=bool(data.get("default")), version=int(data.get("version", MAP_VERSION)))

    def wrong_signs(self) -> list[str]:
        """`"TARGET: FEATURE"` for each weight whose sign contradicts its feature's direction (`*_SIGNS` in
        `pipeline.scoring.features`) or whose feature is unknown; [] for a map `fit_map` wrote (it drops them)."""
        sentence_signs = dict(zip(SENTENCE_FEATURES, SENTENCE_SIGNS))
        targets = [(name, linear, sentence_signs) for name, linear in self.sentence.items()]
        targets += [("word", self.word, dict(zip(WORD_FEATURES, WORD_SIGNS))),
                    ("phone", self.phone, dict(zip(PHONE_FEATURES, PHONE_SIGNS)))]
        return [f"{name}: {feature}" for name, linear, signs in targets
                for feature, weight in zip(linear.features, linear.weight) if weight * signs.get(feature, 0) < 0
                or feature not in signs]

    def cv_summary(self) -> str:
        """Lines with each target's cross-validated MAE (beside the mean predictor's), PCC and dropped features."""
        lines = []
        for name, linear in [*self.sentence.items(), ("word accuracy", self.word), ("phone accuracy", self.phone)]:
            cv = linear.cv
            pcc = "n/a" if cv.get("pcc") is None else f"{cv['pcc']:.2f}"
            lines.append(f"  {name:<15} MAE {cv['mae']:.2f} (the mean alone: {cv['mean_mae']:.2f}), PCC {pcc}, "
                         f"n={cv['n']}" + (f"; dropped for a wrong sign: {', '.join(linear.dropped)}" if linear.dropped else ""))
        return "\n".join(lines)


def _balanced(items: Sequence[dict]) -> list[float]:
    """Each item's weight in a fit: 1 for a real clip, and the weak readings (`pipeline.scoring.augment`) together
    weigh as much as the real clips together, so the made-up readings widen the map's range without
    outvoting the experts' real scores (measured on speechocean762-mini's speaker 0003 with the map fitted on
    0001 and 0005: sentence accuracy MAE on the real clips 1.15 balanced against 1.35 unbalanced, the weak
    readings' 0.91 against 0.89)."""
    weak = sum(1 for i in items if is_weak(i))
    share = (len(items) - weak) / weak if weak and len(items) > weak else 1.0
    return [share if is_weak(i) else 1.0 for i in items]


def fit_map(items: Sequence[dict], note: str, build: dict | None = None, default: bool = False) -> ScoreMap:
    """Fit a `ScoreMap` from scored clips.

    Args:
        items: per clip `{"id", "speaker", "sentence": features dict, "scores": {accuracy, fluency, prosody,
            total} (0-10, None when absent), "words": [(features dict, expert accuracy 0-10)], "phones":
            [(features dict, expert score 0-2)]}`; a weak reading (`pipeline.scoring.augment.is_weak`)
            weighs as `_balanced` says.
        note: what the map was fitted on (shown with its scores).
    """
    sentence = {}
    for key in SENTENCE_KEYS:
        kept = [i for i in items if i["scores"].get(key) is not None]
        names, signs = ASPECT_FEATURES[key]
        sentence[key] = fit_linear([i["sentence"] for i in kept], [i["scores"][key] for i in kept],
                                   [i["speaker"] for i in kept], names, signs, 0.0, 10.0, _balanced(kept))
    weight = {id(i): w for i, w in zip(items, _balanced(items))}
    words = [(f, y, i["speaker"], weight[id(i)]) for i in items for f, y in i["words"]]
    phones = [(f, y, i["speaker"], weight[id(i)]) for i in items for f, y in i["phones"]]
    word = fit_linear([w[0] for w in words], [w[1] for w in words], [w[2] for w in words], WORD_FEATURES, WORD_SIGNS,
                      0.0, 10.0, [w[3] for w in words])
    phone = fit_linear([p[0] for p in phones], [p[1] for p in phones], [p[2] for p in phones], PHONE_FEATURES,
                       PHONE_SIGNS, 0.0, 2.0, [p[3] for p in phones])
    return ScoreMap(sentence, word, phone, note, len(items), build, default)
