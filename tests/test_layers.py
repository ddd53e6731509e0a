"""The layer rule: every product module imports only from the layers below it (or its own package).

    1  architecture   tpusim.arch            ISA, config, timebase, arithmetic, .tpubin, device
                                              errors and checks, the ISA executor, host transforms
    2  model          tpusim.models, tpusim.sim          } beside each other: each imports
       compiler       tpucompile                         } layer 1 and itself, never one
       rtl runner     cocotb_tests                       } another
       waveforms      waves                              }
    3  stress         stressgen               layers 1-2 and itself
    4  flow           tpusim.flow (+ the ``python -m tpusim.cosim|bench|fuzz|sweep`` entry shims)
                                              anything below; the only layer that joins layer 2-3
                                              packages together (cosim, verdict, bench, fuzz, cli)

Every ``import`` and ``from ... import`` counts, at module level and inside functions alike (an
import hidden in a function is still a dependency). Test modules (tests/, the cocotb unit
benches cocotb_tests/unit/test_*.py that pytest collects) and scripts/ are not product code and
may import anything.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("tpusim", "tpucompile", "cocotb_tests", "waves", "stressgen")

# (module prefix, component, layer): the longest matching prefix wins
COMPONENTS = (
    ("tpusim.arch", "arch", 1),
    ("tpusim.models", "model", 2),
    ("tpusim.sim", "model", 2),
    ("tpucompile", "compiler", 2),
    ("cocotb_tests", "rtl", 2),
    ("waves", "waves", 2),
    ("stressgen", "stress", 3),
    ("tpusim.flow", "flow", 4),
    ("tpusim.cosim", "flow", 4),
    ("tpusim.bench", "flow", 4),
    ("tpusim.fuzz", "flow", 4),
    ("tpusim.sweep", "flow", 4),
    ("tpusim", "arch", 1),           # the bare package (its __init__ imports nothing)
)


def component(module: str) -> tuple[str, int] | None:
    """(component, layer) of a dotted module name of this project, None for a third-party one."""
    best = None
    for prefix, comp, layer in COMPONENTS:
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, comp, layer)
    return None if best is None else best[1:]


def allowed(src: tuple[str, int], dst: tuple[str, int]) -> bool:
    """The rule: same component, or a strictly lower layer; layer 1 only itself."""
    (sc, sl), (dc, dl) = src, dst
    return sc == dc or dl < sl


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_test_module(path: Path) -> bool:
    rel = path.relative_to(REPO)
    return rel.parts[0] == "cocotb_tests" and rel.parts[1] == "unit" and rel.name.startswith("test_")


def product_modules() -> list[Path]:
    out = []
    for pkg in PACKAGES:
        out += [p for p in sorted((REPO / pkg).rglob("*.py")) if not is_test_module(p)]
    return out


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement anywhere in the file; a
    ``from pkg import name`` counts as ``pkg.name`` (it may name a submodule)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    me = module_name(path)
    pkg = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            out += [(node.lineno, f"{base}.{a.name}" if a.name != "*" else base) for a in node.names]
    return out


def violations(paths) -> list[str]:
    bad = []
    for path in paths:
        src_mod = module_name(path)
        src = component(src_mod)
        for line, target in imports_of(path):
            dst = component(target)
            if dst is None or allowed(src, dst):
                continue
            bad.append(f"{path.relative_to(REPO)}:{line}: {src_mod} ({src[0]}, layer {src[1]}) imports "
                       f"{target} ({dst[0]}, layer {dst[1]})")
    return bad


def test_no_module_imports_upward_or_sideways():
    paths = product_modules()
    assert len(paths) > 100, "the product modules were not found"
    bad = violations(paths)
    assert not bad, "layer rule broken (tests/test_layers.py docstring):\n" + "\n".join(bad)


def function_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a project module inside a function body."""
    out = []
    for f in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(f):
                if isinstance(node, ast.ImportFrom):
                    if node.level or (node.module or "").split(".")[0] in PACKAGES:
                        out.append((node.lineno, node.module or "."))
                elif isinstance(node, ast.Import):
                    out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] in PACKAGES]
    return out


def test_no_project_import_inside_a_function():
    """Dependencies are visible at the top of each module (the layer rule then holds for them
    at import time, and an import cycle shows as one)."""
    bad = [f"{p.relative_to(REPO)}:{line}: {mod}" for p in product_modules()
           for line, mod in function_level_imports(p)]
    assert not bad, "imports inside functions:\n" + "\n".join(bad)


def dynamic_imports(path: Path) -> list[int]:
    """Lines that import by name at run time (``importlib.import_module``, ``__import__``,
    ``importlib.util.spec_from_file_location``, ``sys.modules``), which the AST check cannot see."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("import_module", "spec_from_file_location"):
            out.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "__import__":
            out.append(node.lineno)
        elif (isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name)
              and node.value.id == "sys"):
            out.append(node.lineno)
    return out


def test_no_dynamic_imports_in_product_code():
    """Product code imports with import statements only, so the layer check sees every edge."""
    bad = [f"{p.relative_to(REPO)}:{line}" for p in product_modules() for line in dynamic_imports(p)]
    assert not bad, "dynamic imports:\n" + "\n".join(bad)


def test_every_product_module_has_a_layer():
    assert all(component(module_name(p)) is not None for p in product_modules())


@pytest.mark.parametrize("src, dst, ok", [
    ("tpusim.arch.isa", "tpusim.arch.config", True),
    ("tpusim.arch.binary", "tpusim.models.ddr", False),       # up
    ("tpucompile.driver", "tpusim.arch.binary", True),
    ("tpucompile.driver", "tpusim.sim", False),               # sideways in layer 2
    ("waves.archmap", "tpusim.models.trace", False),
    ("cocotb_tests.harness", "waves.reader", False),
    ("stressgen.runner", "cocotb_tests.harness", True),
    ("stressgen.runner", "tpusim.flow.verdict", False),       # up
    ("tpusim.flow.cosim", "stressgen.gen", True),
    ("tpusim.sim", "tpusim.models.tpu", True),
])
def test_rule_examples(src, dst, ok):
    assert allowed(component(src), component(dst)) is ok


def test_imports_inside_functions_are_seen(tmp_path):
    """The checker would catch an import hidden in a function body."""
    p = REPO / "tpusim" / "arch" / "_layer_probe_tmp.py"
    p.write_text("def f():\n    from tpusim.flow import cosim\n    return cosim\n")
    try:
        bad = violations([p])
    finally:
        p.unlink()
    assert len(bad) == 1 and "imports tpusim.flow.cosim (flow, layer 4)" in bad[0]


def test_hidden_imports_are_seen(tmp_path):
    """The checkers catch a function-level import (also the second name of ``import a, b``) and
    run-time imports by name."""
    p = tmp_path / "m.py"
    p.write_text("import importlib, sys\n\ndef f():\n    import os, tpusim.sim\n"
                 "    importlib.import_module('tpusim.flow')\n    __import__('waves')\n    return sys.modules\n")
    assert function_level_imports(p) == [(4, "tpusim.sim")]
    assert sorted(dynamic_imports(p)) == [5, 6, 7]
