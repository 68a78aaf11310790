"""The survey on real backends: the spawned process pool and a real local Ray instance (2 CPUs),
which must give identical rows (timing aside); memory admission, retries, the CLI, resume after a kill."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from idinspect.survey import SurveyOptions, comparable, run_survey
from idinspect.survey.memory import WORKER_BASE_BYTES, estimate_model_bytes
from idinspect.survey.output import read_jsonl
from idinspect.survey.pool import LocalPool
from idinspect.survey.ray_backend import LOOPBACK_ENV
from tests.support.cli import run_cli

VARIANTS = ("bert", "gpt2", "llama-gqa", "llama-mqa", "qwen2")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, tiny_dir) -> list[str]:
    """Five tiny checkpoints, a missing folder and a pickle-only folder (both bad input)."""
    bad = tmp_path_factory.mktemp("pickled")
    (bad / "config.json").write_text('{"model_type": "gpt2"}')
    (bad / "pytorch_model.bin").write_bytes(b"\x80\x02")
    return [str(tiny_dir(v)) for v in VARIANTS] + [str(bad.parent / "no-such-model"), str(bad)]


@pytest.fixture(scope="module")
def dead_endpoint(tmp_path_factory) -> dict[str, str]:
    """Hub settings pointing at 127.0.0.1 where nothing listens: any hub id fails with connection
    refused (a transient error), and nothing can reach the network."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HUB_CACHE": str(tmp_path_factory.mktemp("hub-cache")),
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0"}


@pytest.fixture(scope="module")
def ray_local(dead_endpoint):
    """One real local Ray instance for the module (its start-up costs a few seconds); its workers
    get the dead hub endpoint."""
    os.environ.setdefault(*LOOPBACK_ENV)     # every Ray service on 127.0.0.1 (before Ray is imported)
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'idinspect[ray]'; "
                                            ".ci/run installs it with the test extra)")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1", runtime_env={"env_vars": dead_endpoint})
    yield ray
    ray.shutdown()


def by_source(rows: list[dict]) -> dict[str, dict]:
    return {r["source"]: comparable(r) for r in rows}


def test_pool_and_ray_give_identical_rows(zoo, ray_local, tmp_path):
    from idinspect.survey.ray_backend import RayBackend

    pool_out, ray_out = tmp_path / "pool.jsonl", tmp_path / "ray.jsonl"
    seen: list[str] = []
    fp = SurveyOptions(fingerprint=True)
    pooled = run_survey(zoo, jsonl=str(pool_out), workers=2, options=fp, on_row=lambda r: seen.append(r["source"]))
    rayed = run_survey(zoo, jsonl=str(ray_out), backend=RayBackend(retries=1, options=fp), options=fp)
    assert sorted(seen) == sorted(zoo) and len(read_jsonl(pool_out)) == len(zoo)
    pool_rows, ray_rows = by_source(read_jsonl(pool_out)), by_source(read_jsonl(ray_out))
    assert set(pool_rows) == set(zoo) and pool_rows == ray_rows
    assert [pool_rows[s]["status"] for s in zoo] == ["ok"] * 5 + ["failed"] * 2
    # the fingerprint column, identical through both backends, is what 'idinspect fingerprint --digest' prints
    assert [pool_rows[s]["fingerprint"] is not None for s in zoo] == [True] * 5 + [False] * 2
    assert len({pool_rows[s]["fingerprint"] for s in zoo[:5]}) == 5
    for s in (zoo[0], zoo[2]):
        assert run_cli("fingerprint", s, "--digest").stdout == pool_rows[s]["fingerprint"] + "\n"
    assert {pool_rows[s]["error_kind"] for s in zoo[5:]} == {"bad-input"}
    assert pooled.stats.retries == 0 and pooled.stats.workers == 2 and rayed.stats.workers == 2
    assert len(pooled.failed) == len(rayed.failed) == 2


