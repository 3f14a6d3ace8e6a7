"""The package's import graph (read with ast, nothing imported): the layers of
docs/design.md import only downwards, and no modules import each other in a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pyspark_durable"

# what each layer must not import (docs/design.md, "Layers"): codec and log are the
# bottom, side by side; spark reaches the logs only through endpoint and wal; showcase
# (demo, local broker, notebook) is on top beside cli, which starts it, and no layer
# a job runs on imports it
FORBIDDEN = {
    "codec": {"log", "wal", "endpoint", "spark", "cli", "showcase"},
    "log": {"codec", "wal", "endpoint", "spark", "cli", "showcase"},
    "wal": {"endpoint", "spark", "cli", "showcase"},
    "endpoint": {"spark", "cli", "showcase"},
    "spark": {"log", "cli", "showcase"},
    "showcase": {"cli"},
}
LAYERS = {"codec", "log", "wal", "endpoint", "spark", "cli", "showcase"}
BASE_MODULES = ("errors", "times", "secrets", "config_files")  # below every layer: they import none


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(type_only: bool = True) -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line}: module level or in a function, and with
    ``type_only`` those only for type checking too (they still tie two modules' designs)."""
    mods = modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        typing_only = set() if type_only else {
            id(n) for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for stmt in node.body for n in ast.walk(stmt)}
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
    no layer below showcase imports it, showcase nothing from cli, and errors, times
    and secrets no layer at all."""
    wrong = []
    for module, edges in sorted(import_graph().items()):
        here = unit(module)
        banned = FORBIDDEN.get(here, set()) | (LAYERS if here in BASE_MODULES else set())
        wrong += [f"{module} imports {target} (line {line})"
                  for target, line in sorted(edges.items()) if unit(target) in banned]
    assert not wrong, "\n".join(wrong)


def test_the_package_root_holds_only_layers_and_base_modules():
    """This tests that each module at the package's top is a layer of the map above, a
    base module or the package's own ``__init__``/``__main__``: try-it code lives in
    showcase/, so a new module at the top must first take a place in the layers."""
    top = {unit(module) for module in modules()} - {""}
    assert top - LAYERS - set(BASE_MODULES) == {"__main__"}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The modules that import each other in a loop (Tarjan's strongly connected
    components of more than one module)."""
    found, index, low, stack, on_stack = [], {}, {}, [], set()

    def visit(v: str) -> None:
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
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle():
    """This tests that no two modules import each other, directly or through others
    (imports inside functions count, and so do those only for type checking: they still
    tie two modules' designs)."""
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


# wal/'s rings (pyspark_durable/wal/__init__.py): each imports only the rings before it
WAL_RINGS = ("format", "replay", "", "upkeep")  # "": the modules at wal/'s top


def wal_ring(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["pyspark_durable", "wal"] or len(parts) == 2:
        return None  # outside wal/, or wal/__init__.py (the face that hands names on)
    return WAL_RINGS.index(parts[2] if parts[2] in WAL_RINGS else "")


def test_wal_rings_import_only_inwards():
    """This tests that in wal/, format/ imports nothing else of the WAL, replay/ only
    format/, the top modules (namespace and its faces) no upkeep/, and that nothing below
    upkeep/ imports it (type-only imports included)."""
    wrong = []
    for module, edges in sorted(import_graph().items()):
        ring = wal_ring(module)
        if ring is None:
            continue
        wrong += [f"{module} imports {target} (line {line})" for target, line in sorted(edges.items())
                  if (wal_ring(target) or 0) > ring]
    assert not wrong, "\n".join(wrong)


def test_the_wal_module_map_names_every_module():
    """This tests that the module map in wal/__init__.py's docstring has one line for each
    module of wal/ and none for a module that is gone."""
    import pyspark_durable.wal as wal

    lines = (wal.__doc__ or "").splitlines()
    rules = [n for n, line in enumerate(lines) if line.startswith("=====")]
    rows = {line.split()[0].strip("`") for line in lines[rules[1] + 1:rules[-1]]}
    found = {name.removeprefix("pyspark_durable.wal.") for name, path in modules().items()
             if name.startswith("pyspark_durable.wal.") and path.name != "__init__.py"}
    assert rows == found, f"missing from the map: {sorted(found - rows)}; " \
                          f"not modules: {sorted(rows - found)}"


SHOWCASE_MAPS = ("showcase", "showcase/demo", "showcase/localkafka")


def test_the_showcase_module_maps_name_every_module():
    """This tests that the module map in the docstring of showcase/, showcase/demo/ and
    showcase/localkafka/ has one row for each module and sub-package there (``__init__``
    and ``__main__`` aside) and none for one that is gone."""
    for package in SHOWCASE_MAPS:
        folder = PACKAGE / package
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        lines = doc.splitlines()
        rules = [n for n, line in enumerate(lines) if line.startswith("=====")]
        rows = {line.split()[0].strip("`").rstrip("/") for line in lines[rules[1] + 1:rules[-1]]
                if line and not line[0].isspace()}
        found = {p.stem for p in folder.glob("*.py")} | \
            {p.parent.name for p in folder.glob("*/__init__.py")}
        aside = {"__init__", "__main__"}
        assert rows - aside == found - aside, f"{package}: missing from the map: " \
            f"{sorted(found - rows - aside)}; not modules: {sorted(rows - found - aside)}"


def kafka_map() -> list[str]:
    """The modules log/kafka/__init__.py's docstring maps, in its order (top first)."""
    import pyspark_durable.log.kafka as kafka

    lines = (kafka.__doc__ or "").splitlines()
    rules = [n for n, line in enumerate(lines) if line.startswith("=====")]
    return [line.split()[0].strip("`") for line in lines[rules[1] + 1:rules[2]]]


def test_the_kafka_module_map_names_every_module():
    """This tests that the module map in log/kafka/__init__.py's docstring has one line for
    each module of log/kafka/ (the clients' packages' modules too) and none for a module
    that is gone."""
    prefix = "pyspark_durable.log.kafka."
    rows = kafka_map()
    found = {name.removeprefix(prefix) for name, path in modules().items()
             if name.startswith(prefix) and path.name != "__init__.py"}
    assert len(rows) == len(set(rows)), f"named twice: {sorted(r for r in rows if rows.count(r) > 1)}"
    assert set(rows) == found, f"missing from the map: {sorted(found - set(rows))}; " \
                               f"not modules: {sorted(set(rows) - found)}"


def test_the_kafka_module_map_lists_each_module_above_what_it_imports():
    """This tests that each module of log/kafka/'s map imports only modules listed below
    it (type-only imports included), so the map reads from the store down."""
    prefix = "pyspark_durable.log.kafka."
    place = {name: n for n, name in enumerate(kafka_map())}
    wrong = [f"{module} imports {target} (line {line}), listed above it"
             for module, edges in sorted(import_graph().items())
             if module.removeprefix(prefix) in place
             for target, line in sorted(edges.items())
             if place.get(target.removeprefix(prefix), len(place)) <= place[module.removeprefix(prefix)]]
    assert not wrong, "\n".join(wrong)


MAX_FUNCTION_LINES = 60


def test_no_function_in_the_package_is_over_60_lines():
    """This tests that every function of the package (methods and nested functions too)
    spans at most 60 lines from its ``def`` to its last line: a longer one is split along
    a real seam, so each can be read whole."""
    long = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} "
            f"({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(PACKAGE.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, "functions over 60 lines:\n" + "\n".join(long)
