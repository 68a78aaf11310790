"""``idinspect verify A B``: exports verify (exit 0), tampered models do not (exit 1), errors exit 2;
the negative control (a generic GL on a RoPE model's Q/K) is caught; bf16 exports are judged
against the rounding baseline; big models go through accelerate's offload instead of failing."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

import idinspect
from idinspect.equivalence.verify import output_tolerance
from idinspect.exporting.shard_writer import write_safetensors
from tests.contract.test_export import export_ok, moved_checkpoint
from tests.support.cli import run_cli


def _checks(stdout: str) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(stdout)["checks"]}


def _edit_gains(directory, edit) -> None:
    """Rewrite the checkpoint at ``directory`` with ``edit(name, tensor)`` applied to every q/k norm tensor."""
    model = idinspect.load(directory)
    keys = {k for i in range(model.num_layers) for k in model.adapter.attention_keys(i)
            if "layernorm" in k or "_norm" in k}
    names = model.reader.keys()
    tensors = {k: (edit(k, model.reader.get(k).clone()) if k in keys else model.reader.get(k).clone()) for k in names}
    metadata = model.reader.metadata("model.safetensors")
    model.close()
    write_safetensors(directory / "model.safetensors", tensors, metadata)


def test_qk_gain_trade_verifies_and_a_changed_gain_is_caught(tiny_dir, tmp_path):
    """Phi's shared LayerNorm gain and bias after it (partial RoPE: planes and unrotated dims). A trade
    applied to the export (query gain and bias times 3 on plane 0, key ones over 3) verifies; one query
    gain entry changed by 1% (no trade) is caught by ``qk_gains`` alone, the raw tensors being no
    longer compared one by one."""
    src = tiny_dir("phi-qk-layernorm")
    export_ok(src, tmp_path / "out")
    plane = list(idinspect.load(src).layer(0).positional.rotary.plane_columns()[0])

    def traded(name, t):
        t[plane] = t[plane] * (3.0 if ".q_layernorm." in name else 1 / 3.0)
        return t

    shutil.copytree(tmp_path / "out", tmp_path / "traded")
    _edit_gains(tmp_path / "traded", traded)
    result = run_cli("verify", src, tmp_path / "traded", "--format", "json")
    assert result.code == 0, result.stdout
    assert _checks(result.stdout)["invariants"]["extra"]["per_invariant"]["qk_gains"]["error"] <= 1e-12

    def changed(name, t):
        if name.endswith("layers.0.self_attn.q_layernorm.weight"):
            t[plane[0]] *= 1.01
        return t

    _edit_gains(tmp_path / "out", changed)
    result = run_cli("verify", src, tmp_path / "out", "--format", "json", "--no-functional")
    assert result.code == 1
    checks = _checks(result.stdout)
    worst = checks["invariants"]["extra"]["per_invariant"]
    assert checks["tensors"]["passed"] is True and worst["qk_factors"]["error"] <= 1e-12
    assert worst["qk_gains"]["error"] > 1e-3 and "layer 0" in worst["qk_gains"]["where"]


def test_text_output_states_tolerances(tiny_dir, tmp_path):
    src = tiny_dir("gpt2")
    export_ok(src, tmp_path / "out")
    result = run_cli("verify", src, tmp_path / "out")
    assert result.code == 0
    bound = output_tolerance(src, tmp_path / "out")       # float64 run: the bound of verify's own functional check
    assert "tolerance 1.0e-10" in result.stdout and f"tolerance {bound.tolerance:.1e}" in result.stdout
    assert "rounding bound 8 x (" in result.stdout and "over 2 layers" in result.stdout
    assert result.stdout.rstrip().endswith("equivalent") and "Loading" not in result.stderr


def test_gauge_moved_model_is_equivalent(tiny_dir, tmp_path):
    """A model moved along its gauge orbit (not gauge-fixed) is still the same function."""
    src = tiny_dir("qwen2")
    moved = moved_checkpoint(src, tmp_path / "moved", seed=3)
    result = run_cli("verify", src, moved, "--format", "json")
    assert result.code == 0, result.stdout


def test_negative_control_generic_gl_on_rope_qk_is_caught(tiny_dir, tmp_path):
    """W_Q A, W_K A^-T keeps W_Q W_K^T but does not commute with RoPE: a different function."""
    src = tiny_dir("llama3-rope")
    broken = moved_checkpoint(src, tmp_path / "broken", seed=3, generic_qk=True)
    result = run_cli("verify", src, broken, "--format", "json")
    assert result.code == 1
    checks = _checks(result.stdout)
    assert checks["invariants"]["passed"] is False and checks["functional"]["passed"] is False
    worst = checks["invariants"]["extra"]["per_invariant"]
    assert worst["plane_QK"]["error"] > 1e-3 and worst["W_OV"]["error"] <= 1e-12
    assert run_cli("verify", src, broken).stdout.rstrip().endswith("NOT equivalent")


def test_changed_mlp_weight_is_caught(tiny_dir, tmp_path):
    src = tiny_dir("gpt2")
    changed = tmp_path / "changed"
    shutil.copytree(src, changed)
    model = idinspect.load(src)
    names = model.reader.keys()
    tensors = {k: model.reader.get(k) for k in names}
    name = next(k for k in tensors if k.endswith("mlp.c_fc.weight"))
    tensors[name] = tensors[name] * (1 + 1e-6)
    write_safetensors(changed / "model.safetensors", tensors, {"format": "pt"})
    result = run_cli("verify", src, changed, "--format", "json", "--no-functional")
    assert result.code == 1
    checks = _checks(result.stdout)
    assert checks["tensors"]["passed"] is False and name in checks["tensors"]["detail"]
    assert checks["invariants"]["passed"] is True and checks["functional"]["passed"] is None


def test_different_architectures_are_not_equivalent(tiny_dir):
    result = run_cli("verify", tiny_dir("gpt2"), tiny_dir("llama3-rope"))
    assert result.code == 1 and "NOT equivalent" in result.stdout


HALF_PRECISION_CASES = ["same-dtype bf16", "float64 cast to bf16", "same-dtype fp16"]


def _half_precision_export(case, tiny_dir, tmp_path):
    if case == "float64 cast to bf16":
        src, extra = tiny_dir("llama-bias"), ["--dtype", "bfloat16"]
    else:
        dtype = torch.bfloat16 if "bf16" in case else torch.float16
        src, extra = tiny_dir("qwen2", dtype=dtype), []
    export_ok(src, tmp_path / "out", *extra)
    return src, tmp_path / "out"


@pytest.mark.parametrize("case", HALF_PRECISION_CASES)
def test_half_precision_exports_are_judged_against_the_rounding_baseline(case, tiny_dir, tmp_path, monkeypatch):
    """With the floor of one rounding set to zero every bf16/fp16 check computes the rounding baseline,
    and its tolerance is BASELINE_FACTOR times the baseline's error."""
    import idinspect.equivalence.baseline as baseline

    src, out = _half_precision_export(case, tiny_dir, tmp_path)
    monkeypatch.setattr(baseline, "one_rounding", lambda dtype: 0.0)
    result = run_cli("verify", src, out, "--format", "json")
    assert result.code == 0, result.stdout
    assert json.loads(result.stdout)["dtype"] == ("float16" if "fp16" in case else "bfloat16")
    checks = _checks(result.stdout)
    for name in ("invariants", "functional"):
        c = checks[name]
        assert 1e-5 < c["baseline"] < 0.1 and c["error"] <= c["tolerance"] == pytest.approx(4 * c["baseline"])
    text = run_cli("verify", src, out).stdout
    assert "rounding baseline" in text


