"""The layout's rules (docs/ARCHITECTURE.md): no import circle, small modules, a thin app.py, and a
README file tree that matches the repository.

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


def test_the_cycle_finder_finds_a_lazy_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle_between_project_modules():
    graph = import_graph()
    assert "pipeline.conversation.messages" in graph and graph["pipeline.training.collate"] >= {"pipeline.conversation.messages"}
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


def test_only_the_model_module_names_gemma3n_classes():
    pattern = re.compile(r"\bGemma3n\w*(ForConditionalGeneration|Model|Processor|AudioEncoder|TextModel)\b")
    allowed = {"pipeline.model.loading", "pipeline.model.tiny_model"}
    offenders = [
        name
        for name, path in project_modules().items()
        if name not in allowed and pattern.search(re.sub(r'"""[\s\S]*?"""|#.*', "", path.read_text(encoding="utf-8")))
    ]
    assert not offenders, offenders


def readme_tree_paths() -> list[str]:
    """The paths listed in the README's file-tree block (the first column of each line)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Files\n(?:(?!```).)*?\n```\n(.*?)```", text, re.S)
    assert block, "README.md has no '## Files' section with a fenced file tree"
    return [line.split()[0] for line in block.group(1).splitlines() if line.strip() and not line.startswith(" ")]


def test_readme_file_tree_matches_the_repository():
    listed = readme_tree_paths()
    missing = [p for p in listed if not (ROOT / p).exists()]
    assert not missing, f"README lists paths that do not exist: {missing}"
    # Every module of the project has its own line, so a reader finds any behaviour from the tree.
    unlisted = [
        str(path.relative_to(ROOT))
        for path in project_modules().values()
        if path.name != "__init__.py" and str(path.relative_to(ROOT)) not in listed
    ]
    assert not unlisted, f"modules missing from the README's file tree: {unlisted}"
