"""Settings a person gives a process through its environment (`TUTOR_TRAIN_THREADS`, `TUTOR_MAX_BATCH`, ...),
read one way: `whole_number`."""

from __future__ import annotations

import os

from pipeline.errors import ConfigError


def whole_number(name: str, *, unit: str, unset: str) -> int | None:
    """The environment variable `name` as a whole number >= 1, or None when it is unset or blank.

    Args:
        name: the variable ("TUTOR_MAX_BATCH").
        unit: what it counts, plural, for the message ("threads", "answers").
        unset: what unsetting it does, for the message ("unset it to use the rule").

    Raises:
        ConfigError: the value is not a whole number >= 1: "`NAME` must be a whole number of UNIT >= 1, got
            'VALUE'; UNSET."
    """
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"`{name}` must be a whole number of {unit} >= 1, got {value!r}; {unset}.")
    return number
