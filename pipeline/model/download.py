"""Getting a model from the Hugging Face hub onto this computer: what the hub holds, the token, and a download
that shows its progress, can be cancelled, resumes where it stopped, and checks every file against the hub's
own hashes.

huggingface_hub (pinned in requirements.txt) does the talking: `HfApi.model_info(files_metadata=True)` for
the file list with sizes and hashes and whether the model is gated, `get_hf_file_metadata` (a HEAD) for each
file's ETag and address, `http_get` for the bytes (its retries resume within one process with `Range`),
`login` to save a token, and at the end `snapshot_download` lays the files out in the cache as every tool
expects (`snapshots/COMMIT/FILE` -> `blobs/ETAG`, the tree listing), so `from_pretrained` finds them
offline. What this module adds, because huggingface_hub 2.x does not do it any more (it downloads into a
temporary file unique to the process and deletes it on failure, huggingface_hub PR #4228, and compares
only the size):
- a partial file that outlives the process, `blobs/ETAG.incomplete` (the name huggingface_hub < 1.0 used
  for the same purpose), which the next download continues with `Range: bytes=N-`, whoever stopped the
  last one (Cancel, a full disk, a lost connection, a killed process);
- a file counts as here only when its sha256 (files in Git LFS) or its git blob id (the others) is the
  one the hub lists; a damaged file is fetched again (once; a second damaged copy is an error), a cut one
  is continued from where it ends;
- progress in bytes of the whole model, with the speed and the time left from tqdm, and a stop asked
  between two chunks of `CHUNK_BYTES`.
Errors a person can fix are `ModelAccessError` (no token, a token the hub refuses, the licence not
accepted) or `ModelLoadError` (offline mode, no network, a full disk, a damaged file), one sentence each
with its fix; so is whatever else the hub (or what stands in its place) answers to any call (the login check,
the model's information and licence, a file's metadata and bytes, a resumed file, the file listing): any HTTP
status, a body that is not what was asked for, a dropped or stalled connection (`hub_errors`, `hub_failure`:
the sentence names the step that failed; tests/test_hub_faults.py makes each happen at each endpoint). Which model ids exist and their licence pages are the families' (`pipeline.model.catalog`);
sizes and gating are the hub's answer, so any family's model downloads the same way.

Not here: what is on this computer already (`pipeline.model.local_copy`), the download as a background job
(`pipeline.model.download_job`), the command line (`pipeline.model.cli`). Torch-free.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from pipeline.errors import DownloadCancelled, HubUnreachableError, ModelAccessError, ModelLoadError, in_words, shorten
from pipeline.fileio import atomic_write_text, disk_room, hold_point
from pipeline.model.hub import _hub_offline, is_local_model
from pipeline.model.hub_failures import TOKENS_PAGE, access_message, hub_errors, kept_words, offline_message, saved_token
from pipeline.model.local_copy import cache_dir, resolved_file, storage_folder, wanted
from pipeline.units import MIB, format_bytes

HUB_TIMEOUT_S = 10.0
"""Seconds one metadata request to the hub may take before we say the hub cannot be reached."""
CHUNK_BYTES = 1 * MIB
"""Bytes `http_get` reads between two progress updates (huggingface_hub's `DOWNLOAD_CHUNK_SIZE`, 10 MiB by
default): at 1 MB/s the bar moves, and Cancel is heard, every second instead of every ten."""
REPORT_EVERY_S = 0.5
"""Seconds between two progress reports (`on_progress`), besides those at each new file and phase."""
HASH_BLOCK_BYTES = 8 * MIB
"""Bytes read at a time while a file's hash is checked."""
ATTEMPTS = 2
"""Times a file is fetched when what arrives does not match the hub's hash (the second failure is an error)."""
PHASES = ("listing", "checking", "fetching", "placing")
"""What a download is doing: asking the hub for the file list, checking what is here against its hashes,
fetching the rest, laying the files out in the cache."""


@dataclass(frozen=True)
class HubFile:
    """One file of a model on the hub."""

    path: str
    """Its path in the repo ("model-00001-of-00003.safetensors")."""
    size: int
    """Bytes."""
    sha256: str | None
    """The sha256 the hub lists for a file in Git LFS (hex); None for a plain git file."""
    blob_id: str | None
    """The git object id (sha1 of `blob SIZE\\0` + the bytes, hex) the hub lists; None when it lists none."""