def test_memory_budget_bounds_the_models_in_flight(zoo, tmp_path):
    import shutil

    copies = [str(shutil.copytree(zoo[2], tmp_path / f"copy{i}")) for i in range(4)]
    one = estimate_model_bytes(copies[0], threads=1).bytes
    assert one > 0 and all(estimate_model_bytes(c, threads=1).bytes == one for c in copies)
    tight = LocalPool(2, 2 * WORKER_BASE_BYTES + one + one // 2)   # two workers, room for one model
    result = run_survey(copies, jsonl=str(tmp_path / "a.jsonl"), backend=tight)
    assert tight.workers == 2 and result.stats.peak_models == 1 and result.stats.peak_bytes == one
    roomy = LocalPool(2, 2 * WORKER_BASE_BYTES + 10 * one)
    result = run_survey(copies, jsonl=str(tmp_path / "b.jsonl"), backend=roomy)
    assert result.stats.peak_models == 2 and all(r["status"] == "ok" for r in result.new)


@pytest.fixture
def dead_hub(monkeypatch, dead_endpoint):
    for k, v in dead_endpoint.items():
        monkeypatch.setenv(k, v)
    return dead_endpoint


def test_pool_retries_transient_failures_only(zoo, dead_hub, tmp_path):
    pool = LocalPool(2, 8 * WORKER_BASE_BYTES, retries=2)
    result = run_survey(["org/unreachable", zoo[5], zoo[0]], jsonl=str(tmp_path / "r.jsonl"), backend=pool)
    rows = {r["source"]: r for r in result.new}
    assert rows["org/unreachable"]["error_kind"] == "transient"
    assert re.search(r"cannot be reached|network error", rows["org/unreachable"]["error"])
    assert rows[zoo[5]]["error_kind"] == "bad-input" and rows[zoo[0]]["status"] == "ok"
    assert result.stats.retries == 2   # the transient one, twice; bad input never


def test_ray_retries_transient_failures(zoo, dead_hub, ray_local, tmp_path):
    from idinspect.survey.ray_backend import RayBackend

    backend = RayBackend(retries=1)
    result = run_survey(["org/unreachable", zoo[6]], jsonl=str(tmp_path / "r.jsonl"), backend=backend)
    rows = {r["source"]: r for r in result.new}
    assert rows["org/unreachable"]["error_kind"] == "transient"
    assert re.search(r"cannot be reached|network error", rows["org/unreachable"]["error"])
    assert rows[zoo[6]]["error_kind"] == "bad-input"


def test_cli_exit_status_and_outputs(zoo, tmp_path):
    out, page, table = tmp_path / "s.jsonl", tmp_path / "s.html", tmp_path / "s.parquet"
    r = run_cli("survey", *zoo[:2], "--jsonl", out, "--html", page, "--parquet", table, "--workers", "2",
                "--fingerprint")
    assert r.code == 0, r.stderr
    assert "2 ok, 0 failed" in r.stderr and page.read_text().count('class="pt-mha"') == 3
    digests = [row["fingerprint"] for row in read_jsonl(out)]
    assert all(d.startswith("sha256:") for d in digests) and all(f'title="{d}"' in page.read_text() for d in digests)
    listing = tmp_path / "models.txt"
    listing.write_text("\n".join(zoo[:2] + zoo[5:6]) + "\n")
    r = run_cli("survey", "--from", listing, "--jsonl", out, "--parquet", table)
    assert r.code == 1 and "0 ok, 1 failed, 2 already done" in r.stderr, r.stderr
    import pyarrow.parquet as pq

    assert sorted(pq.read_table(table).column("source").to_pylist()) == sorted(zoo[:2] + zoo[5:6])
    assert run_cli("survey", "--jsonl", out).code == 2
    assert run_cli("survey", "--from", tmp_path / "missing.txt").code == 2
    assert run_cli("survey", zoo[0], "--memory", "lots").code == 2


def test_killed_survey_resumes_without_losing_finished_models(zoo, tmp_path):
    out = tmp_path / "k.jsonl"
    models = zoo[:5]
    cmd = [sys.executable, "-m", "idinspect", "survey", *models, "--jsonl", str(out), "--workers", "1", "-q"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 2):
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = read_jsonl(out)
    assert 2 <= len(finished) and all(r["status"] == "ok" for r in finished)
    r = run_cli("survey", *models, "--jsonl", out)
    assert r.code == 0, r.stderr
    assert f"{len(finished)} already done" in r.stderr or len(finished) == 5
    rows = read_jsonl(out)
    assert sorted(r["source"] for r in rows) == sorted(models)   # nothing done twice, nothing lost
    assert all(json.loads(line) for line in out.read_text().splitlines())


def test_ray_tasks_keep_the_per_model_memory_limit(ray_local, tmp_path):
    """--model-memory holds in a Ray task as in the local pool: the row records the limit, bad input.
    (A BERT layer of width 1024: its 4 MB attention tensors cannot come from memory a worker freed.)"""
    import transformers

    from idinspect.survey.ray_backend import RayBackend

    config = transformers.BertConfig(hidden_size=1024, num_hidden_layers=1, num_attention_heads=8,
                                     intermediate_size=16, vocab_size=32, max_position_embeddings=16)
    transformers.BertModel(config).save_pretrained(tmp_path / "wide")
    backend = RayBackend(options=SurveyOptions(model_memory=64 * 1024))
    result = run_survey([str(tmp_path / "wide")], jsonl=str(tmp_path / "r.jsonl"), backend=backend)
    (row,) = result.new
    assert row["status"] == "failed" and "memory limit" in row["error"] and "--model-memory" in row["error"]
    assert row["error_kind"] == "bad-input"


def test_ray_tasks_keep_the_per_model_timeout(zoo, ray_local, tmp_path):
    """A hub that drips its answer holds one model in a Ray task; --timeout ends it there, the row says
    so (bad input: not retried), and the other model is surveyed."""
    from idinspect.survey.ray_backend import RayBackend
    from tests.support.hub_server import Fault, LocalHub, served_files

    with LocalHub() as hub:
        hub.add_repo("org/slow", served_files(zoo[0]))
        hub.faults.append(Fault("drip", host="hub", path="/api/models/", delay=0.2, times=100))
        env = {"HF_ENDPOINT": hub.endpoint, "IDINSPECT_HUB_DEADLINE": "600", "HF_HUB_CACHE": str(tmp_path / "cache"),
               "HF_HUB_OFFLINE": "0"}
        # the task's own timer counts the model's work, not its worker's start (the backstop allows for that:
        # WORKER_START_S); 15 s is ample for the tiny model's row beside three test processes and far shorter
        # than the drip (one byte per 0.2 s)
        backend = RayBackend(retries=1, options=SurveyOptions(timeout=15.0), runtime_env={"env_vars": env})
        result = run_survey(["org/slow", zoo[1]], jsonl=str(tmp_path / "r.jsonl"), backend=backend)
        requests = sum(1 for e in hub.log if e["path"].startswith("/api/models/"))
    rows = {r["source"]: r for r in result.new}
    ok = rows[zoo[1]]
    assert ok["status"] == "ok", f"{ok.get('error_kind')}: {ok.get('error')}"
    assert rows["org/slow"]["status"] == "failed" and "timed out after 15 s" in rows["org/slow"]["error"]
    assert rows["org/slow"]["error_kind"] == "bad-input" and requests <= 2
