"""The README and docs/ stay true: every ```python block runs, every `package.module.name` they cite imports,
and every file path they cite exists. A block preceded by a `<!-- not run: why -->` line is skipped."""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("rewrite", "rules", "lower", "devices", "tensor")


def _blocks() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for i, m in enumerate(re.finditer(r"(?:^(<!-- not run[^>]*-->)\n)?^```python\n(.*?)^```", text, re.S | re.M)):
            if m.group(1) is None:
                out.append((f"{page.relative_to(ROOT)}#{i}", m.group(2)))
    return out


BLOCKS = _blocks()


def test_the_pages_have_blocks() -> None:
    assert len([b for b in BLOCKS if b[0].startswith("README")]) >= 4 and len(BLOCKS) >= 8


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_python_block_runs(where: str, code: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "TRACE", "DEVICE")}
    r = subprocess.run([sys.executable, "-"], input=code, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"{where} failed:\n{r.stderr[-3000:]}"


def _cited() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # inline code only
        out += [(page.name, c) for c in re.findall(r"`([^`\n]+)`", text)]
    return out


CITED = _cited()
NAMES = sorted({(p, m.group(0)) for p, c in CITED if (m := re.match(rf"(?:{'|'.join(PACKAGES)})(?:\.\w+)+", c))})
PATHS = sorted({(p, c) for p, c in CITED if re.fullmatch(r"[\w.-]+/[\w/.-]+\.(py|md|sh|toml)", c)})


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for attr in parts[k:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_citations_found() -> None:
    assert len(NAMES) >= 20 and len(PATHS) >= 15


@pytest.mark.parametrize(("page", "dotted"), NAMES, ids=[f"{p}:{d}" for p, d in NAMES])
def test_cited_name_resolves(page: str, dotted: str) -> None:
    try:
        _resolve(dotted)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{page} cites `{dotted}`, which does not resolve: {e}")


@pytest.mark.parametrize(("page", "path"), PATHS, ids=[f"{p}:{q}" for p, q in PATHS])
def test_cited_path_exists(page: str, path: str) -> None:
    base = ROOT / "docs" if page != "README.md" and (ROOT / "docs" / path).exists() else ROOT
    assert (base / path).exists(), f"{page} cites {path}, which is not in the repository"
