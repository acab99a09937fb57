"""What the trainer writes into its run folder besides progress lines: the `train.log` handler and
the adapter, saved atomically. Only the training process (rank 0 under DDP) calls these; readers
of the run folder use `pipeline.training.run_folder`.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path


def open_train_log(path: Path) -> logging.Handler:
    """Send the `pipeline` loggers, Python warnings and transformers' log to the file `path`
    (appended; one line per record with time and level). Returns the handler for `close_train_log`."""
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


def close_train_log(handler: logging.Handler) -> None:
    """Detach and close a handler made by `open_train_log`."""
    import transformers

    for name in ("pipeline", "py.warnings"):
        logging.getLogger(name).removeHandler(handler)
    transformers.utils.logging.remove_handler(handler)
    logging.captureWarnings(False)
    handler.close()


def save_adapter(model, processor, adapter_dir: Path) -> None:
    """Save the LoRA adapter of `model` (a PeftModel; PEFT format) + `processor` into `adapter_dir`,
    replacing it atomically (written beside it, then renamed into place)."""
    tmp = adapter_dir.with_name(f".{adapter_dir.name}.tmp")
    old = adapter_dir.with_name(f".{adapter_dir.name}.old")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    model.save_pretrained(str(tmp))
    processor.save_pretrained(str(tmp))
    if adapter_dir.exists():
        adapter_dir.rename(old)
    tmp.rename(adapter_dir)
    shutil.rmtree(old, ignore_errors=True)
