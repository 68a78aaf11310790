"""The JSON report: schema_version first, deterministic, timestamps only on request, schema-valid."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import jsonschema
import pytest
from idinspect.reports.atomic import write_text_atomic
from idinspect.reports.json_report import dumps, ordered, write_json

from tests.support.cli import run_cli
from tests.support.report_fixtures import bert_result, llama_result

SCHEMA = Path(__file__).resolve().parents[2] / "idinspect" / "schemas" / "report.schema.json"


def validate(data: dict) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator(schema).validate(data)


def test_schema_version_first_and_sections_in_contract_order():
    data = json.loads(dumps(llama_result()))
    assert list(data)[:6] == ["schema_version", "tool", "model", "totals", "layers", "findings"]
    assert data["schema_version"] == 1


def test_deterministic_whatever_the_input_order():
    a = bert_result()
    b = bert_result()
    rng = random.Random(3)
    rng.shuffle(b["findings"])
    rng.shuffle(b["layers"])
    b["model"] = dict(reversed(list(b["model"].items())))
    assert dumps(a) == dumps(b)
    findings = json.loads(dumps(b))["findings"]
    keys = [(f["layer"], f["rule"]) for f in findings]
    assert keys == sorted(keys)
    assert [layer["index"] for layer in json.loads(dumps(b))["layers"]] == list(range(6))


def test_meaningful_list_order_is_kept():
    result = llama_result(n_layers=2)
    spectra = result["layers"][0]["spectra"]
    out = json.loads(dumps(result))["layers"][0]["spectra"]
    assert out["qk"] == spectra["qk"]  # heads in order, singular values descending as given
    assert out["qk"][0] == sorted(out["qk"][0], reverse=True)


def test_no_timestamp_unless_asked(monkeypatch):
    assert "generated_at" not in dumps(llama_result())
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    data = json.loads(dumps(llama_result(), timestamp=True))
    assert data["generated_at"] == "2023-11-14T22:13:20Z"
    assert list(data)[0] == "schema_version"


def test_non_finite_floats_become_null_and_output_is_strict_json():
    result = llama_result(n_layers=2)
    result["layers"][0]["spectra"]["qk_condition"][0] = float("inf")
    result["layers"][1]["spectra"]["qk"][0][0] = float("nan")
    text = dumps(result)
    assert "Infinity" not in text and "NaN" not in text
    data = json.loads(text)
    assert data["layers"][0]["spectra"]["qk_condition"][0] is None
    assert data["layers"][1]["spectra"]["qk"][0][0] is None


def test_fixture_matches_the_schema():
    validate(ordered(llama_result()))
    validate(ordered(bert_result()))


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "report.json"
    write_json(llama_result(), target)
    before = target.read_text()

    with pytest.raises(TypeError):
        write_text_atomic(target, 123)  # not text: the write fails part way
    assert target.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["report.json"]


def test_cli_json_real_output_is_schema_valid_and_deterministic(tiny_dir, tmp_path):
    path = tiny_dir("llama-gqa")
    first = run_cli(path, "--format", "json")
    second = run_cli(path, "--format", "json")
    assert first.code == 0, first.stderr
    assert first.stdout == second.stdout
    assert first.stderr == ""  # no progress with --format json
    data = json.loads(first.stdout)
    assert list(data)[0] == "schema_version"
    validate(data)
    assert data["model"]["kv_heads"] == 2 and len(data["layers"]) == 2
    assert "generated_at" not in data


def test_cli_json_file_beside_the_text_report(minilm_dir, tmp_path, monkeypatch):
    out = tmp_path / "minilm.json"
    res = run_cli(minilm_dir, "--json", out, "--quiet")
    assert res.code == 0, res.stderr
    assert "Attention layers" in res.stdout and res.stderr == ""
    data = json.loads(out.read_text())
    validate(data)
    assert data["totals"]["unidentified_parameters"] == 152064
    assert [p.name for p in tmp_path.iterdir()] == ["minilm.json"]
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    stamped = run_cli(minilm_dir, "--format", "json", "--timestamp")
    assert json.loads(stamped.stdout)["generated_at"] == "1970-01-01T00:00:00Z"
    loud = run_cli(minilm_dir, "--json", out)
    assert f"wrote the JSON report to {out}" in loud.stderr.replace("\n", "")


def test_rows_of_floats_take_the_fast_path_and_stay_exact():
    """_clean's one-pass check of a row of floats: NaN/Inf anywhere still become null, overflow of
    the check itself falls back to the per-value path."""
    from idinspect.reports.json_report import _clean

    assert _clean([1.0, float("nan"), 2.0]) == [1.0, None, 2.0]
    assert _clean([float("inf"), -float("inf")]) == [None, None]
    assert _clean([1e308, 1e308]) == [1e308, 1e308]
    assert _clean([0.1, 0.2, 0.30000000000000004]) == [0.1, 0.2, 0.30000000000000004]
    assert _clean([1.0, 2]) == [1.0, 2]


def test_rows_of_floats_print_one_row_per_line_as_the_per_item_path_does():
    """_pretty's one-call path for rows of floats (RoPE planes, masked heads as null) gives the
    same text as encoding each row on its own line."""
    from idinspect.reports.json_report import _clean, _one_line, _pretty

    rows = [[0.5, 1e-300], None, [3.0, 2.0, 1.0], [float("nan"), 1.0], None]
    cleaned = _clean(rows)
    assert cleaned == [[0.5, 1e-300], None, [3.0, 2.0, 1.0], [None, 1.0], None]
    assert _clean([[1.0, 2.0], [float("inf"), 0.0]]) == [[1.0, 2.0], [None, 0.0]]
    expected = "[\n" + ",\n".join("    " + _one_line(r) for r in cleaned) + "\n  ]"
    assert _pretty(cleaned, "  ", "  ") == expected
    clean_rows = [[0.25, 0.125], None, [2.0, 1.0]]
    expected = "[\n" + ",\n".join("  " + _one_line(r) for r in clean_rows) + "\n]"
    assert _pretty(clean_rows, "", "  ") == expected
    assert json.loads(_pretty({"qk_planes": [clean_rows, None]}, "", "  ")) == {"qk_planes": [clean_rows, None]}


def test_ctrl_c_at_any_moment_of_an_atomic_write_leaves_no_temporary(tmp_path):
    """SIGINT sent over and over while outputs are written: every write either lands whole or
    leaves the old file, and no hidden temporary is ever left (the moment between creating the
    temporary and knowing its name included)."""
    import os
    import signal
    import threading
    import time

    target = tmp_path / "out.json"
    stop = threading.Event()

    def interrupt():
        delay = 20e-6
        while not stop.is_set():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(delay)
            delay = delay * 1.37 if delay < 2e-4 else 20e-6   # sweep the moment across the write

    thread = threading.Thread(target=interrupt, daemon=True)
    interrupted = written = 0
    def ctrl_c_inside_the_write(signum, frame):   # Python's own handler, but only while write_atomic runs
        while frame is not None:
            if frame.f_code.co_name == "write_atomic":
                raise KeyboardInterrupt
            frame = frame.f_back

    previous = signal.signal(signal.SIGINT, ctrl_c_inside_the_write)
    thread.start()
    try:
        while written + interrupted < 3000:
            try:
                write_text_atomic(target, '{"n": %d}' % written)
                written += 1
            except KeyboardInterrupt:
                interrupted += 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # the last ones still in flight
        stop.set()
        thread.join()
        time.sleep(0.01)
        signal.signal(signal.SIGINT, previous)
    assert interrupted > 100 and written > 0
    assert sorted(os.listdir(tmp_path)) == ["out.json"]


def test_a_device_or_fifo_output_is_written_in_place_not_replaced(tmp_path):
    """``--json /dev/null`` once renamed a temporary over /dev/null (as root: /dev/null became a
    regular file for the whole machine). A FIFO stands in for the device here: it must still be a
    FIFO afterwards, its reader must get the whole text, and no temporary may be left beside it."""
    import os
    import stat
    import threading

    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_text_atomic(fifo, '{"a": 1}\n')
    reader.join(timeout=30)
    assert got == [b'{"a": 1}\n']
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(os.listdir(tmp_path)) == ["out.json"]
    write_text_atomic("/dev/null", "x")          # in place: /dev/null stays the device
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
