"""The house: the import graph of the packages, read from the source (every import, lazy and
type-only ones included), holds the layering described in docs/architecture.md."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("constraints", "searcher")
MAX_LINES = 450  # "no module over ~400 lines": the hard limit a test holds


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Project modules ``name`` imports (``from a.b import c`` names a.b.c when that is a module)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _imports(p, m, known) for m, p in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if n.startswith(m + ".") or m.startswith(n + "."):
                continue  # a package and its own modules: importing the package runs __init__ only
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_circles(graph):
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_physics_never_imports_the_search(graph):
    bad = {
        m: sorted(i for i in imps if i.startswith("searcher"))
        for m, imps in graph.items()
        if m.startswith("constraints")
    }
    assert not {m: v for m, v in bad.items() if v}


def test_cli_is_imported_by_nothing_below_it(graph):
    bad = {
        m: sorted(i for i in imps if i.startswith("searcher.cli"))
        for m, imps in graph.items()
        if not m.startswith("searcher.cli")
    }
    assert not {m: v for m, v in bad.items() if v}


# Each layer may import only the layers listed (and constraints, and itself). Bottom up: the
# search core; the shared modules (inputs, files, terminal); truth, emitters and fleet; scenarios;
# the CLI on top, which may import everything and so has no rule.
LAYERS: dict[str, tuple[str, ...]] = {
    "searcher.search": ("searcher.search",),
    "searcher.terminal": ("searcher.terminal", "searcher.plain_text"),
    "searcher.plain_text": ("searcher.plain_text",),
    "searcher.files": ("searcher.files",),
    "searcher.validate": ("searcher.validate",),
    "searcher.wrappers": ("searcher.wrappers",),
    "searcher.hub": ("searcher.hub", "searcher.wrappers"),
    "searcher.inputs": ("searcher.inputs", "searcher.search", "searcher.validate", "searcher.hub"),
    "searcher.check": (
        "searcher.check",
        "searcher.emitters",
        "searcher.search",
        "searcher.inputs",
        "searcher.hub",
        "searcher.validate",
        "searcher.files",
    ),
    "searcher.truth": (
        "searcher.truth",
        "searcher.validate",
        "searcher.search",
        "searcher.inputs",
        "searcher.terminal",
        "searcher.files",
    ),
    "searcher.emitters": (
        "searcher.emitters",
        "searcher.validate",
        "searcher.search",
        "searcher.files",
        "searcher.inputs",
        "searcher.terminal",
    ),
    "searcher.fleet": (
        "searcher.fleet",
        "searcher.validate",
        "searcher.search",
        "searcher.files",
        "searcher.terminal",
        "searcher.inputs",
    ),
    "searcher.report": ("searcher.report", "searcher.search", "searcher.files"),
    "searcher.scenarios": (
        "searcher.scenarios",
        "searcher.validate",
        "searcher.search",
        "searcher.fleet",
        "searcher.inputs",
        "searcher.terminal",
        "searcher.truth",
    ),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layers_import_only_what_is_below_them(graph, layer):
    allowed = LAYERS[layer]
    bad = {
        m: sorted(
            i
            for i in imps
            if i.startswith("searcher") and not i.startswith(allowed) and i != "searcher"
        )
        for m, imps in graph.items()
        if m == layer or m.startswith(layer + ".")
    }
    assert not {m: v for m, v in bad.items() if v}


def test_every_room_has_a_layer_rule():
    rooms = {
        f"searcher.{p.stem if p.suffix else p.name}"
        for p in (ROOT / "searcher").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert rooms - set(LAYERS) == {"searcher.cli"}, sorted(rooms - set(LAYERS))


def test_no_module_is_too_long():
    long = {
        m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_tests_mirror_the_packages():
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name != "data"}
    subpackages = {p.parent.name for p in (ROOT / "searcher").glob("*/__init__.py")} | {
        "constraints"
    }
    assert subpackages <= folders | {"__pycache__"}, sorted(subpackages - folders)
