"""Packaging: ``adapters/`` and ``reports/`` install as ``idinspect.adapters`` / ``idinspect.reports``
(setuptools ``package-dir``), nothing installs a top-level ``adapters``, a built wheel carries every
package and the schemas and runs on its own, and both entry points (``idinspect``,
``python -m idinspect``) work.

The wheel is built from a copy of the source tree (so nothing is written into the checkout) in a
subprocess, without network or build isolation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: source folder -> installed package path
PACKAGE_ROOTS = {"idinspect": "idinspect", "adapters": "idinspect/adapters", "reports": "idinspect/reports"}


def _run(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env.update(HF_HUB_OFFLINE="1", NO_COLOR="1", PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, **kwargs)


def _expected_files() -> set[str]:
    """Every module of every source package, and the schemas, as installed paths."""
    expected = set()
    for src, dst in PACKAGE_ROOTS.items():
        for py in (ROOT / src).rglob("*.py"):
            if "__pycache__" in py.parts or not (py.parent / "__init__.py").is_file():
                continue
            expected.add(f"{dst}/{py.relative_to(ROOT / src).as_posix()}")
    expected |= {f"idinspect/schemas/{p.name}" for p in (ROOT / "idinspect" / "schemas").glob("*.json")}
    return expected


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in PACKAGE_ROOTS:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    build = _run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                  "print(build_meta.build_wheel(sys.argv[1]))", str(out)], cwd=src, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (path,) = out.glob("idinspect-*.whl")
    return path


@pytest.fixture(scope="module")
def unpacked(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    return target


def test_wheel_contains_every_package_and_no_top_level_adapters(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    expected = _expected_files()
    assert {"idinspect/adapters/__init__.py", "idinspect/adapters/bert.py", "idinspect/reports/__init__.py",
            "idinspect/commands/__init__.py", "idinspect/cli.py", "idinspect/__main__.py"} <= expected
    missing = sorted(expected - names)
    assert not missing, f"not in the wheel (add the package to [tool.setuptools] packages): {missing}"
    top = {n.split("/")[0] for n in names}
    assert top == {"idinspect", f"idinspect-{version('idinspect')}.dist-info"}, top
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(entry_points).decode()
    assert "[console_scripts]" in text and "idinspect = idinspect.entry:run" in text


_FROM_WHEEL = textwrap.dedent("""
    import importlib.util, json, sys
    site = sys.argv[1]
    # drop the editable install's finder and path hooks, then put the unpacked wheel first
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
    sys.path[:] = [site] + [p for p in sys.path if "__editable__" not in p and p not in ("", ".")]
    import idinspect, idinspect.adapters, idinspect.reports, idinspect.commands, idinspect.cli
    from idinspect.adapters import supported_model_types
    files = {m.__name__: m.__file__ for m in (idinspect, idinspect.adapters, idinspect.reports, idinspect.commands)}
    spec = importlib.util.find_spec("adapters")
    print(json.dumps({"files": files, "adapters": spec.origin if spec else None,
                      "types": supported_model_types(), "version": idinspect.__version__}))
    sys.stdout.flush()
    from idinspect.cli import main
    main([sys.argv[2], "--format", "json"])
""")


def test_the_wheel_runs_on_its_own(unpacked, tiny_dir, tmp_path):
    r = _run([sys.executable, "-c", _FROM_WHEEL, str(unpacked), str(tiny_dir("llama-gqa"))], cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    first, _, rest = r.stdout.partition("\n")
    info = json.loads(first)
    for name, file in info["files"].items():
        assert Path(file).is_relative_to(unpacked), f"{name} imported from {file}, not from the wheel"
    assert Path(info["files"]["idinspect.adapters"]).parent == unpacked / "idinspect" / "adapters"
    assert info["adapters"] is None or not Path(info["adapters"]).is_relative_to(unpacked)
    assert info["adapters"] is None or not Path(info["adapters"]).is_relative_to(ROOT)
    assert set(info["types"]) >= {"bert", "gpt2", "llama", "mistral", "qwen2"}
    assert info["version"] == version("idinspect")
    report = json.loads(rest)
    assert report["model"]["model_type"] == "llama" and report["model"]["kv_heads"] == 2


def test_editable_install_maps_the_folders():
    """In this (editable) environment the three folders are idinspect's, and no installed finder or
    path entry offers a top-level ``adapters`` from this checkout (the checkout root itself, which
    pytest puts on sys.path for ``tests``, is left out)."""
    import importlib.machinery

    import idinspect.adapters
    import idinspect.reports

    import idinspect

    assert Path(idinspect.__file__) == ROOT / "idinspect" / "__init__.py"
    assert Path(idinspect.adapters.__file__) == ROOT / "adapters" / "__init__.py"
    assert Path(idinspect.reports.__file__) == ROOT / "reports" / "__init__.py"
    editable = [f for f in sys.meta_path if "__editable__" in getattr(f, "__module__", "")]
    for finder in editable:
        assert finder.find_spec("adapters", None) is None and finder.find_spec("reports", None) is None
    installed = [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != ROOT]
    for name in ("adapters", "reports"):
        spec = importlib.machinery.PathFinder.find_spec(name, installed)
        assert spec is None or not Path(spec.origin or "").is_relative_to(ROOT), f"top-level {name}: {spec}"


def test_python_dash_m_and_console_script(tmp_path):
    expected = f"idinspect, version {version('idinspect')}"
    r = _run([sys.executable, "-m", "idinspect", "--version"], cwd=tmp_path, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == expected, r.stderr[-2000:]
    script = Path(sysconfig.get_path("scripts")) / ("idinspect.exe" if os.name == "nt" else "idinspect")
    assert script.is_file(), f"no console script at {script}: pip install -e . creates it"
    r = _run([str(script), "--version"], cwd=tmp_path, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == expected, r.stderr[-2000:]


def test_pip_installs_the_built_wheel_from_a_file(wheel, tiny_dir, tmp_path):
    """What README's install story promises: ``pip install idinspect-X-py3-none-any.whl`` in a fresh
    virtual environment gives a working ``idinspect`` command. The dependencies come from this
    environment (a path line in a .pth file, which does not run this environment's own .pth hooks,
    so the editable install stays out); pip itself installs only the wheel, from the file, offline."""
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / ("python.exe" if os.name == "nt" else "python")
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     cwd=tmp_path).stdout.strip())
    deps = [p for p in sys.path if p and Path(p).is_dir() and Path(p).resolve() != ROOT
            and "__editable__" not in p and Path(p).name in ("site-packages", "dist-packages")]
    (site / "deps_of_the_test_environment.pth").write_text("".join(f"{p}\n" for p in deps))
    pip = _run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path, timeout=600)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    script = bindir / ("idinspect.exe" if os.name == "nt" else "idinspect")
    r = _run([str(script), "--version"], cwd=tmp_path, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == f"idinspect, version {version('idinspect')}", r.stderr[-2000:]
    r = _run([str(py), "-c", "import idinspect.reports, sys; print(idinspect.reports.__file__)"], cwd=tmp_path)
    assert Path(r.stdout.strip()).is_relative_to(site), r.stdout + r.stderr
    r = _run([str(script), str(tiny_dir("llama-gqa")), "--format", "json"], cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["model"]["kv_heads"] == 2
