"""The layout's rules (docs/ARCHITECTURE.md): the floors (which room may import which), no import
circle, small modules, a thin app.py, and a README file tree that matches the repository.

Imports are read from the source (every `import` statement, including those inside functions), so
a circle that only closes at run time through a lazy import is caught too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "ui")
MAX_MODULE_LINES = 700
MAX_APP_LINES = 300
SIZE_REASON = "Longer than 700 lines because"
"""A module over `MAX_MODULE_LINES` states why in its docstring with this phrase."""


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages and `app`."""
    modules = {"app": ROOT / "app.py"}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imported_modules(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Project modules that `path` imports anywhere in its body (resolved to the deepest module)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
                break
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported_modules(path, name, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as `[a, b, ..., a]`, or None (iterative depth-first search)."""
    state: dict[str, int] = {}
    for start in graph:
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


FLOORS = (
    ("pipeline.errors", "pipeline.fileio", "pipeline.units"),
    ("pipeline.workspace", "pipeline.access", "pipeline.conversation"),
    ("pipeline.host",),
    ("pipeline.jobs", "pipeline.calibration"),
    ("pipeline.model",),
    ("pipeline.config",),
    ("pipeline.data",),
    ("pipeline.scoring",),
    ("pipeline.tutor",),
    ("pipeline.memory",),
    ("pipeline.serving", "pipeline.inbox"),
    ("pipeline.training",),
    ("pipeline.export",),
    ("pipeline.__main__",),
    ("ui",),
    ("app",),
)
"""The house's floors, from the ground up (docs/ARCHITECTURE.md "Floors"). A room is a folder of
`pipeline/` or a module beside them, `ui/` or `app.py`; a module of a room may import only modules of
its own room or of rooms on lower floors, so no arrow runs back up and no circle can close between rooms."""


def room_of(module: str) -> str:
    """The room (`FLOORS`) a module belongs to: its top folder under `pipeline/`, `ui`, or the module."""
    parts = module.split(".")
    if parts[0] == "pipeline" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def floor_of(room: str) -> int:
    for number, rooms in enumerate(FLOORS):
        if room in rooms:
            return number
    raise AssertionError(f"room {room!r} stands on no floor: add it to FLOORS in tests/test_layout.py "
                         "and to the floors of docs/ARCHITECTURE.md")


def test_every_room_stands_on_a_floor_and_imports_only_rooms_below():
    graph = import_graph()
    upward = []
    for module, imported in graph.items():
        room = room_of(module)
        for target in imported:
            other = room_of(target)
            if other != room and floor_of(other) >= floor_of(room):
                upward.append(f"{module} -> {target} ({room} on floor {floor_of(room)}, {other} on floor {floor_of(other)})")
    assert not upward, "imports that do not point down a floor:\n" + "\n".join(sorted(upward))


def test_the_floor_rule_catches_an_import_that_points_up():
    assert floor_of(room_of("pipeline.model.loading")) < floor_of(room_of("pipeline.training.train"))
    assert room_of("pipeline.errors") == "pipeline.errors" and room_of("ui.memory_tab") == "ui"


def test_the_floors_in_the_architecture_page_are_the_tested_ones():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for rooms in FLOORS:
        for room in rooms:
            path = room.replace(".", "/") if room.startswith("pipeline") else room
            if (ROOT / path).is_dir() or (ROOT / f"{path}.py").is_file():
                assert f"`{path}" in text, f"docs/ARCHITECTURE.md does not name the room `{path}` on its floors"


def test_the_cycle_finder_finds_a_lazy_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle_between_project_modules():
    graph = import_graph()
    assert "pipeline.model.tokens" in graph and graph["pipeline.training.collate"] >= {"pipeline.model.tokens"}
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_ui_reaches_the_trainer_only_through_the_run_folder_api():
    """The UI starts, watches and stops runs through `pipeline.training.runs` (the run folder), never by
    importing the trainer or the model in the app's process."""
    graph = import_graph()
    ui_modules = [m for m in graph if m == "app" or m.startswith("ui")]
    forbidden = {"pipeline.training.train", "pipeline.training.collate"}
    offenders = {m: sorted(graph[m] & forbidden) for m in ui_modules if graph[m] & forbidden}
    assert not offenders, offenders


def test_modules_are_small_or_say_why():
    too_long = []
    for name, path in project_modules().items():
        lines = path.read_text(encoding="utf-8").count("\n")
        if name == "app":
            assert lines <= MAX_APP_LINES, f"app.py has {lines} lines; keep it to arguments, page layout and launch"
        elif lines > MAX_MODULE_LINES and SIZE_REASON not in (ast.get_docstring(ast.parse(path.read_text())) or ""):
            too_long.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines without '{SIZE_REASON} ...' in the docstring: {too_long}"


MAX_FUNCTION_LINES = 120


def test_functions_are_short():
    """No function of the library or the app (`pipeline/`, `ui/`, `app.py`) runs over 120 lines: a long
    piece of work reads as its named steps (`pipeline.training.train.train` as its phases)."""
    too_long = []
    for name, path in project_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.name} ({lines} lines)")
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"


def test_train_reads_as_its_phases():
    """`train()` is at most 80 lines: open the run, load, preflight, fit, finish (issue 29)."""
    tree = ast.parse((ROOT / "pipeline" / "training" / "train.py").read_text(encoding="utf-8"))
    train = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    assert train.end_lineno - train.lineno + 1 <= 80


def test_every_tab_is_a_pair_and_its_view_is_pure():
    """Every tab is `ui/X_tab.py` (widgets and handlers) with `ui/X_view.py` (its text, tables and figures), the
    practice page `ui/practice_page.py` with `ui/practice_view.py`, the Get-the-model panel above the tabs
    `ui/get_model.py` with `ui/get_model_view.py`. A view imports no gradio, not even through another module of
    `ui/`, so it can be tested as plain functions."""
    tabs = {path.name[: -len("_tab.py")] for path in (ROOT / "ui").glob("*_tab.py")} | {"practice", "get_model"}
    views = {path.name[: -len("_view.py")] for path in (ROOT / "ui").glob("*_view.py")}
    assert tabs <= views, f"tabs without a view: {sorted(tabs - views)}"
    assert views <= tabs, f"views without a tab: {sorted(views - tabs)}"
    modules = project_modules()
    graph = import_graph()
    for view in sorted(views):
        seen, todo = set(), [f"ui.{view}_view"]
        while todo:
            module = todo.pop()
            if module in seen or not module.startswith("ui"):
                continue
            seen.add(module)
            tree = ast.parse(modules[module].read_text(encoding="utf-8"))
            names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names}
            names |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) and not node.level}
            assert "gradio" not in names, f"ui/{view}_view.py imports gradio through {module}"
            todo += sorted(graph[module])


