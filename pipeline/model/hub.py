"""Finding a Gemma 3n checkpoint: a local folder, the Hugging Face cache, or the hub, with every
failure a person can fix turned into a `ModelLoadError` that says how (not logged in, gated
license not accepted, offline with nothing cached, missing `timm`, not enough disk, a folder
without a checkpoint), each pointing to `python -m pipeline get-model` (`pipeline.model.download`)
where the fix is to get the model. `pipeline.model.loading` loads through `from_pretrained_cached_first`.

Torch-free.
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import re
from pathlib import Path
from typing import Iterator

from pipeline.errors import ModelLoadError, in_words
from pipeline.fileio import disk_room

OFFLINE_MODE = "offline mode (HF_HUB_OFFLINE=1) is on"
"""Why a model not on this computer cannot be fetched, in the command line's words: the variable its user set.
The app names no variable its user never saw (`ui.wording.app_wording` rewords this phrase)."""

MODEL_DOWNLOAD_BYTES = {"google/gemma-3n-E2B-it": 11_000_000_000, "google/gemma-3n-E4B-it": 16_000_000_000}
"""Approximate download sizes in bytes (bf16 safetensors on the hub) used for the free-disk check."""

_GATED_HINT = (
    "`{model}` is a gated model: get it once with `python -m pipeline get-model --model {model} --token-stdin`, "
    "which takes a Read token (https://huggingface.co/settings/tokens) of an account that accepted the licence at "
    "https://huggingface.co/{model}."
)


_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:([\\/]|$)")


def _exists_here(text: str) -> bool:
    """True when `text` (with `~` expanded) exists on this computer; False for what cannot be a path here."""
    try:
        return Path(text).expanduser().exists()
    except (OSError, RuntimeError, ValueError):  # an unknown user in `~ann/...`, a name too long, a NUL
        return False


def foreign_path_reason(model_id: str | os.PathLike) -> str | None:
    """Why `model_id` is a path that this computer cannot see, or None (it exists here, or it is not a path).

    A model box or `--model` takes a hub id (`owner/name`: letters, digits, `-`, `_`, `.`) or a folder
    of this computer. Text that is neither, written for another system, is recognised rather than sent
    to the hub as an id: a Windows drive path (`C:\\Users\\...`), a Windows network path
    (`\\\\server\\share\\...`), any backslash (no hub id holds one), a `file:` URL, a home-folder
    path (`~/...`, `~ann/...`) and an absolute POSIX path whose top folder is not here (`/Users/ann/...` on
    Linux, `/models/...`), each when no such folder exists here. A missing folder under a folder this
    computer has (`/tmp/x/missing`) is this computer's path, simply missing: None.

    Returns:
        A phrase such as "a Windows path (drive C:)" naming the kind of path, or None.
    """
    text = str(model_id).strip()
    if not text or _exists_here(text):
        return None
    if _WINDOWS_DRIVE.match(text):
        return f"a Windows path (drive {text[0].upper()}:)"
    if text.startswith(("\\\\", "//")) and not text.startswith("///"):
        return "a network path (a shared folder of another computer)"
    if "\\" in text:
        return "a path written with Windows backslashes"
    if text.lower().startswith("file:"):
        return "a file: address"
    if text.startswith("~"):
        return "a path in a home folder"
    if text.startswith("/") and not _exists_here("/" + text.lstrip("/").split("/", 1)[0]):
        return f"an absolute path (no `/{text.lstrip('/').split('/', 1)[0]}` here)"
    return None


def is_local_model(model_id: str | os.PathLike) -> bool:
    """True when `model_id` names a local folder (exists, or looks like a path of this or another
    system: `foreign_path_reason`) rather than a hub id."""
    text = str(model_id)
    return (_exists_here(text) or text.startswith(("/", "~", "./", "../", ".\\", "..\\"))
            or foreign_path_reason(text) is not None)


def model_file(model_id: str | os.PathLike, name: str) -> Path | None:
    """The file `name` of model `model_id` on this computer, never downloaded: in its folder when `model_id` is a
    local model (`is_local_model`), else in the Hugging Face cache (`try_to_load_from_cache`). None where it has
    no such file here."""
    path = Path(str(model_id)).expanduser()
    if is_local_model(model_id):
        return path / name if (path / name).is_file() else None
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(str(model_id), name)
    except Exception:  # noqa: BLE001 - not a valid hub id either: no such file
        return None
    return Path(cached) if isinstance(cached, str) else None


def check_local_folder(model_id: str) -> Path:
    """The local model folder `model_id`, checked to hold a checkpoint.

    Raises:
        ModelLoadError: no such folder here (naming the kind of path when it was written for another
            system: this computer cannot see it), or it lacks `config.json` / `tokenizer_config.json`.
    """
    reason = foreign_path_reason(model_id)
    if reason is not None:
        raise ModelLoadError(foreign_path_message(model_id, reason))
    path = Path(model_id).expanduser()
    if not path.is_dir():
        raise ModelLoadError(
            f"Model folder `{path}` does not exist. Give a hub id such as google/gemma-3n-E2B-it (get it onto this "
            "computer with Get the model, or `python -m pipeline get-model --model ID`), or a model folder on this "
            "computer, such as one made by `python -m pipeline make-tiny-model DIR`."
        )
    missing = [name for name in ("config.json", "tokenizer_config.json") if not (path / name).exists()]
    if missing:
        found = in_words(sorted(p.name for p in path.iterdir()), limit=20)
        raise ModelLoadError(
            f"Model folder `{path}` is missing {in_words(missing)}; found {found}. Copy the whole model folder, or "
            "give the model's hub id and get it with Get the model (`python -m pipeline get-model --model ID`)."
        )
    return path


def foreign_path_message(model_id: str | os.PathLike, reason: str) -> str:
    """The message for a model path this computer cannot see (`reason` from `foreign_path_reason`)."""
    return (
        f"Model folder `{str(model_id).strip()}` is {reason} that does not exist on this computer "
        f"({platform.system() or os.name}): this computer cannot see it, and it is not a Hugging Face hub id either. "
        "A model folder must be on this computer: copy it here and give that folder's path, or give a hub id "
        "such as google/gemma-3n-E2B-it and get it with Get the model (`python -m pipeline get-model --model ID`)."
    )


def _hub_cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _is_cached(model_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model_id, "config.json")
    except Exception:  # noqa: BLE001 - an odd id is simply "not cached"
        return False
    return isinstance(found, str)


def check_disk_for_download(model_id: str) -> None:
    """Raise `ModelLoadError` when a hub model is not cached and the cache disk lacks room for it (its
    download size x `pipeline.fileio.DISK_MARGIN`, `pipeline.fileio.disk_room`)."""
    if is_local_model(model_id) or _is_cached(model_id) or _hub_offline():
        return  # offline: `_check_hub_reachable` says what to download, which matters more
    needed = MODEL_DOWNLOAD_BYTES.get(model_id)
    if needed is None:
        return
    cache = _hub_cache_dir()
    free, wanted = disk_room(cache, needed)
    if free < wanted:
        raise ModelLoadError(
            f"Downloading `{model_id}` needs about {needed / 1024**3:.0f} GiB but only {free / 1024**3:.1f} GiB is free at "
            f"{cache}. Free some disk space, or set HF_HOME to a folder on a larger disk and try again."
        )


def _exception_chain(error: BaseException) -> Iterator[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


@contextlib.contextmanager
def translate_load_errors(model_id: str, what: str) -> Iterator[None]:
    """Turn hub / filesystem / import failures while loading `what` into `ModelLoadError`s with the fix."""
    try:
        yield
    except ModelLoadError:
        raise
    except ImportError as error:
        text = str(error)
        if "timm" in text.lower():
            raise ModelLoadError(
                "Gemma 3n's vision tower needs the `timm` package: run `pip install timm` in this environment."
            ) from error
        raise ModelLoadError(f"Loading the {what} of `{model_id}` needs a package that is missing: {text}") from error
    except Exception as error:  # noqa: BLE001 - classified below, re-raised unchanged when unknown
        import httpx2
        from huggingface_hub.errors import (FileMetadataError, GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                            RepositoryNotFoundError)

        chain = list(_exception_chain(error))
        text = " ".join(str(e) for e in chain)
        hint = _GATED_HINT.format(model=model_id)
        if any(isinstance(e, ImportError) and "timm" in str(e).lower() for e in chain):
            raise ModelLoadError(
                "Gemma 3n's vision tower needs the `timm` package: run `pip install timm` in this environment."
            ) from error
        if any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in chain) or "No space left" in text:
            raise ModelLoadError(
                f"The disk filled up while loading `{model_id}` ({_hub_cache_dir()}). Free space (E2B needs ~10 GiB) "
                "or point HF_HOME at a larger disk."
            ) from error
        gated = [e for e in chain if isinstance(e, GatedRepoError)]
        if gated or "gated repo" in text.lower():
            # The hub answers 401 to anonymous requests for a gated model, 403 to a logged-in user who
            # has not accepted its license.
            status = getattr(getattr(gated[0], "response", None), "status_code", None) if gated else None
            lowered = text.lower()
            if status == 401 or (status is None and ("401" in text or "log in" in lowered or "logged in" in lowered)):
                raise ModelLoadError(f"Not logged in to Hugging Face, so the gated `{model_id}` cannot be downloaded. {hint}") from error
            raise ModelLoadError(
                f"Your Hugging Face account has not been granted access to `{model_id}` yet. {hint} "
                "Approval is usually immediate; then try again."
            ) from error
        if any(type(e).__name__ == "LocalTokenNotFoundError" for e in chain):
            raise ModelLoadError(f"No Hugging Face token found. {hint}") from error
        if any(isinstance(e, RepositoryNotFoundError) for e in chain):
            raise ModelLoadError(
                f"`{model_id}` is not a model on the Hugging Face hub (or it is private and you are not logged in). "
                "Check the spelling (e.g. google/gemma-3n-E2B-it) or give a local folder."
            ) from error
        if any(isinstance(e, LocalEntryNotFoundError) for e in chain) or "couldn't connect" in text.lower():
            where = OFFLINE_MODE if _hub_offline() else "the hub cannot be reached"
            raise ModelLoadError(_not_cached_message(model_id, where)) from error
        if any(isinstance(e, (HfHubHTTPError, httpx2.HTTPError, FileMetadataError)) for e in chain):  # any other answer
            from pipeline.model.hub_failures import hub_failure

            raise hub_failure(error, model_id, f"loading the {what} of `{model_id}` from Hugging Face") from error
        if any(type(e).__name__ == "SafetensorError" for e in chain):  # safetensors' own error: a damaged file
            raise ModelLoadError(
                f"A weights file of `{model_id}` is damaged ({text.strip()}): it was cut short or changed after "
                f"it was written. Get the model again (Get the model, or `python -m pipeline get-model --model "
                f"{model_id}`: every file is checked against the hub's hashes), or copy the folder again."
            ) from error
        raise


HUB_PROBE_TIMEOUT_S = 5.0
"""Seconds the one metadata request to the hub (`_check_hub_reachable`) may take before we say the
hub cannot be reached. huggingface_hub's file downloads instead retry 5 times with backoff (1+2+4+8+8
s) per file, which made an offline, uncached load take ~3 minutes before failing."""


def _hub_offline() -> bool:
    """True when HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is on (read now, not at import)."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return env.lower() in ("1", "true", "yes", "on") or bool(constants.HF_HUB_OFFLINE)


