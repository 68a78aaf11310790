"""The HTML report in a real browser: Debian's chromium, headless, no network.

The screenshot must not be blank (many distinct colours, the charts' colours present) and the DOM
after scripts ran must hold the tables and charts, with hostile strings inert. ``.ci/run``
installs chromium; without it this test fails under ``CI=true`` and skips elsewhere.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from idinspect.reports.html import write_html

from idinspect.analysis.inspection import inspect
from tests.support.report_fixtures import EVIL, llama_result

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH, HEIGHT = 1280, 2000


def browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    reason = "no chromium on PATH (apt-get install chromium; .ci/run installs it)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def run_browser(exe: str, tmp: Path, page: Path, *args: str, width: int = WIDTH) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.iterdir()))}"
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-breakpad", "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND",
           f"--user-data-dir={profile}", f"--window-size={width},{HEIGHT}", *args, page.resolve().as_uri()]
    env = {**os.environ, "HOME": str(tmp)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def decode_png(data: bytes) -> tuple[int, int, list[bytes], int]:
    """(width, height, rows of raw pixels, bytes per pixel) of an 8-bit RGB/RGBA PNG (stdlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
        elif kind == b"IDAT":
            idat += body
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev, at = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
        at += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                c = prev[x - bpp] if x >= bpp else 0
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def colours(rows: list[bytes], bpp: int, step: int = 3) -> dict[tuple[int, int, int], int]:
    """Pixel counts per colour, sampling every ``step``-th pixel of every ``step``-th row."""
    counts: dict[tuple[int, int, int], int] = {}
    for row in rows[::step]:
        for x in range(0, len(row), bpp * step):
            key = (row[x], row[x + 1], row[x + 2])
            counts[key] = counts.get(key, 0) + 1
    return counts


def near(counts: dict, target: tuple[int, int, int], tol: int = 12) -> int:
    return sum(n for c, n in counts.items() if all(abs(a - b) <= tol for a, b in zip(c, target)))


class Dom(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: (v or "") for k, v in attrs}))

    def find(self, tag: str, **attrs) -> list[dict]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


@pytest.fixture(scope="module")
def chromium() -> str:
    return browser()


def test_screenshot_of_a_real_report_is_not_blank(chromium, minilm_dir, tmp_path):
    page = tmp_path / "minilm.html"
    write_html(inspect(str(minilm_dir)), page)
    shot = tmp_path / "shot.png"
    proc = run_browser(chromium, tmp_path, page, f"--screenshot={shot}")
    assert shot.is_file(), proc.stderr[-2000:]
    width, height, rows, bpp = decode_png(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    counts = colours(rows, bpp)
    total = sum(counts.values())
    background = max(counts.values())
    assert len(counts) >= 50, f"only {len(counts)} colours: blank page?"
    assert total - background > 0.05 * total, "almost every pixel is the background colour"
    assert near(counts, (0x0B, 0x5C, 0xAD)) > 200, "the charts' blue (QK gauge, measured ratio) is missing"
    assert near(counts, (0xC2, 0x41, 0x0C)) > 20, "the VO gauge orange is missing"


def test_dom_after_scripts_has_tables_charts_and_inert_strings(chromium, tmp_path):
    page = tmp_path / "evil.html"
    write_html(llama_result(evil=True), page)
    proc = run_browser(chromium, tmp_path, page, "--dump-dom")
    assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-2000:]
    dom = Dom(proc.stdout)
    assert "js" in dom.find("html")[0].get("class", "").split(), "the inline script did not run"
    for cls in ("kv", "layers", "heads", "findings"):
        assert dom.find("table", **{"class": cls}), cls
    for chart in ("chart-params", "chart-ratio", "heat-qk-effective_rank", "heat-ov-top_sigma"):
        assert dom.find("svg", id=chart), chart
    hidden = [a for a in dom.find("figure") if "hidden" in a]
    assert [a.get("data-metric") for a in hidden] == ["top_sigma", "top_sigma"]  # the toggle chose a metric
    assert not dom.find("img"), "a tensor name became an element"
    assert EVIL.replace("<", "&lt;").replace(">", "&gt;") in proc.stdout


#: Injected after the report's own script: measures every table cell and formula once laid out at
#: WIDTH px and writes the numbers into <body data-layout="..."> for --dump-dom.
MEASURE = """<script>
(function () {
  var out = {cells: [], tensors: [], rules: [], maths: 0, page: document.documentElement.scrollWidth};
  document.querySelectorAll("table td, table th").forEach(function (c) {
    var r = c.getBoundingClientRect();
    if (!r.height) { return; }  /* inside a closed <details> */
    var s = getComputedStyle(c);
    var inner = r.height - parseFloat(s.paddingTop) - parseFloat(s.paddingBottom)
                - parseFloat(s.borderTopWidth) - parseFloat(s.borderBottomWidth);
    var lines = inner / parseFloat(s.lineHeight);
    var tensors = c.querySelectorAll("code.tensor").length || 1;
    out.cells.push({lines: lines / tensors, text: c.textContent.slice(0, 60)});
  });
  document.querySelectorAll("code.tensor, code.rule").forEach(function (c) {
    var r = c.getBoundingClientRect(), lh = parseFloat(getComputedStyle(c).lineHeight) || 20;
    (c.classList.contains("rule") ? out.rules : out.tensors).push({lines: r.height / lh, text: c.textContent});
  });
  document.querySelectorAll("math").forEach(function (m) {
    if (m.getBoundingClientRect().width > 0 && m.querySelector("mfrac")) { out.maths += 1; }
  });
  document.body.setAttribute("data-layout", JSON.stringify(out));
})();
</script>"""


