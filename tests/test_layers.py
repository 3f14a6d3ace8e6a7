"""The package's import graph (read with ast, nothing imported): the layers of
docs/design.md import only downwards, and no modules import each other in a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pyspark_durable"

# what each layer must not import (docs/design.md, "Layers"): codec and log are the
# bottom, side by side; spark reaches the logs only through endpoint and wal
FORBIDDEN = {
    "codec": {"log", "wal", "endpoint", "spark", "cli"},
    "log": {"codec", "wal", "endpoint", "spark", "cli"},
    "wal": {"endpoint", "spark", "cli"},
    "endpoint": {"spark", "cli"},
    "spark": {"log", "cli"},
}
LAYERS = {"codec", "log", "wal", "endpoint", "spark", "cli"}
BASE_MODULES = ("errors", "times", "secrets")  # below every layer: they import none


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(type_only: bool = False) -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line}, for imports that run (module level or in a
    function); with ``type_only``, those under ``if TYPE_CHECKING`` too."""
    mods = modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {id(n) for node in ast.walk(tree)
                       if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                       for stmt in node.body for n in ast.walk(stmt)} if not type_only else set()
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = graph.setdefault(name, {})
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package[:len(package) - node.level + 1], *filter(None, [base])])
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                found = owner(target) if target.startswith("pyspark_durable") else None
                if found and found != name:
                    edges.setdefault(found, node.lineno)
    return graph


def unit(module: str) -> str:
    """The layer (or base module) a module belongs to: its first name below the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_layers_import_only_downwards():
    """This tests that codec and log import no other layer, wal nothing above it,
    endpoint nothing from spark, spark nothing from log (only through endpoint and wal),
    and errors, times and secrets no layer at all."""
    wrong = []
    for module, edges in sorted(import_graph().items()):
        here = unit(module)
        banned = FORBIDDEN.get(here, set()) | (LAYERS if here in BASE_MODULES else set())
        wrong += [f"{module} imports {target} (line {line})"
                  for target, line in sorted(edges.items()) if unit(target) in banned]
    assert not wrong, "\n".join(wrong)


def cycles_of(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of two or more."""
    cycles, index, low, stack, on_stack = [], {}, {}, [], set()

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycle():
    """This tests that no two modules import each other, directly or through others
    (imports inside functions count; those only for type checking do not)."""
    cycles = cycles_of(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycle_in_the_log_layer_even_for_types():
    """This tests that no two modules of log/ (the Kafka package included) import each
    other, counting the imports made only for type checking: each module of a backend
    can be read knowing only the modules below it."""
    graph = import_graph(type_only=True)
    log_graph = {m: {t: n for t, n in edges.items() if unit(t) == "log"}
                 for m, edges in graph.items() if unit(m) == "log"}
    cycles = cycles_of(log_graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
