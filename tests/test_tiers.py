"""The fast tier (`pytest -m "not slow"`) loads every module of `pipeline/` and `ui/`.

Read from the tests' source, like tests/test_layout.py reads the project's (no coverage tool is among
the requirements, and tracing the tier would slow it): a module counts as reached when code that a
fast test runs imports it. A fast test is a test function not marked `slow`, in a module not wholly
marked `slow`. The code it runs:
- its module's top-level imports (they run whenever the test does),
- the imports inside the test function, inside the fixtures it asks for (by parameter name,
  `usefixtures`, or `autouse`) and inside the functions of tests/ it calls by name, followed through
  the fixtures and functions those ask for and call (looked up in the test's own module, in the tests/
  modules it imports them from, in `tests/conftest.py` and in its plugins, `pytest_plugins`);
- then, from every project module so imported, the modules it imports at its own top level (they load
  with it), and the packages above it.
An import written inside a slow test, or inside a helper or fixture that only slow tests reach, does not
count; nor does an import inside a project function (it runs only if that function is called), nor a
module loaded only by a child process (`python -m pipeline ...`, `app.py`): a fast test must import
those itself, and so run them in the process that reports a failure.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tests.test_layout import ROOT, project_modules

TESTS = ROOT / "tests"


def _is_slow_mark(node: ast.AST) -> bool:
    """`pytest.mark.slow`, `mark.slow`, or a list/tuple holding one (a `pytestmark` value or a decorator)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_slow_mark(item) for item in node.elts)
    if isinstance(node, ast.Call):
        node = node.func
    return isinstance(node, ast.Attribute) and node.attr == "slow" and (
        isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
        or isinstance(node.value, ast.Name) and node.value.id == "mark")


def _fixture_decorator(function: ast.FunctionDef) -> ast.AST | None:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "fixture" or isinstance(target, ast.Name) and target.id == "fixture":
            return decorator
    return None


def _usefixtures(decorators: list[ast.AST]) -> list[str]:
    names = []
    for decorator in decorators:
        if isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute) and decorator.func.attr == "usefixtures":
            names += [arg.value for arg in decorator.args if isinstance(arg, ast.Constant)]
    return names


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest project module a dotted import target names, or None for other packages."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(nodes: list[ast.AST], modules: dict[str, Path]) -> tuple[set[str], dict[str, str]]:
    """(project modules imported, local name -> tests module it was imported from) by the import statements
    in `nodes` and below them (not into nested functions' own bodies: the caller passes the body it means)."""
    found: set[str] = set()
    from_tests: dict[str, str] = {}
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            if node.module.startswith("tests."):
                from_tests.update({alias.asname or alias.name: node.module for alias in node.names})
        else:
            continue
        for target in targets:
            module = _resolve(target, modules)
            if module:
                found.add(module)
                break
    return found, from_tests


@dataclass
class TestsModule:
    """One module of tests/: its top-level imports, its functions, its fixtures, its tests and their marks."""

    __test__ = False  # a record, not a test class

    name: str
    top_imports: set[str]
    from_tests: dict[str, str]
    functions: dict[str, ast.FunctionDef]
    fixtures: dict[str, ast.FunctionDef]
    autouse: list[str]
    tests: dict[str, bool] = field(default_factory=dict)
    """test name -> slow"""
    usefixtures: dict[str, list[str]] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)


def read_tests_module(path: Path, modules: dict[str, Path]) -> TestsModule:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = [node for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    top_imports, from_tests = _imports(top, modules)
    module_slow, module_uses, plugins = False, [], []
    for node in top:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            module_slow = _is_slow_mark(node.value)
            module_uses = _usefixtures(node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value])
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets):
            plugins = [elt.value for elt in node.value.elts if isinstance(elt, ast.Constant)]
    functions, fixtures, autouse, tests, uses = {}, {}, [], {}, {}

    def add(function: ast.FunctionDef, prefix: str = "", class_slow: bool = False, class_uses: list[str] = ()):
        key = prefix + function.name
        functions[key] = function
        decorator = _fixture_decorator(function)
        if decorator is not None:
            fixtures[function.name] = function
            if isinstance(decorator, ast.Call) and any(k.arg == "autouse" and getattr(k.value, "value", False) for k in decorator.keywords):
                autouse.append(function.name)
        elif function.name.startswith("test"):
            tests[key] = module_slow or class_slow or any(_is_slow_mark(d) for d in function.decorator_list)
            uses[key] = [*module_uses, *class_uses, *_usefixtures(function.decorator_list)]

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node)
        elif isinstance(node, ast.ClassDef):
            slow = any(_is_slow_mark(d) for d in node.decorator_list)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(item, f"{node.name}.", slow, _usefixtures(node.decorator_list))
    name = f"tests.{path.stem}"
    return TestsModule(name, top_imports, from_tests, functions, fixtures, autouse, tests, uses, plugins)


def read_tests() -> dict[str, TestsModule]:
    modules = project_modules()
    return {m.name: m for m in (read_tests_module(path, modules) for path in sorted(TESTS.glob("*.py")))}