@dataclass(frozen=True)
class HubModel:
    """What the hub says of a model: its commit, whether it is gated, and the files a download fetches."""

    model: str
    commit: str
    """The 40-hex commit the files are taken from."""
    gated: bool
    """True: files are served only to a token whose account accepted the licence."""
    files: tuple[HubFile, ...]
    """The files a download fetches (`pipeline.model.local_copy.wanted` of the repo's files)."""

    @property
    def total_bytes(self) -> int:
        """Bytes of every file a download fetches."""
        return sum(f.size for f in self.files)


@dataclass
class DownloadProgress:
    """Where a download stands; `on_progress` gets this object (a job writes `to_dict()` to its folder)."""

    model: str
    phase: str
    """One of `PHASES`."""
    file: str | None = None
    """The file being checked or fetched."""
    file_number: int = 0
    """1-based number of that file among `files`."""
    files: int = 0
    done_bytes: int = 0
    """Bytes of the model here so far: whole checked files, partial files and what is arriving."""
    total_bytes: int = 0
    rate_bytes_per_s: float | None = None
    """Bytes per second arriving (tqdm's smoothed rate); None before it is known and while checking."""
    eta_s: float | None = None
    """Seconds left at that rate; None when not known."""
    fetched_bytes: int = 0
    """Bytes that arrived in this download (the rest were here already)."""
    started_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return asdict(self)


def ready_line(result: dict) -> str:
    """"ready: MODEL (SIZE) in FOLDER" for `download_model`'s result (the command line's last line, the app's)."""
    return f"ready: {result['model']} ({format_bytes(result['size_bytes'])}) in {result['folder']}"


def licence_url(model_id: str) -> str:
    """Where a person accepts the licence of `model_id`: the family's page for a model it lists
    (`ModelFamily.licence_url`), else the model's page on the hub."""
    from pipeline.model.catalog import FAMILIES

    for family in FAMILIES.values():
        if model_id in family.models and family.licence_url:
            return family.licence_url
    return f"https://huggingface.co/{model_id}"


def check_hub_id(model_id: str) -> str:
    """`model_id` stripped, checked to be a hub id ("owner/name").

    Raises:
        ModelLoadError: it is a folder of this computer (nothing to download), or not a valid hub id.
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    model_id = str(model_id or "").strip()
    if model_id and is_local_model(model_id):
        raise ModelLoadError(f"`{model_id}` is a folder on this computer, not a model on Hugging Face: there is nothing "
                             "to download. Give a hub id such as google/gemma-3n-E2B-it.")
    try:
        validate_repo_id(model_id)
    except HFValidationError:
        raise ModelLoadError(f"`{model_id}` is not a Hugging Face model id; ids look like `owner/name`, e.g. "
                             "google/gemma-3n-E2B-it.") from None
    return model_id


def save_token(token: str) -> str:
    """Check `token` with the hub and save it with huggingface_hub's own `login` (in `HF_HOME`, never in a
    workspace; not added to git's credentials); returns the account's name. The token is never printed.

    Raises:
        ModelAccessError: empty, or the hub does not accept it (mistyped, revoked, expired).
        ModelLoadError: the hub cannot be reached, or offline mode is on.
    """
    from huggingface_hub import login, whoami

    token = (token or "").strip()
    if not token:
        raise ModelAccessError(f"The Hugging Face token is empty: make a Read token at {TOKENS_PAGE} and paste it.")
    with hub_errors("", token=token, what="checking the token (the login check)"):  # no model: no licence page
        account = whoami(token=token)
        name = account.get("name") if isinstance(account, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"whoami answered {shorten(account, 80)}")
        login(token=token, add_to_git_credential=False)
    return name


def _git_blob_id(path: Path, size: int, should_stop: Callable[[], None]) -> str:
    digest = hashlib.sha1(b"blob %d\x00" % size)
    return _digest_file(path, digest, should_stop)


def _digest_file(path: Path, digest, should_stop: Callable[[], None]) -> str:
    with open(path, "rb") as handle:
        while block := handle.read(HASH_BLOCK_BYTES):
            digest.update(block)
            should_stop()
    return digest.hexdigest()


def matches_hub(path: Path, expected: HubFile, should_stop: Callable[[], None] = lambda: None) -> bool:
    """True when the file at `path` is `expected`: its size, then its sha256 (an LFS file) or git blob id (the
    others), as the hub lists them; size alone when the hub lists no hash. Reads the whole file."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if size != expected.size:
        return False
    if expected.sha256:
        return _digest_file(path, hashlib.sha256(), should_stop) == expected.sha256
    if expected.blob_id:
        return _git_blob_id(path, size, should_stop) == expected.blob_id
    return True


