"""The run's `train.log`: one file for the trainer's own log lines, transformers' log and Python
warnings, opened when a run starts and closed when it ends (`pipeline.training.train`)."""

from __future__ import annotations

import logging
from pathlib import Path


def open_run_log(path: Path) -> logging.Handler:
    """Send the `pipeline` logger, transformers' logger and Python warnings (at INFO and above) to
    `path` (appended, UTF-8, one timestamped line per record); returns the handler for `close_run_log`."""
    import transformers

    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("pipeline", "py.warnings"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    transformers.utils.logging.add_handler(handler)
    logging.captureWarnings(True)
    return handler


def close_run_log(handler: logging.Handler) -> None:
    """Undo `open_run_log` and close the file."""
    import transformers

    for name in ("pipeline", "py.warnings"):
        logging.getLogger(name).removeHandler(handler)
    transformers.utils.logging.remove_handler(handler)
    logging.captureWarnings(False)
    handler.close()