def test_the_rounding_baseline_is_computed_only_where_an_error_exceeds_one_rounding(tiny_dir, tmp_path):
    """By default a bf16/fp16 check within one rounding of its dtype passes without the baseline (its
    tolerance max(4 x baseline, one rounding) would pass it whatever the baseline), and one above it is
    judged against the baseline: both happen on these three exports (the float64 model cast to bf16
    moves its logits by more than one bf16 rounding), and every verdict is the one the baseline gives."""
    from idinspect.equivalence.baseline import BASELINE_FACTOR, one_rounding

    seen = set()
    for k, case in enumerate(HALF_PRECISION_CASES):
        src, out = _half_precision_export(case, tiny_dir, tmp_path / str(k))
        result = run_cli("verify", src, out, "--format", "json")
        assert result.code == 0, result.stdout
        floor = one_rounding(torch.float16 if "fp16" in case else torch.bfloat16)
        for name in ("invariants", "functional"):
            c = _checks(result.stdout)[name]
            if c["baseline"] is None:
                seen.add("skipped")
                assert c["error"] <= c["tolerance"] == floor
            else:
                seen.add("computed")
                assert c["error"] > floor and c["tolerance"] == pytest.approx(max(BASELINE_FACTOR * c["baseline"], floor))
                assert c["error"] <= c["tolerance"]
    assert seen == {"skipped", "computed"}


