"""The attention forms behind one protocol (idinspect/forms): every form implements all of
:class:`idinspect.forms.Form`, and no module outside idinspect/forms asks which form it holds."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from idinspect.forms import FORMS, Form, form_of
from idinspect.layer.attention_layer import AttentionLayer
from idinspect.layer.latent_layer import LatentAttentionLayer

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = sorted(n for n in {*Form.__annotations__, *vars(Form)} if not n.startswith("_"))


@pytest.mark.parametrize("name", sorted(FORMS))
def test_every_form_implements_the_whole_protocol(name):
    form = FORMS[name]
    assert form.name == name
    missing = [m for m in MEMBERS if not hasattr(form, m)]
    assert not missing, f"form {name} lacks {missing}"
    for m in MEMBERS:
        if callable(getattr(Form, m, None)):
            want = list(inspect.signature(getattr(Form, m)).parameters)[1:]
            got = list(inspect.signature(getattr(form, m)).parameters)
            assert got == want, f"{name}.{m}{got} differs from the protocol's {want}"


def test_layers_and_adapters_name_their_form():
    assert form_of(AttentionLayer).name == "per_head" and form_of(LatentAttentionLayer).name == "latent"
    from idinspect.adapters import ADAPTERS

    assert {ADAPTERS[t].form for t in ("llama", "deepseek_v2", "deepseek_v3", "minicpm3")} == {"per_head", "latent"}
    with pytest.raises(TypeError, match="names no attention form"):
        form_of(object())


def _branch_points(path: Path) -> list[str]:
    """Places in a module that ask which form they hold: isinstance against a layer class, the old
    ``is_latent``/``latent`` flag, or a comparison with a form's name."""
    out = []
    forms = set(FORMS)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            names = {getattr(n, "id", getattr(n, "attr", None)) for n in ast.walk(node.args[1])}
            if names & {"AttentionLayer", "LatentAttentionLayer"}:
                out.append(f"{path}:{node.lineno} isinstance")
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and node.args[1].value == "latent"):
            out.append(f"{path}:{node.lineno} getattr latent")
        elif isinstance(node, ast.Name) and node.id == "is_latent":
            out.append(f"{path}:{node.lineno} is_latent")
        elif isinstance(node, ast.Attribute) and node.attr in ("latent", "latent_summary", "require_per_head"):
            out.append(f"{path}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.Compare):
            consts = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
            attrs = {a.attr for a in ast.walk(node) if isinstance(a, ast.Attribute)}
            if consts & forms and "form" in attrs:
                out.append(f"{path}:{node.lineno} form ==")
    return out


def test_no_stage_branches_on_the_form():
    """0 branch points outside idinspect/forms (there were 14 before the protocol: docs/layout.md)."""
    found = []
    for folder in ("idinspect", "adapters", "reports"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "forms" in path.relative_to(ROOT).parts:
                continue
            found += _branch_points(path)
    assert found == []


def test_the_branch_finder_finds_branches(tmp_path):
    """The scan above would see a branch if one came back."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(layer, a):\n    if isinstance(layer, LatentAttentionLayer):\n        return 1\n"
                   "    if a.form == 'latent':\n        return 2\n    if getattr(a, 'latent', False):\n        return 3\n"
                   "    return a.adapter.latent\n")
    assert len(_branch_points(bad)) == 4
