"""How many expensive things a test run starts, printed in pytest's terminal summary (issue 42).

Counted, in the test process and in every Python process it starts (which report through the file
named by `$TUTOR_TEST_COUNTS_FILE`, appended one line per event by this same module loaded as their
`sitecustomize`, its folder put first on `$PYTHONPATH`):
- `app start`: a process started whose arguments run `app.py` (the browser tests' app, tests/browser.py);
- `training process`: a process started as `python -m pipeline train ...` (`start_run`, the CLI tests);
- `train() call`: a call of `pipeline.training.train.train` (in-process runs, and each training process's own);
- `model load`: a call of transformers' `PreTrainedModel.from_pretrained` (an Auto class's call counts once).

Beside the counts, the slowest test files (their tests' setup, call and teardown, summed) and the slowest
fixtures (the seconds their setups took, summed over every time each was set up), `TOP` of each.

Light by design: processes are seen through Python's audit hook (`subprocess.Popen` events), the two
functions are wrapped only once their module is imported (a meta-path finder that patches it after it
runs), and nothing is imported that a test would not import. A child whose environment a test replaces
(no `$PYTHONPATH` of ours) is not counted: the figures are lower bounds.
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
import tempfile
import time
from collections import Counter

COUNTS_ENV = "TUTOR_TEST_COUNTS_FILE"
KINDS = ("app start", "training process", "train() call", "model load")
_COUNTS: dict[str, int] = dict.fromkeys(KINDS, 0)
TOP = 15
"""How many test files and fixtures the summary lists, slowest first."""
_FILE_SECONDS: Counter = Counter()
_FIXTURE_SECONDS: Counter = Counter()
_FIXTURE_SETUPS: Counter = Counter()
_HERE = os.path.dirname(os.path.abspath(__file__))
_SITE_DIR = os.path.join(_HERE, "expense_counts_site")  # holds sitecustomize.py, which loads this file


def _record(kind: str) -> None:
    """One more `kind`: counted here in the test process, appended to the counts file in a child."""
    if _IN_TEST_PROCESS:
        _COUNTS[kind] += 1
        return
    path = os.environ.get(COUNTS_ENV)
    if path:
        try:
            with open(path, "a", encoding="utf-8") as out:  # one short line: appends do not interleave
                out.write(kind + "\n")
        except OSError:
            pass


def _audit(event: str, args: tuple) -> None:
    """Python's audit hook: counts app starts and training processes from `subprocess.Popen` events."""
    if event != "subprocess.Popen":
        return
    argv = args[1] or ()
    argv = argv.split() if isinstance(argv, (str, bytes)) else argv
    argv = [os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else str(a) for a in argv]
    if any(a == "app.py" or a.endswith(os.sep + "app.py") for a in argv):
        _record("app start")
    for i in range(len(argv) - 2):
        if argv[i] == "-m" and argv[i + 1] == "pipeline" and argv[i + 2] == "train":
            _record("training process")


def _counting(kind: str, function):
    @functools.wraps(function)
    def counted(*args, **kwargs):
        _record(kind)
        return function(*args, **kwargs)

    counted._expense_counted = True
    return counted


def _patch_modeling_utils(module) -> None:
    model_class = getattr(module, "PreTrainedModel", None)
    original = getattr(model_class, "from_pretrained", None)
    if original is None or getattr(original, "_expense_counted", False):
        return
    model_class.from_pretrained = classmethod(_counting("model load", original.__func__))


def _patch_train(module) -> None:
    original = getattr(module, "train", None)
    if original is not None and not getattr(original, "_expense_counted", False):
        module.train = _counting("train() call", original)


_PATCHES = {"transformers.modeling_utils": _patch_modeling_utils, "pipeline.training.train": _patch_train}


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then the patch once the module has run."""

    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module in `_PATCHES` it asks the other finders and wraps the loader."""

    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def install() -> None:
    """Start counting in this process (once): the audit hook, and the patches (now for modules already imported)."""
    if any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        return
    sys.addaudithook(_audit)
    sys.meta_path.insert(0, _PostImportFinder())
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])


PARENT_ENV = "TUTOR_TEST_COUNTS_PARENT"
_IN_TEST_PROCESS = os.environ.get(PARENT_ENV) == str(os.getpid())


def _child_counts() -> dict[str, int]:
    counts = dict.fromkeys(KINDS, 0)
    path = os.environ.get(COUNTS_ENV)
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                if line.strip() in counts:
                    counts[line.strip()] += 1
    return counts


def pytest_configure(config) -> None:
    """Counting starts with the session: children inherit the counts file and our `sitecustomize`."""
    global _IN_TEST_PROCESS
    if os.environ.get(PARENT_ENV) is not None and not _IN_TEST_PROCESS:
        return  # a pytest started by a test (pytester): its counts go to the file, through sitecustomize
    handle, path = tempfile.mkstemp(prefix="tutor-test-counts-", suffix=".txt")
    os.close(handle)
    os.environ[COUNTS_ENV] = path
    os.environ[PARENT_ENV] = str(os.getpid())
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = _SITE_DIR + (os.pathsep + old if old else "")
    config._expense_counts_file = path
    _IN_TEST_PROCESS = True
    install()


def pytest_runtest_logreport(report) -> None:
    """Each phase of each test adds its seconds to its file's."""
    _FILE_SECONDS[report.nodeid.split("::", 1)[0]] += report.duration


def _fixture_setup(fixturedef, request):
    """Each fixture's setup adds its seconds (not those of the fixtures it asks for: pytest sets them up first)."""
    started = time.perf_counter()
    yield
    name = fixturedef.argname if fixturedef.scope == "function" else f"{fixturedef.argname} ({fixturedef.scope})"
    _FIXTURE_SECONDS[name] += time.perf_counter() - started
    _FIXTURE_SETUPS[name] += 1


if "pytest" in sys.modules:  # loaded as the plugin; a child loading this file as its sitecustomize imports no pytest
    pytest_fixture_setup = sys.modules["pytest"].hookimpl(hookwrapper=True)(_fixture_setup)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The tables: the slowest files and fixtures, and each kind's count in this process, in its children, and in all."""
    if getattr(config, "_expense_counts_file", None) is None:
        return
    terminalreporter.section(f"slowest test files and fixtures (tests/expense_counts.py, top {TOP})")
    for file, seconds in _FILE_SECONDS.most_common(TOP):
        terminalreporter.write_line(f"{seconds:9.1f} s  {file}")
    for name, seconds in _FIXTURE_SECONDS.most_common(TOP):
        if seconds < 0.05:  # pytest's own (tmp_path, monkeypatch) and parameters: nothing to share
            break
        terminalreporter.write_line(f"{seconds:9.1f} s  fixture {name}, set up {_FIXTURE_SETUPS[name]} time(s)")
    children = _child_counts()
    terminalreporter.section("expensive starts (tests/expense_counts.py)")
    terminalreporter.write_line(f"{'':18} {'test process':>12} {'children':>9} {'total':>6}")
    for kind in KINDS:
        terminalreporter.write_line(f"{kind:18} {_COUNTS[kind]:>12} {children[kind]:>9} {_COUNTS[kind] + children[kind]:>6}")
    path = getattr(config, "_expense_counts_file", None)
    if path:
        try:
            os.remove(path)
        except OSError:
            pass