def test_bf16_tampering_beyond_rounding_is_caught(tiny_dir, tmp_path):
    """The baseline tolerance is not a blank cheque: 10% on one head's values fails."""
    src = tiny_dir("llama-bias")
    export_ok(src, tmp_path / "out", "--dtype", "bfloat16")
    model = idinspect.load(tmp_path / "out")
    names = model.reader.keys()
    tensors = {k: model.reader.get(k).clone() for k in names}  # own memory: the file is rewritten
    name = next(k for k in tensors if k.endswith("layers.0.self_attn.v_proj.weight"))
    tensors[name] = (tensors[name].to(torch.float64) * 1.1).to(torch.bfloat16)
    metadata = model.reader.metadata("model.safetensors")
    model.close()
    write_safetensors(tmp_path / "out" / "model.safetensors", tensors, metadata)
    result = run_cli("verify", src, tmp_path / "out", "--format", "json", "--no-functional")
    assert result.code == 1 and _checks(result.stdout)["invariants"]["passed"] is False


def test_big_models_go_through_offload(tiny_dir, tmp_path):
    src = tiny_dir("llama3-rope")
    export_ok(src, tmp_path / "out")
    result = idinspect.verify(src, tmp_path / "out", max_memory=20_000)
    functional = next(c for c in result.checks if c.name == "functional")
    assert result.equivalent and "offloaded" in functional.detail   # float32 compute: the bound of float32 arithmetic
    assert functional.tolerance == output_tolerance(src, tmp_path / "out", torch.float32).tolerance


def test_missing_model_is_exit_2(tiny_dir, tmp_path):
    result = run_cli("verify", tiny_dir("gpt2"), tmp_path / "missing")
    assert result.code == 2 and "no such file" in result.stderr


def test_verify_streams_a_model_whose_float64_copy_does_not_fit(tiny_dir, tmp_path):
    """max_memory between the stored model (plus its largest tensor in float64) and its float64
    copy: verify streams (float64 module by module) instead of offloading in float32."""
    from tests.support import tiny

    src = tiny.save(tiny.build("llama3-rope"), tmp_path / "src", dtype=torch.float32)
    export_ok(src, tmp_path / "out")
    with idinspect.load(src) as m:
        names = m.reader.keys()
        sizes = [m.reader.dtype(k).itemsize * m.reader.get(k).numel() for k in names]
    budget = sum(sizes) + 2 * max(sizes)                        # under the float64 copy (2 x stored)
    assert budget < 2 * sum(sizes)
    result = idinspect.verify(src, tmp_path / "out", max_memory=budget)
    functional = next(c for c in result.checks if c.name == "functional")
    assert result.equivalent and "streamed" in functional.detail   # the same float64 arithmetic as in memory
    assert functional.tolerance == output_tolerance(src, tmp_path / "out", torch.float64).tolerance