def hub_model(model_id: str, *, token: str | bool | None = None, endpoint: str | None = None,
              timeout_s: float = HUB_TIMEOUT_S) -> HubModel:
    """What the hub says of `model_id` (one `model_info` request with the files' metadata; public for a gated
    model too). `token`: None sends the saved one, False none.

    Raises:
        ModelLoadError / ModelAccessError: an unknown or private model (`hub_errors`); `HubUnreachableError` (a
            `ModelLoadError`) for offline mode or no network.
    """
    from huggingface_hub import HfApi

    model_id = check_hub_id(model_id)
    if _hub_offline():
        raise HubUnreachableError(offline_message(model_id))
    with hub_errors(model_id, token=token, what=f"asking for `{model_id}`'s files and licence (the model's "
                    "information)", endpoint=endpoint, licence=licence_url(model_id)):
        info = HfApi(endpoint=endpoint).model_info(model_id, files_metadata=True, token=token, timeout=timeout_s)
        files = [HubFile(str(s.rfilename), int((s.lfs.size if s.lfs else s.size) or 0), s.lfs.sha256 if s.lfs else None,
                         s.blob_id) for s in (info.siblings or [])]
        listing = HubModel(model_id, str(info.sha), bool(info.gated), tuple(wanted(files, key=lambda f: f.path)))
        if not re.fullmatch(r"[0-9a-f]{40}", listing.commit) or not listing.files or info.gated not in GATED_VALUES:
            raise ValueError(f"model_info gave commit {shorten(info.sha, 60)}, {len(files)} files, gated "
                             f"{shorten(info.gated, 40)}")
    return listing


GATED_VALUES = (False, None, "auto", "manual", True)
"""What the hub's `gated` field holds (huggingface_hub's `ModelInfo.gated`: False, "auto" or "manual"); anything
else is an answer that did not come from the hub."""


def check_access(model_id: str, *, token: str | bool | None = None, endpoint: str | None = None) -> HubModel:
    """`hub_model(model_id)`, refused at once when the hub says it is gated and no token is at hand (`token`,
    else the saved one): the download would stop at its first file anyway.

    Raises:
        ModelAccessError: gated, no token (the message names the licence page, the token box, `--token-stdin`).
        ModelLoadError: as `hub_model`.
    """
    listing = hub_model(model_id, token=token, endpoint=endpoint)
    if listing.gated and not (token if token is not None else saved_token()):
        raise ModelAccessError(access_message(listing.model, None, False, licence_url(listing.model)))
    return listing


class _Stop(Exception):
    """Raised between two chunks when the download was asked to stop."""


