"""The model's own tensors, declared as data: every stored tensor that is not an attention block's.

An adapter declares, in :attr:`Adapter.model_tensors`, each tensor of the checkpoint that belongs to
the model rather than to one attention block, as ``pattern -> component``, and in
:attr:`Adapter.not_analysed_tensors` each tensor it leaves out of every analysis, as ``pattern ->
reason``. The coverage check (:mod:`idinspect.sources.coverage`) then refuses any stored tensor that
is neither read by an attention block nor declared here, by name: nothing is left out silently.

Pattern syntax (matched against the whole name, below the model prefix or from the root): ``.`` is
a literal dot, ``{n}`` a layer number, ``*`` one name component (no dot), ``**`` anything (or
nothing), ``(a|b)`` alternatives and ``(...)?`` an optional part. ``layers.{n}.mlp.(gate|up|down)_proj.weight`` declares a Llama MLP.

A table shared by all blocks (T5's relative-position bias, stored once in block 0) is one stored
tensor and is counted once.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: The model-level components a tensor can belong to.
COMPONENTS = ("embedding", "position", "relative_bias", "norm", "mlp", "head", "projection")

#: Task heads that any family's checkpoint may carry below or beside the base model, declared once
#: for all (a family's own declarations come first).
TASK_HEADS: dict[str, str] = {
    "lm_head.(weight|bias)": "head",
    "score.(weight|bias)": "head",
    "classifier.**": "head",
    "qa_outputs.(weight|bias)": "head",
}


@lru_cache(maxsize=None)
def compile_pattern(pattern: str) -> re.Pattern:
    """The regular expression of one declaration pattern (syntax in the module docstring)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern.startswith("{n}", i):
            out.append(r"\d+")
            i += 3
        elif pattern[i] == "*":
            out.append(r"[^.]+")
            i += 1
        elif pattern[i] in "(|)?":
            out.append(pattern[i])
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def match(declarations: dict[str, str], key: str, prefix: str) -> str | None:
    """The value (component or reason) of the first pattern matching ``key`` (below ``prefix`` or whole)."""
    names = (key[len(prefix):], key) if prefix and key.startswith(prefix) else (key,)
    for pattern, value in declarations.items():
        rx = compile_pattern(pattern)
        if any(rx.fullmatch(n) for n in names):
            return value
    return None


__all__ = ["COMPONENTS", "TASK_HEADS", "compile_pattern", "match"]
