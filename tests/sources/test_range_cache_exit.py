"""A range still being written by a daemon thread when the process exits (a background fetch cut short
by a failed command) leaves no ``.part-`` file in the cache: the temporary is removed at exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent("""
    import sys, threading, time
    from pathlib import Path
    from idinspect.sources.remote_cache import RangeCache

    cache = RangeCache(Path(sys.argv[1]), "0" * 40)
    writing = threading.Event()

    def fetch():
        with cache.writer("model.safetensors", 0, 1 << 20) as out:
            out.write(b"x" * 1000)
            out.flush()
            writing.set()
            time.sleep(60)          # a slow link: the piece is unfinished when the command ends

    threading.Thread(target=fetch, daemon=True).start()
    writing.wait(30)
    print(sorted(p.name[:6] for p in Path(sys.argv[1]).rglob(".part-*")), flush=True)
    sys.exit(2)                     # the command fails while the fetch is in flight
""")


def test_an_unfinished_range_is_removed_when_the_process_exits(tmp_path: Path):
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout.strip() == "['.part-']"            # it was there while the thread wrote
    assert [p for p in tmp_path.rglob("*") if p.name.startswith(".part-")] == []
