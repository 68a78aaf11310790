"""`--progress always` with stderr not a terminal (a log, CI) prints plain progress lines, not bars;
`diff` and `compare` take `--progress`/`--quiet` like the others, and compare says where it wrote."""

from __future__ import annotations

import re

import pytest

from idinspect.progress import PlainLines
from tests.support.cli import run_cli


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("idinspect: ")]


@pytest.mark.parametrize("command", [["verify", "{a}", "{a}", "--no-functional"], ["diff", "{a}", "{a}"],
                                     ["compare", "{a}", "{a}"], ["{a}"]])
def test_always_prints_plain_lines_into_a_log_and_quiet_prints_none(command, tiny_dir):
    a = str(tiny_dir("llama-gqa"))
    args = [part.format(a=a) for part in command]
    res = run_cli(*args, "--progress", "always")
    assert res.code == 0, res.stderr
    lines = _lines(res.stderr)
    assert lines and all(re.fullmatch(r"idinspect: .+ \(\d+ s\)", line) for line in lines), res.stderr
    assert "\x1b" not in res.stderr and "\r" not in res.stderr        # no bars, no cursor movement
    assert any(re.search(r" (\d+)/\1 \(", line) for line in lines)     # a completed count
    quiet = run_cli(*args, "--progress", "always", "--quiet")
    assert quiet.code == 0 and not _lines(quiet.stderr)


def test_plain_lines_are_rate_limited():
    class Clock:
        now = 0.0

    out: list[str] = []

    class Sink:
        def write(self, text):
            out.append(text)

        def flush(self):
            pass

    lines = PlainLines(Sink(), interval=5.0)
    lines._clock = lambda: Clock.now
    lines.start()
    task = lines.add_task("layers", total=100)
    for i in range(1, 101):
        Clock.now = i * 0.1          # 100 updates over 10 s
        lines.update(task, completed=i)
    assert out == ["idinspect: layers 0/100 (0 s)\n", "idinspect: layers 50/100 (5 s)\n",   # the start, 5 s on,
                   "idinspect: layers 100/100 (10 s)\n"]                                       # the completion


def test_compare_says_where_it_wrote(tiny_dir, tmp_path):
    a = tiny_dir("llama-gqa")
    res = run_cli("compare", a, a, "--json", tmp_path / "c.json", "--html", tmp_path / "c.html")
    assert res.code == 0, res.stderr
    assert f"wrote the JSON report to {tmp_path / 'c.json'}" in res.stderr
    assert f"wrote the HTML report to {tmp_path / 'c.html'}" in res.stderr
    assert "wrote" not in run_cli("compare", a, a, "--json", tmp_path / "d.json", "-q").stderr
