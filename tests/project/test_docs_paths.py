"""Repository paths and imports that the README and docs/ name are true: every `path/with/a.suffix`
or folder/ in backquotes exists, and every ``from idinspect... import ...`` / ``import idinspect...``
line in them imports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("idinspect/", "adapters/", "reports/", "tests/", "bench/", "docs/", "examples/", "requirements/", ".ci/")
PATH = re.compile(r"`((?:" + "|".join(re.escape(t) for t in TOP) + r")[A-Za-z0-9_./-]*)`")
#: What runs create (benchmark caches): named in the docs, absent from a fresh checkout.
GENERATED = ("bench/cache/",)
ROW = re.compile(r"^\| `((?:idinspect|reports|adapters)/[\w/]*)` [^|]*\|(.*)\|\s*$", re.M)
IMPORT = re.compile(r"^\s*(?:>>>\s*)?(from (idinspect[\w.]*) import ([\w, ()]+)|import (idinspect[\w.]*))", re.M)


def _paths() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for m in PATH.finditer(doc.read_text(encoding="utf-8")):
            path = m.group(1).rstrip(".,")
            if "*" in path or "<" in path or "{" in path or path.startswith(GENERATED):
                continue
            out.append((doc.name, path))
        for row in ROW.finditer(doc.read_text(encoding="utf-8")):      # a layout table: `dir/` | ... `file.py`
            folder, rest = row.group(1), row.group(2)
            out += [(doc.name, folder + name) for name in re.findall(r"`([\w-]+\.py)`", rest)]
    return sorted(set(out))


def _imports() -> list[tuple[str, str, list[str]]]:
    out = []
    for doc in DOCS:
        for m in IMPORT.finditer(doc.read_text(encoding="utf-8")):
            module = m.group(2) or m.group(4)
            names = [n.strip(" ()") for n in (m.group(3) or "").split(",") if n.strip(" ()")]
            out.append((doc.name, module, names))
    return out


@pytest.mark.parametrize("doc, path", _paths())
def test_named_path_exists(doc, path):
    assert (ROOT / path).exists(), f"{doc} names {path}, which does not exist"


@pytest.mark.parametrize("doc, module, names", _imports())
def test_named_import_works(doc, module, names):
    mod = importlib.import_module(module)
    for name in names:
        assert hasattr(mod, name), f"{doc}: from {module} import {name} fails"


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return sorted(set(re.findall(r"`(idinspect [^`]*)`", text)))


@pytest.mark.parametrize("command", _readme_commands())
def test_readme_command_parses(command):
    """Every `idinspect ...` the README shows names a real command, and every --option it shows is in
    that command's --help."""
    from tests.support.cli import run_cli

    words = command.replace("\\|", " ").split()[1:]
    res = run_cli("--help")
    assert res.code == 0
    commands = set(re.findall(r"^\s{2}(\w+)\s", res.stdout, re.M))
    assert {"audit", "export", "verify", "compare", "survey"} <= commands, res.stdout
    sub = words[0] if words and words[0] in commands else "inspect"
    help_ = run_cli(sub, "--help")
    assert help_.code == 0, help_.stderr
    for option in (w for w in words if w.startswith("--")):
        assert option in help_.stdout, f"README shows `{command}`, but `idinspect {sub} --help` has no {option}"


def test_readme_commands_are_found():
    assert len(_readme_commands()) >= 8
