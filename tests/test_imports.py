"""The packager's modules import one another without a circle.

The graph is built from the source with ``ast``: every import counts, at the top of a module,
inside a function or under ``if TYPE_CHECKING`` (an import moved into a function to dodge a
circle still makes the circle), and relative imports are resolved against the module's
package. ``from pkg import name`` points at the submodule ``pkg.name`` when there is one,
else at ``pkg`` itself.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "packager"


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Module name -> file, for every module of the package (a package is its __init__)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name an ``from X import ...`` reads from."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # A package's own __init__ is its level-1 anchor; a plain module's is its parent.
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(node, module, is_package)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.add(sub if sub in modules else source)
    return {t for t in targets if t in modules and t != module}


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    modules = module_files(root, package)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path that returns to its start) per strongly connected component of
    more than one module, found with Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, c) for c in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, within it."""
    start = min(component)
    came_from = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in component {sorted(component)}")


def test_resolves_relative_and_function_level_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n    from .. import c\n")
    (pkg / "c.py").write_text("import pkg.sub\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.sub.b"},
        "pkg.sub": {"pkg.sub.b"},
        "pkg.sub.b": {"pkg.a", "pkg.c"},
        "pkg.c": {"pkg.sub"},
    }
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]


def test_packager_has_no_import_cycles():
    cycles = find_cycles(import_graph())
    shown = "\n".join(" -> ".join(c) for c in cycles)
    assert not cycles, f"import cycles in {PACKAGE}:\n{shown}"
