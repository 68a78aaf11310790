"""Killing an export mid-write (SIGKILL, no cleanup possible) leaves no OUT that looks complete and
an untouched input. The child pauses inside the shard writer after a few tensors (a patched
``ShardWriter.write`` that touches a marker file and sleeps), then the parent kills it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.contract.test_export import tree_hashes

CHILD = textwrap.dedent("""
    import pathlib, sys, time
    import idinspect.exporting.shard_writer as sw

    original = sw.ShardWriter.write
    count = {"n": 0}

    def paused(self, name, tensor):
        original(self, name, tensor)
        count["n"] += 1
        if count["n"] == 3:
            pathlib.Path(sys.argv[3]).touch()
            time.sleep(3600)

    sw.ShardWriter.write = paused
    from idinspect.cli import main
    main(["export", sys.argv[1], sys.argv[2]])
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_mid_write_leaves_no_complete_looking_out(tiny_dir, tmp_path):
    src = tiny_dir("llama3-rope", max_shard_size="20KB")
    before = tree_hashes(src)
    out, marker = tmp_path / "exports" / "out", tmp_path / "writing"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(out), str(marker)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while not marker.exists():
            if child.poll() is not None:
                pytest.fail(f"export ended before writing: {child.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert not out.exists()
    leftovers = list(out.parent.iterdir())
    assert leftovers and all(p.name.startswith(".out.idinspect-tmp-") for p in leftovers)
    for tmp in leftovers:                               # what is left cannot be mistaken for a checkpoint
        assert not (tmp / "config.json").exists() and not (tmp / "model.safetensors.index.json").exists()
    assert tree_hashes(src) == before
