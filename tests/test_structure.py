"""The package's layers are real: imports run one way, down the layers; no import circles; barrier and phase logic
only in the pipeline layer; kernel files short enough to read as their roles."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tilepipe"
LAYERS = ["_version", "_text", "pipeline", "schedulers", "kernels", "examples", "probes", "host", "api", "nn",
          "distributed", "verify", "tools", "__init__", "__main__"]
"""Bottom to top: a module may import its own layer or the ones below it. Each folder is a layer; kernels and
examples are one level (neither imports the other)."""
LEVEL = {layer: LAYERS.index(layer) for layer in LAYERS} | {"examples": LAYERS.index("kernels")}
KERNEL_FILE_LINES = 200


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> set[str]:
    """Every tilepipe module `path` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tilepipe"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tilepipe"))
    return {m for m in found if m in MODULES}


GRAPH = {module: _imports(path) for module, path in MODULES.items()}


def test_every_module_is_in_a_layer():
    assert {_layer(m) for m in MODULES} <= set(LEVEL), {_layer(m) for m in MODULES} - set(LEVEL)


def test_imports_run_down_the_layers():
    upward = [(m, i) for m, imported in GRAPH.items() for i in imported
              if i != "tilepipe" and LEVEL[_layer(i)] > LEVEL[_layer(m)]]
    assert not upward, upward


def test_no_import_circles():
    done, path, circles = set(), [], []

    def visit(module):
        if module in path:
            circles.append(path[path.index(module):] + [module])
            return
        if module in done:
            return
        path.append(module)
        for imported in GRAPH[module]:
            visit(imported)
        path.pop()
        done.add(module)

    for module in GRAPH:
        visit(module)
    # a package's face importing its own submodules is not a circle
    circles = [c for c in circles if not any(a == b.rsplit(".", 1)[0] for a, b in zip(c, c[1:]))]
    assert not circles, circles


@pytest.mark.parametrize("layer", ["kernels", "schedulers"])
def test_barrier_and_phase_logic_only_in_the_pipeline_layer(layer):
    """Roles use pipelines; they never touch an mbarrier, a phase bit or a fence themselves."""
    for path in (PACKAGE / layer).rglob("*.py"):
        names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
        assert not names & {"mbarrier", "phase", "fence_async_shared"}, (path.name, names & {"mbarrier", "phase"})


def test_kernel_files_read_as_their_roles():
    long = {p.name: n for p in (PACKAGE / "kernels").glob("*.py") if (n := len(p.read_text().splitlines())) >
            KERNEL_FILE_LINES}
    assert not long, long


def test_kernel_cache_key_hashes_only_device_side_code():
    """A kernel's cache key changes with the code it is built from, not with a benchmark or a host-side edit."""
    from tilepipe.pipeline.ring import device_sources

    folders = {path.relative_to(PACKAGE).parts[0] for path in device_sources()}
    assert folders == {"pipeline", "schedulers", "kernels", "examples"}
    assert len(device_sources()) == len([p for f in folders for p in (PACKAGE / f).rglob("*.py")])

