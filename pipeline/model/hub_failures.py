"""What the Hugging Face hub (or whatever answers in its place) said, as one sentence a person can act on: the
typed error for any failure of a hub call (`hub_errors`, `hub_failure`: any HTTP status, a body that is not what
was asked for, a dropped or stalled connection, a full disk), naming the step that failed and what to do; the
access and offline messages (the licence page comes from the caller: `pipeline.model.download.licence_url`);
the token page. Used by `pipeline.model.download` (every call a download makes) and `pipeline.model.hub` (a
load's hub calls). Makes no request itself, and imports no other module of this room. Torch-free.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Callable, Iterator

from pipeline.errors import HubUnreachableError, ModelAccessError, ModelLoadError
from pipeline.units import format_bytes

TOKENS_PAGE = "https://huggingface.co/settings/tokens"
"""Where a person makes a Read token."""


def saved_token() -> str | None:
    """The token huggingface_hub would send (`HF_TOKEN`, else the one `login` saved); None when there is none."""
    from huggingface_hub import get_token

    return get_token()


OFFLINE_ON = "Offline mode is on (HF_HUB_OFFLINE=1 or TRANSFORMERS_OFFLINE=1)"
"""The start of `offline_message`, naming the variables (`ui.wording.app_wording` rewords it for the app)."""
OFFLINE_FIX = "unset both variables (or set them to 0) and start the download again."
"""The end of `offline_message`, in the command line's words (`ui.wording.app_wording` rewords it for the app)."""


def offline_message(model_id: str) -> str:
    """Why `model_id` cannot be downloaded in offline mode, and the fix (the variables' names: the command line's)."""
    return f"{OFFLINE_ON}, so `{model_id}` cannot be downloaded: {OFFLINE_FIX}"


def access_message(model_id: str, status: int | None, has_token: bool, licence: str | None = None) -> str:
    """Why the hub refuses `model_id` to this person: 403 (licence not accepted), a refused token, or no token for a
    gated model; each with the licence page (`licence`: `pipeline.model.download.licence_url`'s, else the model's
    page on the hub), the token page and where to paste a token."""
    licence = licence or f"https://huggingface.co/{model_id}"
    if status == 403:
        return (f"Your Hugging Face account has not accepted the licence of `{model_id}` yet: open {licence}, accept "
                "it with the account that made the token (access is usually granted at once), then start the "
                "download again.")
    if has_token:
        return (f"Hugging Face did not accept the token (mistyped, revoked or expired): make a new Read token at "
                f"{TOKENS_PAGE} and paste it into the Hugging Face token box at the top of the app (on the "
                "command line: `--token-stdin`).")
    return (f"`{model_id}` is a gated model: Hugging Face serves it only to an account that accepted its licence. "
            f"Accept the licence at {licence} with your Hugging Face account, make a Read token at {TOKENS_PAGE}, "
            "then paste it into the Hugging Face token box at the top of the app (on the command line: "
            "`--token-stdin`).")


