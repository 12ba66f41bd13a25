"""No import circle in src/dpsynth: the layers run one way (data -> privacy/ot/nets -> methods -> evaluate ->
report -> cli), and so do the modules inside a layer -- the params model and the target catalogue
(config/params.py imports config/targets.py, which reads the model by its shape), the report page's order and
its HTML (report/figures.py <- report/page.py <- report/html.py).

Read from the source with ``ast``, nothing imported: every ``import`` counts, at module level, under
``if TYPE_CHECKING:`` and inside a function alike (a lazy import hides a circle from Python, not from a
reader). ``from package import name`` is followed through the package's ``__init__.py`` to the module that
defines ``name``, so a package's re-exports tie no module to its siblings.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under ``root`` (a package's ``__init__.py`` is the package)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the same top-level package it imports (anywhere in its file)."""
    modules = _modules(root)
    trees = {m: ast.parse(p.read_text(encoding="utf-8"), str(p)) for m, p in modules.items()}
    top = root.name

    def absolute(module: str, node: ast.ImportFrom) -> str | None:
        if node.level == 0:
            return node.module
        base = module.split(".")
        if modules[module].name != "__init__.py":
            base.pop()
        base = base[: len(base) - node.level + 1]
        return ".".join([*base, node.module] if node.module else base)

    def defining(package: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """The module ``from package import name`` reaches: a submodule, or where the package's
        ``__init__.py`` takes ``name`` from."""
        if f"{package}.{name}" in modules:
            return f"{package}.{name}"
        if modules[package].name != "__init__.py" or package in seen:
            return package
        for node in trees[package].body:
            if isinstance(node, ast.ImportFrom):
                source = absolute(package, node)
                for alias in node.names:
                    if (alias.asname or alias.name) == name and source in modules:
                        return defining(source, alias.name, seen | {package})
        return package

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                graph[module] |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                source = absolute(module, node)
                if source is None or source.split(".")[0] != top or source not in modules:
                    continue
                graph[module] |= {defining(source, a.name) for a in node.names}
        graph[module].discard(module)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_circle_in_src_dpsynth() -> None:
    graph = import_graph(REPO / "src" / "dpsynth")
    assert len(graph) > 150  # the whole package was read
    # the two ties that were circles, now one way
    assert "dpsynth.config.targets" in graph["dpsynth.config.params"]
    assert "dpsynth.config.params" not in graph["dpsynth.config.targets"]
    assert "dpsynth.report.page" in graph["dpsynth.report.html"]
    assert {"dpsynth.report.html", "dpsynth.report.figures"} & graph["dpsynth.report.page"] == {"dpsynth.report.figures"}
    assert "dpsynth.report.page" not in graph["dpsynth.report.figures"]
    found = circles(graph)
    ties = {c: sorted(m for m in graph[c] if m in circle) for circle in found for c in circle}
    assert found == [], f"import circles: {found}; who imports whom among them: {ties} (make each one-way)"


def test_the_check_finds_a_circle_through_a_lazy_import_a_type_only_import_and_a_package_face(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.b import B\n")  # a face: re-exports b's B
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import B  # lazy, through the face\n    return B\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import f\nB = 1\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.a"}
    assert circles(graph) == [["pkg.a", "pkg.sub.b"]]
    (pkg / "sub" / "b.py").write_text("B = 1\n")
    assert circles(import_graph(pkg)) == []
