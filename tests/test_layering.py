"""The import direction DESIGN.md promises, checked on every import of every source module.

Every module of the source packages is parsed with `ast`, and every import is checked against the table below:
top-level and lazy ones (inside functions, under `if TYPE_CHECKING:`, in `try:`), `import x`, `from x import y`,
relative imports (resolved against the module's package), and `importlib.import_module(...)` / `__import__(...)`
calls. A call with a literal name is checked by that name; a call with a computed name is checked against every
string literal in the module that names one of our modules, since any of them may be what it loads.
"""

from __future__ import annotations

import ast
import pathlib
import re
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# DESIGN.md, "Layout and layering": which of our top-level packages each one may import (itself always allowed)
ALLOWED: dict[str, frozenset[str]] = {
    "rewrite": frozenset(),
    "rules": frozenset({"rewrite"}),
    "devices": frozenset({"rewrite"}),
    "lower": frozenset({"rewrite", "rules", "devices"}),
    "tensor": frozenset({"rewrite", "rules", "devices", "lower"}),
    "benchmarks": frozenset({"rewrite", "rules", "devices", "lower", "tensor"}),
    "tests": frozenset({"rewrite", "rules", "devices", "lower", "tensor", "benchmarks"}),
}
SOURCE_PACKAGES = ("rewrite", "rules", "devices", "lower", "tensor", "benchmarks")
_IMPORT_FUNCS = {"import_module", "__import__"}


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    imported: str
    how: str

    def __str__(self) -> str:
        pkg = self.module.split(".")[0]
        allowed = ", ".join(sorted(ALLOWED[pkg])) or "nothing of ours"
        return (
            f"{self.module}:{self.line}: {self.how} of {self.imported!r} ({self.imported.split('.')[0]}/), "
            f"but {pkg}/ may import only: {allowed}"
        )


def our_packages(root: pathlib.Path = ROOT) -> set[str]:
    return {p.parent.name for p in root.glob("*/__init__.py")}


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    parts = module.split(".")
    base = parts if is_package else parts[:-1]  # a package's own name is its first anchor
    if level - 1 > len(base) - 1:
        raise ValueError(f"{module}: relative import beyond the top-level package")
    anchor = base[: len(base) - (level - 1)]
    return ".".join([*anchor, name] if name else anchor)


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def imports_of(source: str, module: str, is_package: bool = False) -> list[tuple[int, str, str]]:
    """(line, absolute module name, how) for every import in `source`, the text of module `module`."""
    tree = ast.parse(source)
    found: list[tuple[int, str, str]] = []
    dynamic_lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, "import") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
                how = "relative import"
            else:
                base, how = node.module or "", "from-import"
            # `from pkg import sub` may import a submodule: the package's layer is what matters, so the base is enough
            found.append((node.lineno, base, how))
        elif isinstance(node, ast.Call) and _call_name(node.func) in _IMPORT_FUNCS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                name = first.value
                if name.startswith("."):  # import_module(".x", package): relative to the given package
                    pkg = module if is_package else module.rpartition(".")[0]
                    name = pkg + name if name != "." else pkg
                found.append((node.lineno, name, f"{_call_name(node.func)}() call"))
            else:
                dynamic_lines.append(node.lineno)
    if dynamic_lines:
        ours = our_packages()
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if re.fullmatch(r"[A-Za-z_]\w*(\.\w+)*", text) and text.split(".")[0] in ours:
                    found.append(
                        (node.lineno, text, f"name that the computed import at line {dynamic_lines[0]} may load")
                    )
    return found


def violations_in(source: str, module: str, is_package: bool = False) -> list[Violation]:
    pkg = module.split(".")[0]
    ours = our_packages() | set(ALLOWED)
    out = []
    for line, name, how in imports_of(source, module, is_package):
        top = name.split(".")[0]
        if top in ours and top != pkg and top not in ALLOWED[pkg]:
            out.append(Violation(module, line, name, how))
    return out


def source_modules() -> list[tuple[pathlib.Path, str, bool]]:
    mods = []
    for pkg in SOURCE_PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            is_package = rel.name == "__init__"
            name = ".".join(rel.parts[:-1] if is_package else rel.parts)
            mods.append((path, name, is_package))
    return mods


def test_every_package_is_in_the_table():
    assert our_packages() <= set(ALLOWED), (
        f"add the new top-level package(s) to DESIGN.md's layering table: {our_packages() - set(ALLOWED)}"
    )
    assert set(SOURCE_PACKAGES) | {"tests"} == set(ALLOWED)


