"""The import contract: the folders are the data flow and imports go one way (read from the source, AST).

    contract (attrib.trace, attrib.errors, attrib.version) < names (attrib.components.patterns)
    < link < steps < components < cost < roofline < pipeline < report < rules < app < cli

A module may import its own layer and earlier ones. `collectors` sit beside the chain: they import
only the contract, and only app and cli import them. No import inside a function, except of an
optional or slow-to-import dependency (torch, matplotlib; scipy.stats, ~0.5 s, which only compare and
slope use, so that `attrib analyze` does not pay it) or the one documented lazy `attrib.analyze`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = ("contract", "names", "link", "steps", "components", "cost", "roofline", "pipeline", "report", "rules", "app", "cli")
RANK = {name: i for i, name in enumerate(ORDER)}
CONTRACT = {"attrib", "attrib.trace", "attrib.errors", "attrib.version"}
NAMES = {"attrib.components.patterns"}  # the one home of kernel-name patterns: a leaf every stage reads
TOP_LEVEL = {"__init__.py", "trace.py", "errors.py", "version.py", "pipeline.py", "app.py", "cli.py"}
PACKAGES = {"link", "steps", "components", "cost", "roofline", "report", "data"}
LAZY_OK = {"torch", "matplotlib", "scipy"}
# attrib/__init__.py resolves `analyze` on first use (module __getattr__, typed under TYPE_CHECKING) so that
# `import collectors` loads only the contract: the one import of a later layer that is allowed
EXCEPTIONS = {("attrib/__init__.py", "attrib.app")}


def layer(module: str) -> str | None:
    """The layer of a first-party module name; None for third-party and stdlib."""
    parts = module.split(".")
    if parts[0] == "collectors":
        return "collectors"
    if parts[0] == "rules":
        return "rules"
    if parts[0] != "attrib":
        return None
    if module in CONTRACT:
        return "contract"
    if module in NAMES:
        return "names"
    if parts[1] in RANK:
        return parts[1]
    return "unknown"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of a parsed module."""
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_func: bool) -> None:
        for child in ast.iter_child_nodes(node):
            func = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_func) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module != "__future__":
                base = child.module or ""
                if child.level:
                    pkg = module.split(".")[: len(module.split(".")) - child.level + (1 if is_package else 0)]
                    base = ".".join(pkg + ([base] if base else []))
                for a in child.names:
                    # `from attrib import analyze` is the application; `from pkg import submodule` is that module
                    if base == "attrib" and a.name != "__version__":
                        out.append(("attrib.app", child.lineno, in_func))
                    elif _is_module(f"{base}.{a.name}"):
                        out.append((f"{base}.{a.name}", child.lineno, in_func))
                    else:
                        out.append((base, child.lineno, in_func))
            visit(child, func)

    visit(tree, False)
    return out


def _is_module(name: str) -> bool:
    p = ROOT.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def violations(path: Path, source: str) -> list[str]:
    """Every import of `source` (the text of the module at `path`) that breaks the contract, as file:line."""
    module = module_name(path)
    rel = path.relative_to(ROOT).as_posix()
    src = layer(module)
    bad = []
    for name, line, in_func in imports(ast.parse(source, rel), module, path.name == "__init__.py"):
        dst = layer(name)
        where = f"{rel}:{line}: imports {name}"
        if (rel, name) in EXCEPTIONS:
            continue
        if in_func and name.split(".")[0] not in LAZY_OK:
            bad.append(f"{where} inside a function")
        if dst is None or dst == src:
            continue
        if dst == "unknown":
            bad.append(f"{where}: a module outside the pipeline's layers (add its folder to ORDER)")
        elif src == "collectors":
            if dst != "contract" or name == "attrib":  # the root resolves attrib.analyze: a cycle
                bad.append(f"{where}: collectors import only attrib.trace / attrib.errors / attrib.version")
        elif dst == "collectors":
            if src not in ("app", "cli"):
                bad.append(f"{where}: only attrib.app and attrib.cli import collectors")
        elif src == "unknown" or RANK[dst] > RANK[src]:
            bad.append(f"{where}: a back edge ({src} -> {dst}; order: {' < '.join(ORDER)})")
    return bad


def _sources() -> list[Path]:
    return sorted(p for d in ("attrib", "rules", "collectors") for p in (ROOT / d).rglob("*.py"))


def test_sources_found():
    names = {module_name(p) for p in _sources()}
    assert {"attrib.trace", "attrib.pipeline", "attrib.app", "rules", "collectors.kineto"} <= names


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_imports_go_one_way(path):
    assert violations(path, path.read_text(encoding="utf-8")) == []


def test_attrib_top_level_holds_contract_pipeline_app_cli_and_stage_packages():
    top = ROOT / "attrib"
    files = {p.name for p in top.iterdir() if p.is_file() and p.suffix == ".py"}
    dirs = {p.name for p in top.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert files <= TOP_LEVEL, f"modules at attrib/ top level that belong in a stage package: {files - TOP_LEVEL}"
    assert dirs <= PACKAGES, f"folders in attrib/ outside the pipeline's layers: {dirs - PACKAGES}"
    assert {"trace.py", "errors.py", "pipeline.py", "app.py", "cli.py"} <= files


# The checker itself must fail on each kind of breach: real modules with one line added.
@pytest.mark.parametrize("rel, line, reason", [
    ("attrib/link/launches.py", "from attrib.cost.kernels import kernel_costs", "back edge (link -> cost"),
    ("attrib/roofline/model.py", "from attrib.report.document import document", "back edge (roofline -> report"),
    ("attrib/pipeline.py", "import rules", "back edge (pipeline -> rules"),
    ("attrib/cost/kernels.py", "from collectors import load", "only attrib.app and attrib.cli import collectors"),
    ("rules/gemm.py", "from attrib.app import analyze", "back edge (rules -> app"),
    ("collectors/kineto.py", "from attrib.pipeline import attribute", "collectors import only attrib.trace"),
    ("collectors/provenance.py", "import attrib", "collectors import only attrib.trace"),
    ("collectors/provenance.py", "from attrib import __version__", "collectors import only attrib.trace"),
    ("attrib/steps/phases.py", "def f():\n    import polars", "inside a function"),
    ("attrib/components/patterns.py", "from attrib.link.nesting import innermost", "back edge (names -> link"),
])
def test_checker_catches_a_breach(rel, line, reason):
    path = ROOT / rel
    source = path.read_text(encoding="utf-8")
    assert violations(path, source) == []
    found = violations(path, source + "\n" + line + "\n")
    assert len(found) == 1 and reason in found[0], found
    assert found[0].startswith(f"{rel}:{source.count(chr(10)) + 2 + line.count(chr(10))}: ")


def test_optional_heavy_dependencies_may_load_lazily():
    path = ROOT / "collectors/torch_capture.py"
    source = path.read_text(encoding="utf-8")
    assert violations(path, source + "\ndef f():\n    import torch\n") == []