def test_in_memory_when_the_float64_copy_fits_half_the_available_memory(monkeypatch):
    """The stated rule (docs/verify.md): in memory when the copy in the compute dtype (float64; float32
    for bf16/fp16 checkpoints) fits in MEMORY_FRACTION of the available memory, however large; streamed
    when only the stored model fits; --memory picks a route."""
    from idinspect.equivalence import functional as fn

    monkeypatch.setattr(fn, "available_memory", lambda: 2**34)             # 16 GiB available
    fits, too_big = 2**33, 2**33 + 1                                         # float64 copies
    assert fn.plan_loading(fits, stored_bytes=fits // 4, largest_bytes=2**20) == fn.LoadPlan(False, torch.float64)
    assert fn.plan_loading(too_big, stored_bytes=too_big // 4, largest_bytes=2**20).streamed
    assert fn.plan_loading(2**36, stored_bytes=2**35, largest_bytes=2**20).offload
    assert fn.plan_loading(fits, stored_bytes=fits // 4, compute=torch.float32) == fn.LoadPlan(False, torch.float32)
    assert [fn.compute_dtype(t) for t in (torch.bfloat16, torch.float16, torch.float32, torch.float64)] == [
        torch.float32, torch.float32, torch.float64, torch.float64]
    assert fn.plan_loading(fits, stored_bytes=fits // 4, mode="stream").streamed
    assert fn.plan_loading(too_big, stored_bytes=too_big // 4, mode="memory") == fn.LoadPlan(False, torch.float64)
    assert fn.plan_loading(fits, stored_bytes=fits // 4, mode="offload").offload


def test_memory_option_is_used_and_stated(tiny_dir, tmp_path):
    src = tiny_dir("llama-gqa")
    res = run_cli("verify", src, src, "--memory", "stream", "--format", "json")
    assert res.code == 0, res.stderr
    assert "streamed" in _checks(res.stdout)["functional"]["detail"]


def test_teacher_forced_decode_is_the_models_own_greedy_decode(tmp_path):
    """Verify's B and rounding baseline check A's greedy continuation in one teacher-forced pass
    (``follow``): where the model's argmax reproduces it at every step, that is its own greedy
    continuation (the same model: identical, logits as its cached prompt pass); where it does not (a
    different model), the record holds the model's own continuation, as if it had decoded alone."""
    from idinspect.equivalence import functional as fn
    from tests.support import tiny

    a = tiny.save(tiny.build("llama3-rope"), tmp_path / "a", dtype=torch.float32)
    b = tiny.save(tiny.build("llama3-rope", seed=1), tmp_path / "b", dtype=torch.float32)
    ids = fn.probe_ids(idinspect.load(a).hf_config, 8, 5, 0)
    plan = fn.LoadPlan(offload=False, compute_dtype=torch.float64)
    own_a, own_b = (fn.run_model(m, ids, 5, plan) for m in (a, b))
    assert not torch.equal(own_a.decoded, own_b.decoded)          # the negative case really differs
    forced_a, forced_b = (fn.run_model(m, ids, 5, plan, follow=own_a.decoded) for m in (a, b))
    assert torch.equal(forced_a.decoded, own_a.decoded) and torch.equal(forced_b.decoded, own_b.decoded)
    for forced, own in ((forced_a, own_a), (forced_b, own_b)):
        assert forced.values.shape == own.values.shape
        assert torch.allclose(forced.values, own.values, rtol=0, atol=1e-12 * float(own.values.abs().max()))


def test_half_precision_functional_check_computes_in_float32_and_catches_tampering(tiny_dir, tmp_path):
    """bf16/fp16 checkpoints: the functional check runs in float32 (exact for their weights); its error
    is the float64 run's to within 1e-4 of the tolerance, far inside it, and a head's values scaled by
    1.5 in the export fail it (teacher-forced decode and all)."""
    from idinspect.equivalence import functional as fn

    src = tiny_dir("qwen2", dtype=torch.bfloat16)
    export_ok(src, tmp_path / "out")
    result = idinspect.verify(src, tmp_path / "out")
    functional = next(c for c in result.checks if c.name == "functional")
    assert result.equivalent and "in memory, float32" in functional.detail
    ids = fn.probe_ids(idinspect.load(src).hf_config, 16, 8, 0)
    errors = {}
    for compute in (torch.float32, torch.float64):
        plan = fn.LoadPlan(offload=False, compute_dtype=compute)
        out_a, out_b = (fn.run_model(m, ids, 8, plan) for m in (src, tmp_path / "out"))
        errors[compute] = float((out_a.values - out_b.values).abs().max() / out_a.values.abs().max())
    assert errors[torch.float32] == pytest.approx(functional.error, rel=1e-3)    # thread counts may differ
    assert abs(errors[torch.float32] - errors[torch.float64]) <= 1e-4 * functional.tolerance

    model = idinspect.load(tmp_path / "out")
    names = model.reader.keys()
    tensors = {k: model.reader.get(k).clone() for k in names}            # own memory: the file is rewritten
    name = next(k for k in tensors if k.endswith("layers.0.self_attn.v_proj.weight"))
    tensors[name] = (tensors[name].to(torch.float64) * 1.5).to(torch.bfloat16)
    metadata = model.reader.metadata("model.safetensors")
    model.close()
    write_safetensors(tmp_path / "out" / "model.safetensors", tensors, metadata)
    result = idinspect.verify(src, tmp_path / "out")
    functional = next(c for c in result.checks if c.name == "functional")
    assert not result.equivalent and functional.passed is False and functional.error > functional.tolerance


def test_transformers_runs_take_one_thread_on_an_oversubscribed_machine(monkeypatch):
    """The functional check's thread rule (docs/verify.md): one torch thread where as many other tasks
    as usable CPUs are runnable now (else, where that cannot be read, where the load average exceeds
    the usable CPUs), torch's own count otherwise; restored after the block."""
    from idinspect.numerics.parallel import usable_cpus
    from idinspect.equivalence import functional as fn

    before = torch.get_num_threads()
    monkeypatch.setattr(fn.os, "getloadavg", lambda: (usable_cpus() + 5.0, 0.0, 0.0))
    monkeypatch.setattr(fn, "runnable_elsewhere", lambda: float(usable_cpus()))
    assert fn.forward_threads() == 1
    monkeypatch.setattr(fn, "runnable_elsewhere", lambda: usable_cpus() - 1.0)   # a high load average alone
    assert fn.forward_threads() == before                                         # (verify's own threads) is not it
    monkeypatch.setattr(fn, "runnable_elsewhere", lambda: None)                  # no /proc/loadavg: the load average
    assert fn.forward_threads() == 1
    monkeypatch.setattr(fn.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert fn.forward_threads() == before
    with fn.kernel_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_runnable_elsewhere_reads_this_machine():
    """The running count of /proc/loadavg less the reading thread: a number at least 0 on Linux."""
    from idinspect.equivalence import functional as fn

    others = fn.runnable_elsewhere(samples=3, interval_s=0.0)
    if not os.path.exists("/proc/loadavg"):
        assert others is None
    else:
        assert others is not None and others >= 0
