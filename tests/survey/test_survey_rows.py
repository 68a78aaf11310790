"""Survey rows, outputs, resume and the HTML summary, in this process (no pool, no Ray)."""

from __future__ import annotations

import json
import math
import os

import pytest
from idinspect.reports.survey_html import render_survey_html
from safetensors import safe_open

import idinspect
from idinspect.errors import IdinspectError, TransientError
from idinspect.survey import FIELD_NAMES, comparable, read_sources, survey_row
from idinspect.survey.memory import (
    WORKER_BASE_BYTES,
    Admission,
    Estimate,
    estimate_model_bytes,
    worker_count,
)
from idinspect.survey.output import (
    JsonlSink,
    ParquetSink,
    read_jsonl,
    read_parquet,
    row_line,
)
from idinspect.survey.resume import (
    current_revision,
    is_done,
    latest_rows,
    local_revision,
)
from idinspect.survey.rows import error_kind


def test_row_is_the_inspection_reduced(tiny_dir):
    path = tiny_dir("bert")
    row = survey_row(str(path))
    report = idinspect.inspect(str(path))
    assert row["status"] == "ok" and row["error"] is None and list(row) == list(FIELD_NAMES)
    totals, model = report["totals"], report["model"]
    assert row["unidentified_parameters"] == totals["unidentified_parameters"]
    assert row["attention_parameters"] == totals["attention_parameters"]
    assert row["identification_ratio"] == totals["identification_ratio"]
    assert (row["family"], row["heads"], row["kv_heads"], row["layers"]) == ("bert", 4, 4, 2)
    assert model["heads"] == row["heads"]
    # the paper's closed form for MHA without biases or RoPE, computed here from H alone
    assert row["closed_form_ratio"] == pytest.approx(1 / (2 * row["heads"]), rel=1e-15)
    severities = [f["severity"] for f in report["findings"]]
    assert row["findings_warning"] == severities.count("warning") > 0  # BERT's key biases are no-ops
    assert row["findings_note"] == severities.count("note") > 0        # its value biases are absorbable
    assert row["fingerprint"] is None
    assert row["revision"].startswith("files:")


def test_gqa_row_closed_form(tiny_dir):
    row = survey_row(str(tiny_dir("llama-gqa")))
    H, G, d, dk = row["heads"], row["kv_heads"], row["hidden_size"], row["head_dim"]
    assert (H, G) == (4, 2) and row["positional"] == "rope" and row["rotary_dim"] == dk
    assert row["closed_form_ratio"] == pytest.approx(G * (dk + dk * dk) / (2 * d * dk * (H + G)), rel=1e-14)


def test_bytes_read_are_the_attention_tensors(tiny_dir):
    path = tiny_dir("bert")
    row = survey_row(str(path))
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        sizes = {k: f.get_slice(k).get_shape() for k in f.keys()}
    dtype_bytes = 8  # tiny models are float64
    attention = [k for k in sizes if ".attention." in k and "LayerNorm" not in k]
    assert len(attention) == 2 * 8
    assert row["bytes_read"] == sum(math.prod(sizes[k]) * dtype_bytes for k in attention)


def test_failures_become_rows(tmp_path):
    missing = survey_row(str(tmp_path / "nowhere"))
    assert missing["status"] == "failed" and missing["error_kind"] == "bad-input"
    assert "no such file or directory" in missing["error"] and missing["unidentified_parameters"] is None
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text('{"model_type": "bert"}')
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x02not really")
    row = survey_row(str(pickled))
    assert row["error_kind"] == "bad-input" and "pytorch_model.bin" in row["error"]
    assert row["revision"] == local_revision(pickled)


def test_error_kinds():
    assert error_kind(IdinspectError("bad")) == "bad-input"
    assert error_kind(TransientError("hub down")) == "transient"
    assert error_kind(ConnectionResetError()) == "transient" and error_kind(MemoryError()) == "transient"
    assert error_kind(ZeroDivisionError()) == "internal"


def test_jsonl_lines_are_whole_and_a_cut_line_is_dropped(tmp_path, tiny_dir):
    out = tmp_path / "rows.jsonl"
    row = survey_row(str(tiny_dir("gpt2")))
    sink = JsonlSink(out)
    sink.write(row)
    sink.write({**row, "source": "second", "identification_ratio": float("nan")})
    sink.close()
    with open(out, "ab") as fh:  # a crash in the middle of the third line
        fh.write(row_line({**row, "source": "third"}).encode()[:40])
    rows = read_jsonl(out)
    assert [r["source"] for r in rows] == [row["source"], "second"]
    assert rows[0] == json.loads(json.dumps(row)) and rows[1]["identification_ratio"] is None
    sink = JsonlSink(out)  # reopening cuts the partial line, so the next row starts on its own line
    sink.write({**row, "source": "fourth"})
    sink.close()
    assert [r["source"] for r in read_jsonl(out)] == [row["source"], "second", "fourth"]
    assert out.read_bytes().endswith(b"\n") and out.read_bytes().count(b"\n") == 3