def error_chain(error: BaseException) -> Iterator[BaseException]:
    """`error`, then its cause or context, and theirs, each once."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def kept_words(done: tuple[int, int] | None) -> str:
    """" The N of M fetched so far are kept ..." for (bytes here, bytes in all), or "" when nothing arrived."""
    if not done or not done[0]:
        return ""
    return f" The {format_bytes(done[0])} of {format_bytes(done[1])} fetched so far are kept and the next download continues from there."


@contextlib.contextmanager
def hub_errors(model_id: str, *, token: str | bool | None = None, done: Callable[[], tuple[int, int]] | None = None,
               cache: str | os.PathLike | None = None, what: str | Callable[[], str] = "asking Hugging Face",
               endpoint: str | None = None, passes: tuple[type[BaseException], ...] = (),
               licence: str | None = None) -> Iterator[None]:
    """Turn whatever the hub, the network and the disk raise while `model_id` is listed or fetched into one
    sentence that names what failed (`what`, e.g. "checking the token (the login check)", or a callable giving
    the step in progress) and what to do: `ModelAccessError` (401/403, a refused token), `HubUnreachableError`
    (offline mode, no network, a dropped connection, a time-out) or `ModelLoadError` (an unknown model, a full
    disk, any other HTTP status, a body that is not what was asked for: a proxy's or a captive portal's page,
    JSON of another shape). `done()` gives (bytes here, bytes in all) for the message; `endpoint`: the hub's
    address the calls use (default `HF_ENDPOINT`). Our own errors, Ctrl+C and `passes` (a download's cancel) pass
    through unchanged;
    nothing else does, so no hub answer ever reaches a person as a traceback."""
    try:
        yield
    except (ModelLoadError, KeyboardInterrupt, *passes):
        raise
    except Exception as error:  # noqa: BLE001 - every failure becomes one sentence (`_hub_failure`)
        step = what() if callable(what) else what
        raise hub_failure(error, model_id, step, token=token, kept=kept_words(done() if done else None), cache=cache,
                          endpoint=endpoint, licence=licence) from None


def hub_failure(error: Exception, model_id: str, step: str, *, token: str | bool | None = None, kept: str = "",
                cache: str | os.PathLike | None = None, endpoint: str | None = None,
                licence: str | None = None) -> ModelLoadError:
    """The typed error, with one sentence, for `error` raised while `step` ("fetching `config.json`"): see
    `hub_errors`, which raises it; `pipeline.model.hub` words a load's hub failures with it too. `kept`: the
    sentence on what was kept, added at the end."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, OfflineModeIsEnabled,
                                        RepositoryNotFoundError)

    chain = list(error_chain(error))
    address = endpoint or constants.ENDPOINT
    has_token = bool(token) if token is not None else saved_token() is not None
    status = next((getattr(getattr(e, "response", None), "status_code", None) for e in chain
                   if isinstance(e, HfHubHTTPError)), None)
    if any(isinstance(e, OfflineModeIsEnabled) for e in chain):
        return HubUnreachableError(offline_message(model_id or "the model"))
    if any(isinstance(e, GatedRepoError) for e in chain):  # 401: no token or a refused one; 403: no licence
        return ModelAccessError(access_message(model_id, status, has_token, licence))
    if model_id and any(isinstance(e, RepositoryNotFoundError) for e in chain):  # (401 for a private one)
        return ModelLoadError(f"`{model_id}` is not a model on Hugging Face (or it is private to another account): "
                              "check its name, e.g. google/gemma-3n-E2B-it.")
    if status in (401, 403):  # whoami refusing the token itself, or a file refused to it
        return ModelAccessError(access_message(model_id, status, True, licence))
    full = next((e for e in chain if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)), None)
    if full is not None:
        where = _cache_folder(cache)
        if full.errno == errno.EFBIG:
            return ModelLoadError(f"The file system at {where} cannot hold a file this big (a FAT32 disk holds at most "
                                  f"4 GiB per file): point HF_HOME at a folder on another disk and start the download "
                                  f"again.{kept}")
        return ModelLoadError(f"The disk at {where} is full: free some space (or point HF_HOME at a larger disk) and "
                              f"start the download again.{kept}")
    transport = transport_error(chain)
    if transport is not None:
        name = type(transport).__name__
        how = "no answer in time" if "Timeout" in name else \
            "the connection closed" if "RemoteProtocol" in name or "Reset" in name else "no connection"
        return HubUnreachableError(
            f"Hugging Face ({address}) cannot be reached from this computer ({how} while {step}, "
            f"{type(transport).__name__}): check the internet connection (or the proxy), then start again.{kept}")
    if any(isinstance(e, OSError) and str(e).startswith("Consistency check failed") for e in chain):
        return ModelLoadError(f"A file of `{model_id}` arrived shorter than Hugging Face announced while {step} (the "
                              f"connection broke, or something other than the hub answered): start the download "
                              f"again.{kept}")
    if status is not None:
        return ModelLoadError(_status_message(status, step, address, kept))
    disk = next((e for e in chain if isinstance(e, OSError) and e.errno is not None and not isinstance(e, httpx2.HTTPError)), None)
    if disk is not None:
        return ModelLoadError(f"The Hugging Face cache at {_cache_folder(cache)} cannot be written while {step} "
                              f"({disk.strerror or disk}): check that folder's permissions, or point HF_HOME at a "
                              f"folder you can write, then start again.{kept}")
    return ModelLoadError(
        f"Hugging Face's answer while {step} was not what was asked for ({type(error).__name__}): something other "
        f"than the hub answered at {address} (a proxy, a mirror, or a network's sign-in page); open that address in a "
        f"browser and sign in to the network if it asks, check HF_ENDPOINT, then start again.{kept}")


def _cache_folder(cache: str | os.PathLike | None) -> Path:
    """The hub cache a message names: `cache`, else huggingface_hub's (`HF_HUB_CACHE`)."""
    from huggingface_hub import constants

    return Path(cache if cache is not None else constants.HF_HUB_CACHE).expanduser()


def transport_error(chain: list[BaseException]) -> BaseException | None:
    """The first network fault in an exception's `chain` (`error_chain`): an httpx2 (huggingface_hub's) or httpx
    transport error (no connection, a time-out, a connection closed mid-answer), or the system's own
    (`ConnectionError`, `TimeoutError`, a failed name look-up); None when there is none."""
    import socket

    import httpx2

    kinds: tuple[type, ...] = (httpx2.TransportError, ConnectionError, TimeoutError, socket.gaierror)
    try:
        import httpx

        kinds += (httpx.TransportError,)
    except ImportError:  # only huggingface_hub's httpx2 in this environment
        pass
    return next((e for e in chain if isinstance(e, kinds)), None)


def _status_message(status: int, step: str, address: str, kept: str) -> str:
    """The sentence for HTTP `status` answered while `step` (401/403 are the access messages)."""
    from http import HTTPStatus

    try:
        phrase = f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        phrase = f"HTTP {status}"
    if status == 429:
        return (f"Hugging Face answered {phrase} while {step}: it is limiting the requests from this network for "
                f"a while; wait a few minutes, then start again.{kept}")
    if status >= 500:
        return f"Hugging Face answered {phrase} while {step} (a problem on its side): try again in a few minutes.{kept}"
    return (f"Hugging Face ({address}) answered {phrase} while {step}, which the hub does not answer there: a proxy "
            f"or a mirror may stand in between, or HF_ENDPOINT may name another server; check them, then start "
            f"again.{kept}")
