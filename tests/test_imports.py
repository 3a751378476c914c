"""The import contract: the folders are the data flow and imports go one way (read from the source, AST).

    contract (attrib.trace, attrib.errors, attrib.bounds, attrib.output, attrib.version, attrib.threads) < names (attrib.components.patterns)
    < link < steps < components < cost < roofline < pipeline < chunked < options < analysis < rules
    < multi < report
    < app < sweep < cli

A module may import its own layer and earlier ones. `collectors` sit beside the chain: they import
only the contract modules (never the `attrib` package root, whose `analyze` is the engine: a cycle),
and only app and cli import them. No import inside a function, except of an optional or
slow-to-import dependency (torch, matplotlib; scipy.stats, ~0.5 s, which only compare and slope use,
so that `attrib analyze` does not pay it; sqlite3 and difflib, which only a SQLite trace, an unknown
--arch or a graph-capture alignment use), the one documented lazy `attrib.analyze`, or a module
of ours that only some runs need (LAZY_OURS: the chunked read of a huge trace, the steps of a
trace without step markers, the report formats other than JSON; the layers still go one way); the
CLI (attrib/cli/, the last layer) imports each command's engine in that command (a fast start).
`importlib.import_module("x")` and `__import__("x")` count as imports of x; a computed name is refused.
`examples/` and `bench/` are users: they import the public API (PUBLIC) and nothing else of ours.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = (
    "contract",
    "names",
    "link",
    "steps",
    "components",
    "cost",
    "roofline",
    "pipeline",
    "chunked",
    "options",
    "analysis",
    "rules",
    "multi",
    "report",
    "app",
    "sweep",
    "cli",
)
RANK = {name: i for i, name in enumerate(ORDER)}
CONTRACT = {"attrib", "attrib.trace", "attrib.errors", "attrib.output", "attrib.version",
            "attrib.threads", "attrib.bounds", "attrib.reads"}
# threads: a leaf every stage may run its independent parts with;
# bounds: the domain of every number read from outside (readers, cost models and the CLI check the same);
# reads: what the stages and rules read by name (the chunked read keeps it: attrib.chunked)
NAMES = {"attrib.components.patterns"}  # the one home of kernel-name patterns: a leaf every stage reads
TOP_LEVEL = {
    "__init__.py",
    "__main__.py",  # python -m attrib: the command line
    "trace.py",
    "errors.py",
    "bounds.py",
    "output.py",
    "version.py",
    "threads.py",
    "pipeline.py",
    "chunked.py",
    "reads.py",
    "options.py",
    "app.py",
    "sweep.py",
}
PACKAGES = {"link", "steps", "components", "cost", "roofline", "analysis", "multi", "report", "data",
            "cli"}
LAZY_OK = {"torch", "matplotlib", "scipy", "xlsxwriter", "ray",  # optional or slow: imported where used
           "sqlite3", "difflib",  # only a SQLite trace, an unknown --arch or a capture alignment
           "html",  # only HTML output escapes text (1-3 ms of a table's start)
           "zstandard",  # optional: only a .zst trace is decompressed with it (2 ms of every start)
           "tomllib", "tomli"}  # only an --arch-file is TOML to parse (the bundled database is JSON too)
# the public API: attrib.analyze and __version__, the errors it raises, the CLI's main, the collectors'
# load/sniff/capture/wrap (collectors/__init__.py's __all__)
PUBLIC = {"attrib", "attrib.errors", "attrib.cli", "collectors"}
FIRST_PARTY = {"attrib", "collectors", "rules"}
USERS = ("examples", "bench")
# the device's stand-in for collectors/__init__.py (copied over it there): part of collectors, not a user
STANDS_IN = {"examples/device/collectors_init_stub.py": "collectors"}
DYNAMIC = {"import_module", "__import__"}
# attrib/__init__.py resolves `analyze` on first use (module __getattr__, typed under TYPE_CHECKING) so that
# `import collectors` loads only the contract: the one import of a later layer that is allowed
EXCEPTIONS = {("attrib/__init__.py", "attrib.app"), ("attrib/__init__.py", "attrib.analysis")}
# (importer, module): ours, imported where used because only some runs need it (a fast start: a
# plain `attrib analyze` loads none of them, tests/test_start.py)
LAZY_OURS = {
    ("attrib/app.py", "attrib.steps.chunks"),  # the chunked read of a trace of BOUNDED_BYTES+
    ("attrib/app.py", "attrib.chunked"),
    ("attrib/pipeline.py", "attrib.link.graph_capture"),  # a replay trace with its capture's
    # the export and ranks commands' own
    ("attrib/app.py", "attrib.report.export"),
    ("attrib/app.py", "attrib.report.ranks"),
    ("attrib/app.py", "attrib.steps.ranks"),
    ("attrib/app.py", "collectors.kineto.spill"),
    ("attrib/chunked.py", "attrib.steps.chunks"),  # attribute_in_chunks
    # the steps of a trace without step markers, by numpy's FFT (a trace with them imports no numpy)
    ("attrib/steps/phases.py", "attrib.steps.periodic"),
    # collectors' capture, wrap and measure_device (module __getattr__): reading needs none
    *(("collectors/__init__.py", f"collectors.{m}")
      for m in ("sampled", "torch_capture", "calibrate")),
    # ranks' and trend's HTML pages take the report's stylesheet (analyze loads neither)
    ("attrib/report/ranks.py", "attrib.report.html"),
    ("attrib/report/trend_render.py", "attrib.report.html"),
    *(("attrib/report/renderers.py", f"attrib.report.{m}")
      for m in ("table", "markdown", "html", "csv_tables", "parquet_tables", "xlsx_tables")),
}
# the last layer: each command imports what it runs, so `--version` and `analyze` load only theirs
LAZY_DIR = "attrib/cli/"  # its modules


def layer(module: str) -> str | None:
    """The layer of a first-party module name; None for third-party and stdlib."""
    parts = module.split(".")
    if parts[0] == "collectors":
        return "collectors"
    if parts[0] == "rules":
        return "rules"
    if parts[0] != "attrib":
        return None
    if module == "attrib.__main__":  # python -m attrib: the command line
        return "cli"
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
            elif isinstance(child, ast.Call) and _called(child.func) in DYNAMIC:
                arg = child.args[0] if child.args else None
                name = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else COMPUTED
                out.append((name, child.lineno, in_func))
            visit(child, func)

    visit(tree, False)
    return out


COMPUTED = "<computed>"


def _called(func: ast.expr) -> str:
    """The called name: `import_module` for importlib.import_module(...) and import_module(...)."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


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
        if name == COMPUTED:
            bad.append(f"{rel}:{line}: imports a computed module name, which the contract cannot check")
            continue
        if (in_func and name.split(".")[0] not in LAZY_OK and not rel.startswith(LAZY_DIR)
                and (rel, name) not in LAZY_OURS):
            bad.append(f"{where} inside a function")
        if src == "collectors" and name == "attrib":
            bad.append(f"{where}: collectors never import the attrib package root (attrib.analyze is the "
                       "engine: a cycle); import attrib.trace / attrib.errors / attrib.output")
            continue
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