class _Progress:
    """The progress of one download: the report (throttled to `REPORT_EVERY_S`), the stop check and tqdm's bar
    over the bytes that must arrive (its rate and time left; drawn to `bar_file`, or nowhere)."""

    def __init__(self, model_id: str, total: int, files: int, on_progress, should_stop, bar_file):
        self.state = DownloadProgress(model_id, "listing", files=files, total_bytes=total)
        self.on_progress, self.should_stop, self.bar_file = on_progress, should_stop, bar_file
        self.good = 0
        """Bytes of whole files checked or fetched."""
        self.current = 0
        """Bytes of the file in flight (its partial part included)."""
        self.bar = None
        self._devnull = None
        self._last = 0.0

    def check_stop(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise _Stop()

    def report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < REPORT_EVERY_S:
            return
        self._last = now
        state = self.state
        state.done_bytes = self.good + self.current
        if self.bar is not None and not self.bar.disable:
            rate = self.bar.format_dict.get("rate")
            state.fetched_bytes = int(self.bar.n)
            state.rate_bytes_per_s = float(rate) if rate else None
            state.eta_s = max(0.0, (self.bar.total - self.bar.n) / rate) if rate else None
        if self.on_progress is not None:
            self.on_progress(state)

    def at(self, phase: str, file: HubFile | None = None, number: int = 0) -> None:
        self.state.phase, self.state.file, self.state.file_number = phase, file.path if file else None, number
        if self.bar is not None and file is not None:
            self.bar.set_description(file.path, refresh=False)
        self.report(force=True)
        hold_point(f"get-model:{phase}")

    def start_fetching(self, to_fetch: int) -> None:
        from tqdm.auto import tqdm

        if self.bar_file is None:
            self._devnull = open(os.devnull, "w")  # noqa: SIM115 - closed in `close`
        self.bar = tqdm(total=to_fetch, unit="B", unit_scale=True, unit_divisor=1024, mininterval=REPORT_EVERY_S,
                        file=self.bar_file if self.bar_file is not None else self._devnull, dynamic_ncols=True,
                        disable=not to_fetch)

    def arrived(self, n: int) -> None:
        self.current += n
        self.bar.update(n)
        self.report()
        self.check_stop()
        hold_point(f"get-model:chunk:{self.state.file}")

    def file_bar(self):
        """A class `http_get` takes as its `tqdm_class`: each chunk is counted here, and may stop the download."""
        progress = self

        class _FileBar:
            def __init__(self, *_, initial: int = 0, **__):
                progress.current = int(initial or 0)

            def __enter__(self):
                return self

            def __exit__(self, *_):
                return False

            def update(self, n: int | float | None = 1) -> None:
                progress.arrived(int(n or 0))

            def close(self) -> None:
                pass

        return _FileBar

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self._devnull is not None:
            self._devnull.close()


@contextlib.contextmanager
def _chunks_of(size: int) -> Iterator[None]:
    """huggingface_hub's read size set to `size` bytes for the duration (see `CHUNK_BYTES`)."""
    from huggingface_hub import constants

    before = constants.DOWNLOAD_CHUNK_SIZE
    constants.DOWNLOAD_CHUNK_SIZE = size
    try:
        yield
    finally:
        constants.DOWNLOAD_CHUNK_SIZE = before


def _etag_name(file: HubFile) -> str:
    """The name the cache gives the file's blob: the hub's ETag, its sha256 (LFS) or its git blob id."""
    return file.sha256 or file.blob_id or ""


def _check_here(file: HubFile, storage: Path, commit: str, progress: _Progress) -> bool:
    """Is `file` here and whole (its snapshot entry, else its blob)? A damaged copy is set aside: shorter than
    listed, it becomes the partial file the fetch continues (the hash check after it catches a wrong start);
    otherwise it is deleted. Returns True when the file is here and matches the hub."""
    name = _etag_name(file)
    entry = storage / "snapshots" / commit / file.path
    for candidate in (resolved_file(entry), storage / "blobs" / name if name else None):
        if candidate is None or not candidate.is_file():
            continue
        if matches_hub(candidate, file, progress.check_stop):
            return True
        partial = storage / "blobs" / f"{name}.incomplete"
        shorter = candidate.stat().st_size < file.size and name
        if shorter and (not partial.exists() or partial.stat().st_size < candidate.stat().st_size):
            os.replace(candidate, partial)
        else:
            candidate.unlink(missing_ok=True)
        if entry.is_symlink() or entry.exists():
            entry.unlink(missing_ok=True)
    return False


def _partial_bytes(file: HubFile, storage: Path) -> int:
    partial = storage / "blobs" / f"{_etag_name(file)}.incomplete"
    try:
        return min(partial.stat().st_size, file.size)
    except OSError:
        return 0


def _fetch(file: HubFile, listing: HubModel, storage: Path, token, endpoint: str | None, progress: _Progress) -> None:
    """Fetch `file` into `blobs/ETAG` through `blobs/ETAG.incomplete` (continued from its end with `Range`),
    check it against the hub's hash, and fetch it once more from the start if it does not match.

    Raises:
        ModelLoadError: it arrived damaged `ATTEMPTS` times. Whatever `http_get` raises passes through (the
            partial file stays for the next download).
    """
    from urllib.parse import urlsplit

    from huggingface_hub import hf_hub_url
    from huggingface_hub.file_download import get_hf_file_metadata, http_get
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    url = hf_hub_url(listing.model, file.path, revision=listing.commit, endpoint=endpoint)
    meta = get_hf_file_metadata(url, token=token, endpoint=endpoint, timeout=HUB_TIMEOUT_S)
    etag = meta.etag or _etag_name(file)
    size = meta.size if meta.size is not None else file.size
    blob = storage / "blobs" / etag
    partial = blob.with_name(f"{etag}.incomplete")
    headers = build_hf_headers(token=token)
    location = meta.location or url
    if urlsplit(location).netloc != urlsplit(url).netloc:  # a signed CDN address: the token stays with the hub
        headers.pop("authorization", None)
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock = storage.parent / ".locks" / storage.name / f"{etag}.lock"  # huggingface_hub's own lock for this blob
    lock.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(lock):
        if blob.is_file() and matches_hub(blob, file, progress.check_stop):  # another download finished it meanwhile
            progress.current = file.size
            return
        for attempt in range(1, ATTEMPTS + 1):
            resume = partial.stat().st_size if partial.exists() else 0
            if resume > size:
                partial.unlink()
                resume = 0
            with open(partial, "ab") as out:
                http_get(location, out, resume_size=resume, headers=headers, expected_size=size,
                         displayed_filename=file.path, tqdm_class=progress.file_bar())
            progress.at("checking", file, progress.state.file_number)
            if matches_hub(partial, file, progress.check_stop):
                os.replace(partial, blob)
                return
            partial.unlink(missing_ok=True)
            progress.bar.total += size  # the bytes that arrived stay counted as fetched; as many must come again
            progress.current = 0
            progress.at("fetching", file, progress.state.file_number)
    raise ModelLoadError(f"Fetching `{file.path}` of `{listing.model}` failed: it arrived damaged {ATTEMPTS} times (its "
                         f"{'sha256' if file.sha256 else 'git hash'} is not the one Hugging Face lists), so the "
                         "connection is unreliable or something other than the hub answers; start the download again "
                         "later.")


def _place(listing: HubModel, cache: Path, token, endpoint: str | None, revision: str) -> Path:
    """Lay the fetched blobs out as huggingface_hub does (`snapshot_download` at the listed commit: snapshot
    entries, the tree listing; every blob is here, so nothing is fetched again) and point `refs/REVISION` at the
    commit. Where symlinks cannot be made the entries are copies, and the blobs are then removed."""
    from huggingface_hub import snapshot_download
    from tqdm.auto import tqdm

    class _Silent(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    folder = Path(snapshot_download(listing.model, revision=listing.commit, cache_dir=cache, token=token,
                                    endpoint=endpoint, allow_patterns=[f.path for f in listing.files],
                                    tqdm_class=_Silent))
    missing = [f.path for f in listing.files if not (folder / f.path).is_file()]
    if missing:  # snapshot_download lays out what the listing named; a listing it could not get names nothing
        raise ModelLoadError(
            f"Laying out `{listing.model}` in the cache failed at the file listing: Hugging Face's list of its files "
            f"left out {in_words(missing, limit=3)} (the connection broke, or something other than the hub "
            "answered). Every file is here and checked: start the download again, it fetches nothing twice.")
    storage = storage_folder(listing.model, cache)
    atomic_write_text(storage / "refs" / revision, listing.commit)
    for file in listing.files:
        entry, blob = folder / file.path, storage / "blobs" / _etag_name(file)
        if entry.is_file() and not entry.is_symlink() and blob.is_file():
            blob.unlink()
    return folder


def _check_disk(listing: HubModel, storage: Path, to_fetch: int, progress: _Progress) -> None:
    free, wanted = disk_room(storage, to_fetch)
    if free < wanted:
        raise ModelLoadError(
            f"Getting `{listing.model}` needs {format_bytes(to_fetch)} more on the disk at {storage.parent}, and only "
            f"{format_bytes(free)} is free: free some space (or point HF_HOME at a larger disk) and start again."
            + kept_words((progress.good + progress.current, listing.total_bytes)))


def _step(state: DownloadProgress) -> str:
    """What a download was doing at `state`, for a message: "fetching `model.safetensors` (file 3 of 5)"."""
    if state.phase == "placing":
        return "listing the model's files to lay them out in the cache (the file listing)"
    where = f" (file {state.file_number} of {state.files})" if state.file_number else ""
    return f"{'checking' if state.phase == 'checking' else 'fetching'} `{state.file}`{where}" if state.file else \
        "getting ready to fetch the files"


def download_model(model_id: str, *, token: str | bool | None = None, endpoint: str | None = None,
                   cache: str | os.PathLike | None = None, revision: str = "main",
                   on_progress: Callable[[DownloadProgress], None] | None = None,
                   should_stop: Callable[[], bool] | None = None, bar_file=None) -> dict:
    """Get hub model `model_id` into the Hugging Face cache, continuing whatever an earlier download left.

    First every file already here is checked against the hub's hash (`checking`), then the free disk for
    the rest, then each missing file is fetched (`fetching`; see `_fetch`), then laid out (`placing`).

    Args:
        token: None sends the saved token (`saved_token`), False none, a string that one.
        endpoint: the hub's address (default `HF_ENDPOINT`, else https://huggingface.co).
        cache: the hub cache folder (default `cache_dir()`).
        on_progress: called with a `DownloadProgress` at each file and phase and at most every `REPORT_EVERY_S`.
        should_stop: asked between chunks and hash blocks; True stops the download (`DownloadCancelled`).
        bar_file: where tqdm draws the bar (a terminal's stderr); None draws none.

    Returns:
        {"model", "commit", "folder" (the snapshot folder, text), "size_bytes", "fetched_bytes", "seconds"}.

    Raises:
        ModelAccessError: a gated model without a token, a refused token, the licence not accepted.
        ModelLoadError: offline mode, no network, an unknown model, too little disk (before or during),
            a file damaged twice. DownloadCancelled: `should_stop` said so. What arrived is kept in each case.
    """
    began = time.monotonic()
    if on_progress is not None:
        on_progress(DownloadProgress(str(model_id), "listing"))
    listing = check_access(model_id, token=token, endpoint=endpoint)
    cache_path = cache_dir(cache)
    storage = storage_folder(listing.model, cache_path)
    progress = _Progress(listing.model, listing.total_bytes, len(listing.files), on_progress, should_stop, bar_file)
    done = lambda: (progress.good + progress.current, listing.total_bytes)  # noqa: E731
    try:
        with hub_errors(listing.model, token=token, done=done, cache=cache_path, what=lambda: _step(progress.state),
                        endpoint=endpoint, passes=(_Stop,), licence=licence_url(listing.model)), _chunks_of(CHUNK_BYTES):
            missing = []
            if bar_file is not None:
                print(f"Checking what of {listing.model} is here against Hugging Face's checksums…", file=bar_file)
            for number, file in enumerate(listing.files, 1):
                progress.at("checking", file, number)
                if _check_here(file, storage, listing.commit, progress):
                    progress.good += file.size
                else:
                    missing.append((number, file))
                    progress.good += _partial_bytes(file, storage)
            to_fetch = sum(f.size - _partial_bytes(f, storage) for _, f in missing)
            _check_disk(listing, storage, to_fetch, progress)
            progress.start_fetching(to_fetch)
            if bar_file is not None and not missing:
                print(f"Every file of {listing.model} is here and matches Hugging Face's checksums.", file=bar_file)
            for number, file in missing:
                progress.good -= _partial_bytes(file, storage)
                progress.at("fetching", file, number)
                _fetch(file, listing, storage, token, endpoint, progress)
                progress.good += file.size
                progress.current = 0
            progress.at("placing")
            folder = _place(listing, cache_path, token, endpoint, revision)
    except _Stop:
        raise DownloadCancelled(
            f"Cancelled: {format_bytes(progress.good + progress.current)} of {format_bytes(listing.total_bytes)} of "
            f"`{listing.model}` are here; `python -m pipeline get-model --model {listing.model}` continues from there.") from None
    finally:
        progress.close()
    return {"model": listing.model, "commit": listing.commit, "folder": str(folder), "size_bytes": listing.total_bytes,
            "fetched_bytes": int(progress.bar.n), "seconds": round(time.monotonic() - began, 3)}
