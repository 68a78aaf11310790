"""The declared Python floor (``requires-python`` in pyproject.toml) is true of the package's code.

Only one Python runs here, so the check is static: vermin (a test dependency) knows, for every
standard-library module, member, keyword argument and syntax form, the version that introduced
it, and reports whatever the installed package code (idinspect/, adapters/, reports/) uses that
the floor lacks. A use guarded by a fallback import is marked ``# novermin`` on its line; the
fallback itself must then be a declared dependency for the versions that take it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_SOURCES = ("idinspect", "adapters", "reports")


def _pyproject() -> str:
    return (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def declared_floor() -> str:
    """``"3.10"`` from ``requires-python = ">=3.10"``."""
    match = re.search(r'^requires-python\s*=\s*">=\s*(\d+\.\d+)"', _pyproject(), re.M)
    assert match, "pyproject.toml must declare requires-python as \">=X.Y\""
    return match.group(1)


def vermin(*args: str) -> subprocess.CompletedProcess:
    runner = "import sys; from vermin import main; sys.argv[0] = 'vermin'; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", runner, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_vermin_is_installed_and_finds_violations(tmp_path):
    """The check can fail: a use of tomllib (3.11) is a violation against a 3.10 floor."""
    (tmp_path / "uses_311.py").write_text("import tomllib\n")
    probe = vermin("--no-tips", "--violations", "-t=3.10-", str(tmp_path))
    assert "No module named" not in probe.stderr, "vermin is missing: pip install -e '.[test]'"
    assert probe.returncode != 0 and "tomllib" in probe.stdout


def test_package_code_runs_on_the_declared_floor():
    floor = declared_floor()
    result = vermin("--no-tips", "--violations", "--eval-annotations", f"-t={floor}-",
                    *(str(ROOT / p) for p in PACKAGE_SOURCES))
    assert result.returncode == 0, f"code needs a newer Python than requires-python >={floor}:\n{result.stdout}{result.stderr}"


def test_fallbacks_below_the_stdlib_are_declared_dependencies():
    """Each ``# novermin`` fallback import (``import tomli as tomllib``) names a package that
    pyproject declares for the Python versions that need it."""
    text = _pyproject()
    for src in PACKAGE_SOURCES:
        for path in (ROOT / src).rglob("*.py"):
            for fallback in re.findall(r"^\s*import (\w+) as \w+\s*#", path.read_text(encoding="utf-8"), re.M):
                assert re.search(rf'"{fallback}[^"]*;\s*python_version\s*<', text), (
                    f"{path.relative_to(ROOT)} falls back to {fallback}, which pyproject.toml does not declare "
                    "for the Python versions that lack the standard module")