def test_a_file_that_is_not_a_survey_is_refused(tmp_path):
    other = tmp_path / "notes.jsonl"
    other.write_text("hello\n")
    with pytest.raises(IdinspectError, match=r"notes.jsonl:1: not a JSON line"):
        read_jsonl(other)


def test_parquet_holds_the_latest_row_per_source(tmp_path, tiny_dir):
    pytest.importorskip("pyarrow", reason="pyarrow is the survey extra (pip install 'idinspect[survey]')")
    rows = [survey_row(str(tiny_dir(v))) for v in ("bert", "llama-mqa")]
    out = tmp_path / "rows.parquet"
    sink = ParquetSink(out)
    for row in rows:
        sink.write(row)
    sink.write({**rows[0], "status": "failed", "error": "again"})
    sink.close()
    back = read_parquet(out)
    assert [r["source"] for r in back] == [rows[1]["source"], rows[0]["source"]]
    assert back[0] == rows[1] and back[1]["error"] == "again"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_local_revision_follows_the_files(tmp_path, tiny_dir):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_dir("bert"), folder)
    first = current_revision(str(folder))
    assert first == local_revision(folder) and first.startswith("files:")
    assert current_revision(str(folder)) == first
    weights = folder / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000))
    assert current_revision(str(folder)) != first
    assert current_revision("org/name@" + "a" * 40) == "a" * 40


def test_resume_bookkeeping():
    ok = {"source": "m", "status": "ok", "revision": "r1"}
    assert is_done(ok, "r1") and not is_done(ok, "r2") and not is_done(ok, None)
    assert not is_done({**ok, "status": "failed"}, "r1") and not is_done(None, "r1")
    latest = latest_rows([ok, {"source": "n", "status": "ok"}, {**ok, "revision": "r2"}])
    assert list(latest) == ["n", "m"] and latest["m"]["revision"] == "r2"


def test_read_sources(tmp_path):
    listing = tmp_path / "models.txt"
    listing.write_text("# zoo\norg/a\n\n ./local  # a comment\norg/b@v1\n")
    assert read_sources(listing) == ["org/a", "./local", "org/b@v1"]
    with pytest.raises(IdinspectError, match="cannot read the list of models"):
        read_sources(tmp_path / "missing.txt")


def test_estimate_is_the_layers_in_flight(tiny_dir):
    est = estimate_model_bytes(str(tiny_dir("llama-gqa")), threads=1)
    # one layer in flight: q, k, v, o weights (16x16, 16x8, 16x8, 16x16 float64) + the float64 cast
    # chunk (here the whole largest weight, below spectra.CAST_CHUNK_BYTES), plus the result's singular values (2 layers x 4 heads x 2 x 4 values x 32 bytes)
    layer = (256 + 128 + 128 + 256) * 8 + 256 * 8
    assert est == Estimate(layer + 2 * 4 * 2 * 4 * 32, True)
    assert estimate_model_bytes(str(tiny_dir("llama-gqa")), threads=2).bytes == 2 * layer + 2 * 4 * 2 * 4 * 32
    assert estimate_model_bytes("/nowhere/at/all") == Estimate(0, False)


def test_admission_keeps_estimates_within_the_budget():
    adm = Admission(budget=100, slots=3)
    big, small, unknown = Estimate(80, True), Estimate(30, True), Estimate(0, False)
    assert adm.fits(big)
    adm.enter("a", big)
    assert not adm.fits(small)           # 80 + 30 > 100
    adm.leave("a")
    adm.enter("b", small)
    adm.enter("c", small)
    assert adm.fits(small)                # 60 + 30 <= 100, a slot free
    adm.enter("d", small)
    assert not adm.fits(Estimate(1, True))  # three slots taken
    assert adm.cost(unknown) == 33 and adm.peak_models == 3 and adm.peak_bytes == 90
    lone = Admission(budget=10, slots=2)
    assert lone.fits(Estimate(10**9, True))  # nothing in flight: a model larger than the budget runs alone
    assert worker_count(8, 3 * WORKER_BASE_BYTES) == 3 and worker_count(8, 0) == 1


