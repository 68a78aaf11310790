"""The import graph of the installed packages (idinspect, idinspect.adapters, idinspect.reports),
read from the source with :mod:`ast` (every import, at module level or inside a function): no cycle
between modules or between folders, and data flows one way, as docs/layout.md draws it:

    commands -> model facade (idinspect/model.py) -> sources, adapters -> layer  (mathematics below)
    stages (analysis, exporting, equivalence, ...) -> forms (the protocol) -> forms/per_head, forms/latent
        -> gauge, numerics, layer

with the report writers reading only the results (never audit, sources, adapters or the facade)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"idinspect": ROOT / "idinspect", "idinspect.adapters": ROOT / "adapters",
            "idinspect.reports": ROOT / "reports"}


def _modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The idinspect modules that module ``name`` imports (a name imported from a package counts
    as the submodule when there is one)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full in MODULES:
                    out.add(full)
                elif target in MODULES:
                    out.add(target)
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name in MODULES}
    return out - {name}


EDGES = {name: _imports(name, path) for name, path in MODULES.items()}


def folder(name: str) -> str:
    """The node of the folder graph: a subpackage (``idinspect.sources``), or a top-level module
    (``idinspect.errors``, ``idinspect.model``) on its own."""
    parts = name.split(".")
    if MODULES[name].name == "__init__.py" or len(parts) == 2:
        return name
    return ".".join(parts[:-1])


FOLDER_EDGES: dict[str, set[str]] = {}
for _a, _targets in EDGES.items():
    for _b in _targets:
        if folder(_a) != folder(_b):
            FOLDER_EDGES.setdefault(folder(_a), set()).add(folder(_b))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read():
    """The walk sees the imports it must (a broken walk would make every contract below vacuous)."""
    assert len(MODULES) > 150
    assert "idinspect.sources.config" in EDGES["idinspect.model"]
    assert "idinspect.adapters" in FOLDER_EDGES["idinspect.model"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_round_a_cycle():
    assert cycles(EDGES) == []


def test_no_folder_imports_itself_round_a_cycle():
    assert cycles(FOLDER_EDGES) == []


#: folder -> the folders it may import (nothing else).
ALLOWED = {
    "idinspect.layer": {"idinspect.errors"},
    "idinspect.gauge": {"idinspect.layer", "idinspect.errors"},
    "idinspect.numerics": {"idinspect.errors"},
    # each form is one folder; only the registry (idinspect.forms) names both, and the latent form
    # reuses the per-head form's export record and invariant type (never the other way round)
    "idinspect.forms.per_head": {"idinspect", "idinspect.layer", "idinspect.gauge", "idinspect.numerics",
                                 "idinspect.errors", "idinspect.rules"},
    "idinspect.forms.latent": {"idinspect", "idinspect.layer", "idinspect.gauge", "idinspect.numerics",
                               "idinspect.errors", "idinspect.forms.per_head"},
    "idinspect.forms": {"idinspect.forms.per_head", "idinspect.forms.latent", "idinspect.errors"},
    "idinspect.sources": {"idinspect.layer", "idinspect.errors", "idinspect.textsafe", "idinspect.progress"},
    "idinspect.adapters": {"idinspect.layer", "idinspect.sources", "idinspect.errors"},
    "idinspect.model": {"idinspect.adapters", "idinspect.sources", "idinspect.layer", "idinspect.errors"},
    "idinspect.reports": {"idinspect.errors", "idinspect.rules", "idinspect.textsafe"},
    "idinspect.rules": set(),
    "idinspect.errors": set(),
}


@pytest.mark.parametrize("node", sorted(ALLOWED))
def test_data_flows_one_way(node):
    extra = FOLDER_EDGES.get(node, set()) - ALLOWED[node]
    assert not extra, f"{node} imports {sorted(extra)}; see docs/layout.md for the direction of the arrows"


def test_only_the_command_line_imports_the_commands():
    importers = {a for a, targets in FOLDER_EDGES.items() if "idinspect.commands" in targets}
    assert importers <= {"idinspect.cli"}, importers