def _not_cached_message(model_id: str, where: str) -> str:
    return (
        f"`{model_id}` is not in the Hugging Face cache ({_hub_cache_dir()}) and {where}. With internet, get it "
        f"into that cache with `python -m pipeline get-model --model {model_id}`, or copy a downloaded model folder "
        "to this computer and pass `--model DIR`."
    )


def _check_hub_reachable(model_id: str) -> None:
    """Fail fast, before a download starts, when a hub id is not cached and cannot be fetched.

    Offline mode: raise at once. Online: one metadata request (`HfApi.model_info`, no retries,
    `HUB_PROBE_TIMEOUT_S`); a network failure (DNS, refused, timeout) raises `ModelLoadError` within
    seconds. An unknown repo or a gated one that needs a login is raised as the hub's error, for
    `translate_load_errors` to word; other HTTP answers let the normal download go ahead.
    """
    from huggingface_hub import model_info
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    if _hub_offline():
        raise ModelLoadError(_not_cached_message(model_id, OFFLINE_MODE))
    try:
        model_info(model_id, timeout=HUB_PROBE_TIMEOUT_S)
    except (GatedRepoError, RepositoryNotFoundError):
        raise
    except HfHubHTTPError:
        return
    except Exception as error:  # noqa: BLE001 - a transport failure (ConnectError, timeout, DNS), or another answer
        from pipeline.model.hub_failures import hub_failure, transport_error

        if transport_error(list(_exception_chain(error))) is not None:
            raise ModelLoadError(
                _not_cached_message(model_id, f"the hub cannot be reached ({type(error).__name__}: {error})")
            ) from error
        raise hub_failure(error, model_id, f"asking for `{model_id}`'s information before loading it") from error


def from_pretrained_cached_first(loader, model_id: str, **kwargs):
    """`loader(model_id, **kwargs)` that does not wait on the network when it need not.

    A hub id already in the cache is loaded with `local_files_only=True` first (no request; an
    incomplete cache falls back to the hub unless offline). A hub id not in the cache is checked
    with `_check_hub_reachable` first, so an offline machine fails in seconds, not minutes.
    Callers wrap this in `translate_load_errors`.
    """
    if is_local_model(model_id):
        return loader(model_id, **kwargs)
    if _is_cached(model_id):
        try:
            return loader(model_id, local_files_only=True, **kwargs)
        except (OSError, ValueError):
            if _hub_offline():
                raise
    _check_hub_reachable(model_id)
    return loader(model_id, **kwargs)