def test_source_packages_have_modules():
    counts = {pkg: sum(1 for _, name, _ in source_modules() if name.split(".")[0] == pkg) for pkg in SOURCE_PACKAGES}
    assert all(n > 0 for n in counts.values()), counts


def test_layering():
    bad = []
    for path, name, is_package in source_modules():
        bad += violations_in(path.read_text(), name, is_package)
    assert not bad, "imports against DESIGN.md's layering:\n" + "\n".join(map(str, bad))


# --- the checker itself: each synthetic module has one import against the table, in a different form


BAD_SOURCES = [
    ("rewrite.uop", False, "import rules\n", "rules"),
    ("rewrite.uop", False, "from rules.symbolic import simplify_fast\n", "rules.symbolic"),
    ("rewrite.uop", False, "def f():\n    from lower import stages\n    return stages\n", "lower"),
    (
        "rewrite.uop",
        False,
        "class A:\n    def m(self):\n        import tensor.tensor as t\n        return t\n",
        "tensor.tensor",
    ),
    (
        "rewrite.uop",
        False,
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from devices import cpu\n",
        "devices",
    ),
    ("rewrite.uop", False, "import importlib\ndef f():\n    return importlib.import_module('rules')\n", "rules"),
    ("rewrite.uop", False, "from importlib import import_module\nx = import_module('rules.eqsat')\n", "rules.eqsat"),
    ("rewrite.uop", False, "x = __import__('lower.realize')\n", "lower.realize"),
    (
        "rewrite.uop",
        False,
        "import importlib\nNAMES = {'a': 'rules.eqsat'}\ndef f(k):\n    return importlib.import_module(NAMES[k])\n",
        "rules.eqsat",
    ),
    (
        "rules.symbolic",
        False,
        "try:\n    from lower.optimize import axes\nexcept ImportError:\n    pass\n",
        "lower.optimize",
    ),
    ("rules", True, "from lower import realize\n", "lower"),
    ("devices.cpu", False, "from lower.linearize import linearize\n", "lower.linearize"),
    ("devices.cpu", False, "from tensor import Tensor\n", "tensor"),
    ("lower.stages", False, "from tensor.tensor import Tensor\n", "tensor.tensor"),
    ("lower.stages", False, "import benchmarks.runner\n", "benchmarks.runner"),
    ("tensor.nn", False, "from benchmarks import kernel_cases\n", "benchmarks"),
    ("benchmarks.runner", False, "import tests.rules.symcheck\n", "tests.rules.symcheck"),
]


@pytest.mark.parametrize(("module", "is_package", "source", "imported"), BAD_SOURCES)
def test_checker_reports_a_bad_import(module, is_package, source, imported):
    found = violations_in(source, module, is_package)
    assert [v.imported for v in found] == [imported], found
    assert module in str(found[0]) and imported in str(found[0])


def test_checker_resolves_relative_imports():
    # a relative import stays inside its top-level package (climbing out is an error, reported, never a pass)
    assert imports_of("from .divmod import divides\n", "rules.symbolic") == [(1, "rules.divmod", "relative import")]
    assert imports_of("from . import linear\n", "rules", is_package=True) == [(1, "rules", "relative import")]
    assert imports_of("from ..ops import Ops\n", "rewrite.sub.mod") == [(1, "rewrite.ops", "relative import")]
    assert (
        imports_of("import importlib\nimportlib.import_module('.eqsat', 'rules')\n", "rules", True)[-1][1]
        == "rules.eqsat"
    )
    with pytest.raises(ValueError, match="beyond the top-level"):
        violations_in("from ..lower import realize\n", "rules.symbolic")


GOOD_SOURCES = [
    ("rewrite.uop", "import math\nimport numpy as np\nfrom rewrite.ops import Ops\nfrom .dtype import dtypes\n"),
    ("rewrite.uop", "import importlib\nx = importlib.import_module('numpy')\n"),
    ("rewrite.uop", "s = 'rules are fine in strings when nothing imports by a computed name'\nt = 'rules'\n"),
    ("rules.symbolic", "from rewrite import UOp\nfrom rules.divmod import divides\n"),
    (
        "devices.cpu",
        "from rewrite.uop import UOp\nimport importlib\nm = importlib.import_module(NAMES['devices.cpu'])\n",
    ),
    ("lower.stages", "from rewrite import UOp\nfrom rules import simplify\nfrom devices import get_device\n"),
    ("tensor.tensor", "from lower.realize import realize\nfrom devices import get_device\n"),
    ("benchmarks.runner", "from tensor import Tensor\nfrom lower import stages\n"),
]


@pytest.mark.parametrize(("module", "source"), GOOD_SOURCES)
def test_checker_accepts_allowed_imports(module, source):
    assert violations_in(source, module) == []