def _users() -> list[Path]:
    return sorted(p for d in USERS for p in (ROOT / d).rglob("*.py")
                  if p.relative_to(ROOT).as_posix() not in STANDS_IN)


def user_violations(path: Path, source: str) -> list[str]:
    """Every import of ours in a user of the package (examples/, bench/) outside the public API."""
    rel = path.relative_to(ROOT).as_posix()
    bad = []
    for node in ast.walk(ast.parse(source, rel)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                     for a in node.names]
        elif isinstance(node, ast.Call) and _called(node.func) in DYNAMIC:
            arg = node.args[0] if node.args else None
            names = [arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else COMPUTED]
        else:
            continue
        for name in names:
            if name == COMPUTED or (name.split(".")[0] in FIRST_PARTY and name not in PUBLIC):
                bad.append(
                    f"{rel}:{node.lineno}: imports {name}: not the public API ({', '.join(sorted(PUBLIC))})"
                )
    return bad


def test_sources_found():
    names = {module_name(p) for p in _sources()}
    assert {"attrib.trace", "attrib.pipeline", "attrib.app", "rules", "collectors.kineto"} <= names


# the one breach on main: provenance imports the package root for attrib.__version__; another branch
# removes it. Strict: once it is gone this XPASSes and fails, so the mark is deleted with it.
KNOWN_BREACH: dict[str, str] = {}  # none left: provenance reads attrib.version, not the package root


def _checked(path: Path):
    rel = path.relative_to(ROOT).as_posix()
    mark = pytest.mark.xfail(strict=True, reason=KNOWN_BREACH[rel]) if rel in KNOWN_BREACH else ()
    return pytest.param(path, marks=mark, id=rel)