def fast_tier_reach(tests: dict[str, TestsModule]) -> tuple[set[str], int]:
    """(project modules the fast tests reach, how many fast tests there are); see the module docstring."""
    modules = project_modules()
    conftest = tests["tests.conftest"]
    shared_fixture_modules = [conftest, *(tests[p] for p in conftest.plugins if p in tests)]
    reached: set[str] = set()
    seen: set[tuple[str, str]] = set()
    helper_modules_reached: set[str] = set()

    def fixture(owner: TestsModule, name: str) -> tuple[TestsModule, ast.FunctionDef] | None:
        for module in (owner, *shared_fixture_modules):
            if name in module.fixtures:
                return module, module.fixtures[name]
        return None

    def visit(owner: TestsModule, function: ast.FunctionDef) -> None:
        if (owner.name, function.name) in seen:
            return
        seen.add((owner.name, function.name))
        if owner.name not in helper_modules_reached:
            helper_modules_reached.add(owner.name)
            reached.update(owner.top_imports)
        imported, from_tests = _imports(function.body, modules)
        reached.update(imported)
        for arg in [*function.args.args, *function.args.kwonlyargs]:
            found = fixture(owner, arg.arg)
            if found:
                visit(*found)
        for node in ast.walk(function):
            if isinstance(node, ast.Name):
                source = from_tests.get(node.id) or owner.from_tests.get(node.id)
                if source in tests and node.id in tests[source].functions:
                    visit(tests[source], tests[source].functions[node.id])
                elif node.id in owner.functions and node.id != function.name:
                    visit(owner, owner.functions[node.id])
                elif node.id in owner.fixtures:
                    visit(owner, owner.fixtures[node.id])

    n_fast = 0
    for module in tests.values():
        for key, slow in module.tests.items():
            if slow:
                continue
            n_fast += 1
            for names in [*(m.autouse for m in shared_fixture_modules), module.autouse]:
                for name in names:
                    visit(*fixture(module, name))
            for name in module.usefixtures.get(key, []):
                found = fixture(module, name)
                if found:
                    visit(*found)
            visit(module, module.functions[key])
    return reached, n_fast



def loaded_with(name: str, modules: dict[str, Path]) -> set[str]:
    """Project modules that loading module `name` loads: its parent packages and what it imports at its
    top level (including inside top-level `if` / `try` blocks; not inside functions or classes)."""
    path = modules[name]
    parts = name.split(".")
    found = {".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules}
    anchor = parts if path.name == "__init__.py" else parts[:-1]
    statements = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.If, ast.Try)):
            statements += [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            statements.append(node)
    for node in statements:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(anchor[: len(anchor) - (node.level - 1)] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            module = _resolve(target, modules)
            if module:
                found.add(module)
                break
    return found - {name}


def fast_tier_loads(tests: dict[str, TestsModule]) -> set[str]:
    """Every project module the fast tests import (`fast_tier_reach`) and what those load with them."""
    modules = project_modules()
    loaded, todo = set(), list(fast_tier_reach(tests)[0])
    while todo:
        name = todo.pop()
        if name not in loaded:
            loaded.add(name)
            todo += loaded_with(name, modules)
    return loaded


def test_the_fast_tier_reaches_every_module_of_pipeline_and_ui():
    tests = read_tests()
    n_fast = fast_tier_reach(tests)[1]
    assert n_fast > 100, f"only {n_fast} fast tests found: is the reading of the marks broken?"
    wanted = {name for name, path in project_modules().items()
              if name.split(".")[0] in ("pipeline", "ui") and path.name != "__init__.py"}
    missing = sorted(wanted - fast_tier_loads(tests))
    assert not missing, (
        "modules the fast tier never loads: import each in a test not marked `slow` that exercises it, so "
        f"`pytest -m \"not slow\"` runs it (tests/test_tiers.py says what counts): {missing}")


def test_the_reading_follows_fixtures_helpers_and_marks(tmp_path):
    """A module imported only inside a slow test, or a helper only a slow test calls, is not reached;
    one imported inside a fixture or a helper that a fast test asks for or calls, is."""
    modules = project_modules()
    path = tmp_path / "test_example.py"
    path.write_text('''
import pytest
from pipeline import errors

pytestmark = pytest.mark.usefixtures("used")

@pytest.fixture()
def used():
    from pipeline import workspace

@pytest.fixture()
def asked():
    from pipeline import fileio

def helper():
    from pipeline.data import paths

def slow_helper():
    from pipeline.data import rows

def test_fast(asked):
    helper()

@pytest.mark.slow
def test_slow():
    from pipeline.data import session
    slow_helper()
''')
    example = read_tests_module(path, modules)
    assert example.tests == {"test_fast": False, "test_slow": True}
    conftest = TestsModule("tests.conftest", set(), {}, {}, {}, [])
    reached, n_fast = fast_tier_reach({"tests.conftest": conftest, "tests.test_example": example})
    assert n_fast == 1
    assert {"pipeline.errors", "pipeline.workspace", "pipeline.fileio", "pipeline.data.paths"} <= reached
    assert not {"pipeline.data.rows", "pipeline.data.session"} & reached
    assert {"pipeline", "ui", "ui.judge_tab"} <= loaded_with("ui.tutor_app", modules) | loaded_with("pipeline.errors", modules)
