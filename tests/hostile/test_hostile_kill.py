"""Kill an export at random moments (SIGKILL, SIGTERM, SIGINT, SIGHUP; 20 trials, seeded) and check
that nothing is lost or left behind.

Each trial starts ``python -m idinspect export`` (every other trial with a child that sleeps 10 ms
after each tensor written, so that kills also land mid-write rather than mostly while modules
load), sends the signal after a random delay drawn over the measured length of a whole run, and
asserts: the input is unchanged; OUT either does not exist or is byte-identical to a finished
export (exports are deterministic), so nothing complete-looking is half-written; a caught signal
exits 128 + its number (130 for Ctrl-C) with at most one line on stderr, no traceback, and no
temporary folder left; after SIGKILL only this process's marked temporary folder remains, holding
no config.json; and the next export to the same OUT removes it.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.hostile import tree_hashes

TRIALS = 20
SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP]

SLOW_CHILD = textwrap.dedent("""
    import os, sys, time
    from idinspect.entry import (hold_signals_while_guarded_modules_load, install_signal_handlers,
                                 interrupted_code, say_interrupted)
    install_signal_handlers()
    hold_signals_while_guarded_modules_load()       # as idinspect.entry.run does


    def slowed(method):
        def run(self, *args, **kwargs):
            result = method(self, *args, **kwargs)
            time.sleep(0.01)
            return result
        return run


    try:  # the patch itself, interrupted as idinspect.entry.run would handle it
        import idinspect.exporting.shard_writer as sw
        from idinspect.entry import run
        sw.ShardWriter.write = slowed(sw.ShardWriter.write)
        sw.ShardWriter.copy = slowed(sw.ShardWriter.copy)
        sys.argv = ["idinspect", *sys.argv[1:]]
    except KeyboardInterrupt as exc:
        say_interrupted(exc)
        os._exit(interrupted_code(exc))
    run()
""")


def _start(src: Path, out: Path, slow: bool) -> subprocess.Popen:
    args = ["export", str(src), str(out)]
    cmd = [sys.executable, "-c", SLOW_CHILD, *args] if slow else [sys.executable, "-m", "idinspect", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _timed(src: Path, out: Path, slow: bool) -> float:
    t0 = time.monotonic()
    child = _start(src, out, slow)
    _, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    return time.monotonic() - t0


def _leftovers(parent: Path) -> list[Path]:
    return [p for p in parent.iterdir() if ".idinspect-" in p.name]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL") or not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_kills_at_random_moments_lose_and_leave_nothing(tiny_dir, tmp_path):
    src = tiny_dir("llama3-rope", max_shard_size="20KB")
    before = tree_hashes(src)
    work = tmp_path / "exports"
    work.mkdir()
    reference = tmp_path / "reference"
    durations = {slow: _timed(src, reference if not slow else tmp_path / "reference-slow", slow) for slow in (False, True)}
    expected = tree_hashes(reference)
    assert tree_hashes(tmp_path / "reference-slow") == expected
    rng = random.Random(14)
    outcomes = []
    for trial in range(TRIALS):
        sig, slow = SIGNALS[trial % len(SIGNALS)], trial % 2 == 1
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)  # the previous trial's finished export
        delay = rng.uniform(0.0, durations[slow])
        child = _start(src, out, slow)
        time.sleep(delay)
        if child.poll() is None:
            os.kill(child.pid, sig)
        _, err = child.communicate(timeout=300)
        code = child.returncode
        outcomes.append((sig.name, round(delay, 2), code))
        assert tree_hashes(src) == before, f"trial {trial}: the input changed"
        if out.exists():
            assert tree_hashes(out) == expected, f"trial {trial}: {out} exists but is not a complete export"
        if code == 0:
            assert not _leftovers(work), (trial, _leftovers(work))
        elif sig == signal.SIGKILL:
            assert code == -signal.SIGKILL
            for tmp in _leftovers(work):
                assert tmp.name.startswith(f".out.idinspect-tmp-{child.pid}-"), tmp
                assert not (tmp / "config.json").exists()
        else:
            # caught: 128 + signal; or killed by the default action before Python or idinspect
            # installed a handler (nothing written then)
            assert code in (128 + sig, -sig), (trial, sig.name, code, err)
            assert "Traceback" not in err, err
            assert len(err.strip().splitlines()) <= 1, err
            assert not _leftovers(work), (trial, sig.name, _leftovers(work))
        res = run_cli("export", str(src), str(out), "--force")   # the next run cleans up and completes
        assert res.code == 0, res.stderr
        assert not _leftovers(work), (trial, _leftovers(work))
        assert tree_hashes(out) == expected
    print("kill trials (signal, delay s, exit):", outcomes)
    caught = [o for o in outcomes if o[0] != "SIGKILL" and o[2] in (129, 130, 143)]
    assert caught, f"no trial interrupted a running export: {outcomes}"


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1, 0.3])
def test_ctrl_c_while_modules_load_prints_one_line_and_exits_130(tiny_dir, delay):
    """Ctrl-C from the moment idinspect's entry point has been imported (``-X importtime`` says when),
    through torch's and transformers' imports: one line, exit 130, no traceback. (Before that moment
    Python itself is still starting: a signal then is Python's to handle.)"""
    src = tiny_dir("llama-gqa")
    child = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "idinspect", str(src)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in child.stderr:
        if line.rstrip().endswith("| idinspect.entry"):
            break
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    said = [line for line in child.stderr.read().splitlines() if line.strip() and not line.startswith("import time:")]
    code = child.wait(timeout=300)
    if code == 0:      # finished before the signal arrived: nothing to check
        pytest.skip("the run finished before Ctrl-C")
    assert code == 130, said
    assert len(said) == 1 and said[0].startswith("idinspect: interrupted (Ctrl-C)"), said


SIGNAL_INSIDE_IMPORT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    import idinspect.entry as entry
    entry.GUARDED_IMPORTS.add("signals_itself")
    entry.install_signal_handlers()
    entry.hold_signals_while_guarded_modules_load()
    try:
        import signals_itself        # sends SIGTERM to this process half-way through its own import
        import time
        time.sleep(5)
        print("not terminated", flush=True)
    except KeyboardInterrupt as exc:
        entry.say_interrupted(exc)
        os._exit(entry.interrupted_code(exc))
""")


def test_a_signal_while_a_guarded_module_loads_is_delivered_when_it_has(tmp_path):
    """torch's initialisation (pybind11) can abort the process (exit -6) if a signal handler raises
    inside it; SIGTERM is held while such a module loads and delivered right after: the module's
    code runs to its end, then the run unwinds with one line and 143."""
    (tmp_path / "signals_itself.py").write_text(
        "import os, pathlib, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(0.3)\n"
        f"pathlib.Path({str(tmp_path / 'body-finished')!r}).touch()\n")
    child = subprocess.run([sys.executable, "-c", SIGNAL_INSIDE_IMPORT, str(tmp_path)], capture_output=True,
                           text=True, timeout=120)
    assert (tmp_path / "body-finished").exists(), child
    assert "not terminated" not in child.stdout, child
    assert child.returncode == 128 + signal.SIGTERM, child
    assert child.stderr.strip().startswith("idinspect: interrupted (SIGTERM)"), child.stderr


def test_torch_loads_under_the_signal_guard():
    """The guard wraps torch's real loader: torch imports and works through it."""
    code = ("import sys, idinspect.entry as e\n"
            "e.hold_signals_while_guarded_modules_load()\n"
            "import torch\n"
            "print(float(torch.ones(2).sum()), type(sys.meta_path[0]).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["2.0", "_HoldSignalsWhileLoading"], out