@pytest.mark.parametrize("path", [_checked(p) for p in _sources()])
def test_imports_go_one_way(path):
    assert violations(path, path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", _users(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_examples_and_bench_use_the_public_api(path):
    assert user_violations(path, path.read_text(encoding="utf-8")) == []


def test_stand_ins_keep_the_contract_of_what_they_replace():
    for rel, module in STANDS_IN.items():
        path = ROOT / rel
        assert layer(module) == "collectors" and path.is_file()
        found = violations(ROOT / "collectors/__init__.py", path.read_text(encoding="utf-8"))
        assert [v for v in found if not v.endswith("inside a function")] == []  # lazy by design


def test_users_found():
    rels = {p.relative_to(ROOT).as_posix() for p in _users()}
    assert {"examples/rocprof_attribute.py", "examples/hf_capture.py", "bench/load.py"} <= rels


def test_attrib_top_level_holds_contract_pipeline_app_cli_and_stage_packages():
    top = ROOT / "attrib"
    files = {p.name for p in top.iterdir() if p.is_file() and p.suffix == ".py"}
    dirs = {p.name for p in top.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert files <= TOP_LEVEL, f"modules at attrib/ top level that belong in a stage package: {files - TOP_LEVEL}"
    assert dirs <= PACKAGES, f"folders in attrib/ outside the pipeline's layers: {dirs - PACKAGES}"
    assert {"trace.py", "errors.py", "pipeline.py", "app.py"} <= files and "cli" in dirs


# The checker itself must fail on each kind of breach: real modules with one line added.
@pytest.mark.parametrize(
    "rel, line, reason",
    [
        (
            "attrib/link/launches.py",
            "from attrib.cost.kernels import kernel_costs",
            "back edge (link -> cost",
        ),
        (
            "attrib/roofline/model.py",
            "from attrib.analysis.build import build",
            "back edge (roofline -> analysis",
        ),
        ("attrib/pipeline.py", "import rules", "back edge (pipeline -> rules"),
        (
            "attrib/cost/kernels.py",
            "from collectors import load",
            "only attrib.app and attrib.cli import collectors",
        ),
        ("rules/gemm.py", "from attrib.app import analyze", "back edge (rules -> app"),
        (
            "collectors/kineto/__init__.py",
            "from attrib.pipeline import attribute",
            "collectors import only attrib.trace",
        ),
        ("collectors/provenance.py", "import attrib", "never import the attrib package root"),
        (
            "collectors/provenance.py",
            "from attrib import __version__",
            "never import the attrib package root",
        ),
        ("attrib/steps/phases.py", "def f():\n    import polars", "inside a function"),
        (
            "attrib/components/patterns.py",
            "from attrib.link.nesting import innermost",
            "back edge (names -> link",
        ),
        ("collectors/kineto/__init__.py", "import attrib", "never import the attrib package root"),
        (
            "collectors/limits.py",
            "from attrib import __version__",
            "never import the attrib package root",
        ),
        (
            "attrib/cost/kernels.py",
            "def f():\n    importlib.import_module('attrib.cost.ops')",
            "inside a function",
        ),
        ("attrib/link/launches.py", "import_module('attrib.cost.kernels')", "back edge (link -> cost"),
        ("collectors/kineto/__init__.py", "importlib.import_module(name)", "computed module name"),
        (
            "examples/rocprof_attribute.py",
            "from attrib.pipeline import attribute",
            "imports attrib.pipeline: not the public",
        ),
        ("bench/load.py", "import rules", "imports rules: not the public"),
        (
            "bench/scale.py",
            "import importlib\nimportlib.import_module('attrib.report.table')",
            "attrib.report.table",
        ),
        ("examples/hf_capture.py", "__import__(name)", "imports <computed>"),
        ("attrib/app.py", "def f():\n    from attrib.report import html", "inside a function"),
    ],
)
def test_checker_catches_a_breach(rel, line, reason):
    path = ROOT / rel
    source = path.read_text(encoding="utf-8")
    check = user_violations if rel.startswith(USERS) else violations
    assert check(path, source) == []
    found = check(path, source + "\n" + line + "\n")
    assert len(found) == 1 and reason in found[0], found
    assert found[0].startswith(f"{rel}:{source.count(chr(10)) + 2 + line.count(chr(10))}: ")


def test_optional_heavy_dependencies_may_load_lazily():
    path = ROOT / "collectors/torch_capture.py"
    source = path.read_text(encoding="utf-8")
    assert violations(path, source + "\ndef f():\n    import torch\n") == []


def test_lazy_ours_are_imported_inside_a_function_where_listed():
    """LAZY_OURS names real lazy imports (none stale), each of an earlier layer or collectors."""
    for rel, name in LAZY_OURS:
        path = ROOT / rel
        found = imports(ast.parse(path.read_text(encoding="utf-8")), module_name(path), False)
        assert (name, True) in {(n, f) for n, _, f in found}, (rel, name)
        assert violations(path, path.read_text(encoding="utf-8")) == []