def measured_layout(chromium: str, tmp_path: Path, html: str, name: str) -> dict:
    import json

    page = tmp_path / name
    page.write_text(html.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    proc = run_browser(chromium, tmp_path, page, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = [a for t, a in Dom(proc.stdout).tags if t == "body"][0]
    return json.loads(body["data-layout"])


@pytest.mark.parametrize("fixture", ["llama", "bert"])
def test_layout_at_1280_px_keeps_cells_short_and_names_whole(chromium, tmp_path, fixture):
    """No table cell taller than three lines (per tensor name it lists), tensor and rule names on one
    line each (never wrapped letter by letter), no horizontal overflow, the formulas laid out as MathML."""
    from idinspect.reports.html import render_html

    from tests.support.report_fixtures import bert_result

    result = llama_result() if fixture == "llama" else bert_result()
    layout = measured_layout(chromium, tmp_path, render_html(result), f"{fixture}.html")
    tall = [c for c in layout["cells"] if c["lines"] > 3.2]
    assert not tall, tall[:5]
    assert layout["tensors"] and all(t["lines"] < 1.6 for t in layout["tensors"]), layout["tensors"][:5]
    assert layout["rules"] and all(r["lines"] < 1.6 for r in layout["rules"]), layout["rules"]
    assert layout["page"] <= WIDTH, layout["page"]
    assert layout["maths"] >= 3  # closed form (summary, card, ratio section) and U / P: rendered fractions


#: Injected into any report: the page's width and every table cell whose content overflows it
#: (clipped text), written into <body data-fit="..."> for --dump-dom.
FIT = """<script>
(function () {
  var out = {page: document.documentElement.scrollWidth, clipped: [], wide: []};
  document.querySelectorAll(".scroll").forEach(function (d) {
    if (d.scrollWidth > d.clientWidth + 1) { out.wide.push((d.querySelector("caption") || d).textContent.slice(0, 40)); }
  });
  document.querySelectorAll("td, th").forEach(function (c) {
    if (c.getBoundingClientRect().height && c.scrollWidth > c.clientWidth + 1) {
      out.clipped.push(c.textContent.slice(0, 60));
    }
  });
  document.body.setAttribute("data-fit", JSON.stringify(out));
})();
</script>"""


def _every_writer(minilm: Path, tmp_path: Path) -> dict[str, str]:
    """Each HTML writer's page on the real all-MiniLM-L6-v2 (diff and compare of it against itself;
    survey with it and a failed source)."""
    from idinspect.reports.compare_html import render_compare_html
    from idinspect.reports.diff_html import render_diff_html
    from idinspect.reports.html import render_html
    from idinspect.reports.survey_html import render_survey_html

    from idinspect.compare import compare
    from idinspect.survey.rows import survey_row
    from idinspect.training.diff import diff

    rows = [survey_row(str(minilm)), survey_row(str(tmp_path / "missing-model"))]
    return {"inspect": render_html(inspect(str(minilm))), "diff": render_diff_html(diff(str(minilm), str(minilm))),
            "compare": render_compare_html(compare(str(minilm), str(minilm)).to_dict()),
            "survey": render_survey_html(rows)}


@pytest.mark.parametrize("width", [1280, 2200])
def test_every_html_writer_fits_its_width(chromium, minilm_dir, tmp_path, width):
    """Every HTML writer at 1280 and 2200 px: the page never scrolls sideways (wide tables scroll in
    their own container) and no table cell clips its text."""
    import json

    for name, page_html in _every_writer(minilm_dir, tmp_path).items():
        page = tmp_path / f"{name}-{width}.html"
        page.write_text(page_html.replace("</body>", FIT + "</body>"), encoding="utf-8")
        proc = run_browser(chromium, tmp_path, page, "--dump-dom", width=width)
        assert proc.returncode == 0, proc.stderr[-2000:]
        fit = json.loads([a for t, a in Dom(proc.stdout).tags if t == "body"][0]["data-fit"])
        assert fit["page"] <= width, (name, width, fit["page"])
        assert not fit["clipped"], (name, width, fit["clipped"][:5])
        if width >= 2200:     # a wide window holds every table of these three whole (inspect's per-head table scrolls)
            assert not (name in ("diff", "compare", "survey") and fit["wide"]), (name, fit["wide"])