def test_only_the_model_room_names_gemma3n():
    """Gemma 3n's classes, its hub ids and its model type are named in code only in `pipeline/model/`
    (docstrings, comments and messages to people may mention it)."""
    pattern = re.compile(r"\bGemma3n\w*\b|[\"']google/gemma-3n-[\w-]+[\"']|[\"']gemma3n[\"']")
    offenders = [
        name
        for name, path in project_modules().items()
        if not name.startswith("pipeline.model.")
        and pattern.search(re.sub(r'"""[\s\S]*?"""|#.*', "", path.read_text(encoding="utf-8")))
    ]
    assert not offenders, offenders


def fenced_tree_paths(text: str) -> list[str]:
    """The paths a file-tree block lists: the first column of each line of every fenced block."""
    return [
        line.split()[0]
        for block in re.findall(r"```\n(.*?)```", text, re.S)
        for line in block.splitlines()
        if line.strip() and not line.startswith(" ")
    ]


def readme_tree_paths() -> list[str]:
    """The paths listed in the README's file-tree block (the first column of each line)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Files\n(?:(?!```).)*?\n```\n.*?```", text, re.S)
    assert block, "README.md has no '## Files' section with a fenced file tree"
    return fenced_tree_paths(block.group(0)[block.group(0).index("```"):])


def test_readme_file_tree_names_every_room():
    listed = readme_tree_paths()
    missing = [p for p in listed if not (ROOT / p).exists()]
    assert not missing, f"README lists paths that do not exist: {missing}"
    # One line per room (a folder of pipeline/, ui/, a module beside them), in floor order from the top.
    rooms = {room_of(name) for name in project_modules()} - {"pipeline"}
    named = {p.rstrip("/").removesuffix(".py").replace("/", ".") for p in listed}
    unnamed = sorted(room for room in rooms if room not in named)
    assert not unnamed, f"rooms missing from the README's file tree: {unnamed}"
    floors = [floor_of(p.rstrip("/").removesuffix(".py").replace("/", ".")) for p in listed
              if p.rstrip("/").removesuffix(".py").replace("/", ".") in rooms]
    assert floors == sorted(floors, reverse=True), "the README's rooms are listed from the top floor down"


def test_docs_files_lists_every_module():
    listed = fenced_tree_paths((ROOT / "docs" / "files.md").read_text(encoding="utf-8"))
    missing = [p for p in listed if not (ROOT / p).exists()]
    assert not missing, f"docs/files.md lists paths that do not exist: {missing}"
    # Every module of the project has its own line, so a reader finds any behaviour from the list.
    unlisted = [
        str(path.relative_to(ROOT))
        for path in project_modules().values()
        if path.name != "__init__.py" and str(path.relative_to(ROOT)) not in listed
    ]
    assert not unlisted, f"modules missing from docs/files.md: {unlisted}"


def test_ci_runs_exactly_the_readme_test_command():
    """CI calls the test command the README shows (the brief: `.ci/run` calls the exact command)."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after = readme.split("Run the tests", 1)[1]
    shown = re.search(r"```bash\n(.+?)\n```", after, re.S).group(1).strip()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert ci_lines[-1] == shown