def test_html_summary_plots_every_inspected_model(tiny_dir):
    rows = [survey_row(str(tiny_dir(v))) for v in ("bert", "gpt2", "llama-gqa", "llama-mqa")]
    rows.append({**rows[0], "source": "<script>alert(1)</script>", "status": "failed", "error": "x < y",
                 "error_kind": "bad-input", "identification_ratio": None})
    page = render_survey_html(rows)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page.replace("&lt;script&gt;", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "x &lt; y" in page
    assert page.count('class="pt-mha"') == 2 + 1 and page.count('class="pt-gqa"') == 2 + 1  # + legend marks
    assert page.count('class="gqa-curve"') == 2 + 1   # G = 1 and G = 2, + legend
    assert page.count('class="mha-curve"') == 1 + 1
    for marker in ("http:", "https:", "src=", "@import", "url("):
        assert marker not in page


def test_comparable_drops_timing_only(tiny_dir):
    row = survey_row(str(tiny_dir("qwen2")))
    assert set(row) - set(comparable(row)) == {"seconds"}


@pytest.mark.parametrize("status, transient", [(500, True), (503, True), (429, True), (404, False), (401, False),
                                               (403, False)])
def test_hub_answers_that_may_pass_on_retry_are_transient(status, transient):
    from huggingface_hub import errors as hf_errors

    from idinspect.sources.hub import hub_error
    from tests.sources.test_hub import response

    error = hub_error(hf_errors.HfHubHTTPError(str(status), response=response(status)), "org/m", None, offline=False)
    assert isinstance(error, IdinspectError) and error.transient is transient
    assert error_kind(error) == ("transient" if transient else "bad-input")


def test_single_file_checkpoints_have_their_own_revision(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"GGUF" + b"\0" * 60)
    b.write_bytes(b"GGUF" + b"\0" * 61)
    assert current_revision(str(a)) == local_revision(a) != current_revision(str(b))
    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 1_000_000))
    assert current_revision(str(a)) != local_revision(b) and current_revision(str(a)).startswith("files:")


def test_fingerprint_column_is_the_fingerprint_commands_digest(tiny_dir, tmp_path):
    import shutil

    from idinspect.survey import SurveyOptions
    from tests.support.cli import run_cli

    path = tiny_dir("llama-gqa")
    row = survey_row(str(path), SurveyOptions(fingerprint=True))
    assert row["status"] == "ok" and row["fingerprint"].startswith("sha256:") and len(row["fingerprint"]) == 71
    cli = run_cli("fingerprint", path, "--digest")
    assert cli.code == 0 and cli.stdout == row["fingerprint"] + "\n"
    fp = tmp_path / "fp.json"
    assert run_cli("fingerprint", path, "-o", fp).code == 0
    assert run_cli("fingerprint", fp, "--digest").stdout == cli.stdout       # a fingerprint read back
    copy = shutil.copytree(path, tmp_path / "copy")                            # the digest ignores where it lives
    assert survey_row(str(copy), SurveyOptions(fingerprint=True))["fingerprint"] == row["fingerprint"]
    other = survey_row(str(tiny_dir("llama-mqa")), SurveyOptions(fingerprint=True))["fingerprint"]
    assert other.startswith("sha256:") and other != row["fingerprint"]
    # the row's other fields do not depend on the option (bytes read aside: the tensors are read twice)
    plain = survey_row(str(path))
    assert plain["fingerprint"] is None and row["bytes_read"] > plain["bytes_read"]
    skip = {"fingerprint", "bytes_read"}
    assert {k: v for k, v in comparable(row).items() if k not in skip} == \
           {k: v for k, v in comparable(plain).items() if k not in skip}


def test_resume_redoes_rows_without_the_requested_fingerprint(tiny_dir, tmp_path):
    from idinspect.survey import SurveyOptions, run_survey

    source, out, fp = str(tiny_dir("gpt2")), tmp_path / "s.jsonl", SurveyOptions(fingerprint=True)
    assert run_survey([source], jsonl=str(out), backend=_InProcess(None)).new[0]["fingerprint"] is None
    again = run_survey([source], jsonl=str(out), backend=_InProcess(fp), options=fp)
    assert again.skipped == [] and again.new[0]["fingerprint"].startswith("sha256:")
    third = run_survey([source], jsonl=str(out), backend=_InProcess(fp), options=fp)
    assert third.skipped == [source] and third.new == []


class _InProcess:
    """A backend that computes the rows in this process, with ``options``."""

    workers = 1

    def __init__(self, options):
        from idinspect.survey.pool import BackendStats

        self.stats = BackendStats(workers=1)
        self.options = options

    def run(self, tasks, emit):
        for task in tasks:
            emit(survey_row(task.source, self.options))
        return self.stats


def test_a_timeout_that_the_interrupted_code_turned_into_another_error_is_still_a_timeout():
    """The timer's ModelTimeout can surface as something else (an import cut short raises "partially
    initialized module"); the row must say "timed out", not the other error, and not be retried."""
    import time

    from idinspect.survey.limits import ModelTimeout, limited_row

    def interrupted_import(source: str, options: dict) -> dict:
        try:
            time.sleep(5)
        except ModelTimeout:
            raise AttributeError("partially initialized module 'torch' has no attribute '_subclasses'") from None
        return {"source": source, "status": "ok"}

    row = limited_row("org/slow", {}, 0.2, None, row_fn=interrupted_import)
    assert row["status"] == "failed" and row["error"].startswith("timed out after 0.2 s"), row
    assert row["error_kind"] == "bad-input"


def test_an_error_without_a_timeout_is_not_called_one():
    from idinspect.survey.limits import limited_row

    def broken(source: str, options: dict) -> dict:
        raise AttributeError("a real bug")

    with pytest.raises(AttributeError, match="a real bug"):
        limited_row("org/model", {}, 30.0, None, row_fn=broken)
