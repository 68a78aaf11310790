"""The rule table: stable ids, default severities and the text shown in CI tools (findings, audit
and every report writer read it; the one place a rule's severity is stated).

A rule id (``noop-bias``) is what findings carry, what policy files and ``--severity`` name and
what SARIF uses as ``ruleId``; ids are never renamed, so code-scanning alerts stay tracked across
runs. Severities are SARIF's levels: ``error`` > ``warning`` > ``note``; ``off`` disables a rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The one severity order, from least to most severe; ``--fail-on X`` fails on X and everything to
#: its right. Writers list findings worst first: :data:`WORST_FIRST`, or sort by -:func:`severity_rank`.
SEVERITIES: tuple[str, ...] = ("note", "warning", "error")
WORST_FIRST: tuple[str, ...] = tuple(reversed(SEVERITIES))
#: What a policy may assign to a rule: a severity, or ``off``.
LEVELS: tuple[str, ...] = (*SEVERITIES, "off")

def information_uri() -> str | None:
    """The project's home page from the package metadata (``[project.urls]``), else None: SARIF's
    ``informationUri`` is optional, and a placeholder address would send users nowhere."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        meta = metadata("idinspect")
    except PackageNotFoundError:
        return None
    for entry in meta.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        named = label.strip().lower() in ("homepage", "home", "source", "repository")
        if named and url.strip().startswith(("https://", "http://")):
            return url.strip()
    home = meta.get("Home-page")
    return home if home and home.startswith(("https://", "http://")) else None


def severity_rank(severity: str) -> int:
    """0 for note, 1 for warning, 2 for error (higher is worse); -1 for any other text, which
    therefore sorts after every known severity when worst comes first."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def at_or_above(severity: str, threshold: str) -> bool:
    """True when ``severity`` meets or exceeds ``threshold`` (inclusive, like ``--fail-on``)."""
    return severity_rank(severity) >= severity_rank(threshold)


@dataclass(frozen=True)
class Rule:
    """One audit rule; ``activation`` names the option that turns on an opt-in rule."""

    id: str
    name: str
    severity: str
    short: str
    full: str
    help: str
    tags: tuple[str, ...] = ("parameter-identification",)
    activation: str | None = None
    properties: dict = field(default_factory=dict)


RULES: tuple[Rule, ...] = (
    Rule(
        id="non-finite", name="NonFiniteTensor", severity="error",
        short="An attention tensor contains NaN or Inf",
        full="At least one attention weight or bias holds a NaN or infinite value. The checkpoint "
             "cannot compute a meaningful attention output and every count derived from it is void.",
        help="Re-export or re-download the checkpoint; a NaN usually comes from a diverged training "
             "step or a truncated/corrupted file. The message names the tensor and how many values are bad.",
        tags=("parameter-identification", "model-integrity")),
    Rule(
        id="overflow", name="OverflowingTensor", severity="error",
        short="An attention tensor holds values whose products overflow float64",
        full="At least one float64 attention weight or bias is so large (above sqrt(max_float64 / d)) "
             "that the products the attention forms overflow to infinity: the output and every "
             "count derived from the affected heads are unreliable.",
        help="Re-export or re-download the checkpoint; values near 1e154 and beyond are never trained "
             "weights. The message names the tensor, the largest value and the limit.",
        tags=("parameter-identification", "model-integrity")),
    Rule(
        id="noop-bias", name="NoOpKeyBias", severity="warning",
        short="A key bias has no effect on the attention output",
        full="Softmax is invariant to adding the same score to every key, so the (unrotated part of "
             "the) key bias b_K cancels exactly: those parameters are stored and trained but never "
             "change the model's function.",
        help="Drop the key bias (or its unrotated part) or zero it: `idinspect export MODEL OUT` writes "
             "the gauge-fixed checkpoint with no-op biases removed. Safe: the function is unchanged."),
    Rule(
        id="rank-deficient-head", name="RankDeficientHead", severity="warning",
        short="An attention head's W_QK or W_OV has numerically deficient rank",
        full="A head whose bilinear form W_QK = W_Q W_K^T or map W_OV = W_V W_O has numerical rank "
             "below its head dimension carries more freedom than the structural count says: some "
             "directions are dead or degenerate.",
        help="Inspect the head's spectrum with `idinspect MODEL --heads`; consider pruning the dead "
             "directions or the head. The message states the rank and the tolerance used."),
    Rule(
        id="absorbable-bias", name="AbsorbableValueBias", severity="note",
        short="A value bias can be folded into the output bias",
        full="Softmax rows sum to one, so the value bias b_V adds the constant sum_h b_V W_O^h to "
             "every position, which the output bias b_O can carry: b_V is redundant.",
        help="Fold b_V into b_O (the gauge-fixed export does this); the function is unchanged."),
    Rule(
        id="unsupported-architecture", name="UnsupportedArchitecture", severity="error",
        short="The model's architecture or a layer feature is not modelled",
        full="idinspect read the checkpoint but its model_type, or a feature of one of its layers "
             "(qk-norm, logit soft-capping, attention sinks, qkv clipping, degenerate RoPE "
             "frequencies), is outside what the identification mathematics models, so nothing "
             "about it can be certified.",
        help="Audit only supported families (BERT/RoBERTa, GPT-2, Llama/Mistral/Qwen2), or disable "
             "this rule for the model in [tool.idinspect.audit] overrides if that is intended.",
        tags=("parameter-identification", "coverage")),
    Rule(
        id="not-gauge-fixed", name="NotGaugeFixed", severity="error",
        short="The checkpoint is not in its gauge-fixed canonical form",
        full="The attention weights differ from their own balanced gauge-fixed form beyond rounding, "
             "so two functionally identical checkpoints need not have identical weights.",
        help="Publish the output of `idinspect export MODEL OUT` instead; verify it with "
             "`idinspect verify MODEL OUT`.",
        activation="--require-gauge-fixed / require-gauge-fixed = true"),
    Rule(
        id="identification-ratio", name="UnidentifiedRatioTooHigh", severity="error",
        short="Too large a share of attention parameters is unidentified",
        full="The model's identification ratio (unidentified attention parameters U over attention "
             "parameters P: gauge freedom plus no-op and absorbable biases) exceeds the configured limit.",
        help="Raise max-unidentified-ratio if the architecture is intended, or remove redundant "
             "parameters (biases, heads).",
        activation="--max-unidentified-ratio X / max-unidentified-ratio = X"),
    Rule(
        id="base-model-unrelated", name="DeclaredBaseUnrelated", severity="error",
        short="The model card's base_model is unrelated to the weights",
        full="The model card (README.md) declares a base_model, but comparing the weights with that base "
             "(gauge invariants of every attention head, idinspect compare) finds them unrelated: the "
             "lineage test does not reject independence at the configured alpha.",
        help="Correct the card's base_model, or check where the weights came from with "
             "`idinspect compare BASE MODEL` (its per-layer similarity and p-value).",
        activation="--check-base-model"),
)

RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}
RULE_IDS: tuple[str, ...] = tuple(RULES_BY_ID)


def default_severity(rule_id: str) -> str:
    """The severity :data:`RULES` gives ``rule_id``: what every finding of that rule carries before a
    policy or ``--severity`` changes it (the only place a finding's default severity comes from)."""
    return RULES_BY_ID[rule_id].severity


def rule_for(rule_id: str, severity: str = "warning") -> Rule:
    """The table entry for ``rule_id``; a generic entry for a rule the analyzer added later."""
    rule = RULES_BY_ID.get(rule_id)
    if rule is not None:
        return rule
    return Rule(id=rule_id, name=rule_id, severity=severity if severity in SEVERITIES else "warning",
                short=f"idinspect finding {rule_id}", full=f"idinspect reported a {rule_id} finding.",
                help="See the finding's message.")


def is_known(rule_id: str) -> bool:
    return rule_id in RULES_BY_ID


def is_active(rule_id: str, policy: dict | None) -> bool:
    """Whether a model's policy (``ModelPolicy.to_dict()``) evaluates ``rule_id`` at all."""
    if not policy:
        return True
    if policy.get("severity", {}).get(rule_id) == "off":
        return False
    if rule_id == "not-gauge-fixed":
        return bool(policy.get("require_gauge_fixed"))
    if rule_id == "identification-ratio":
        return policy.get("max_unidentified_ratio") is not None
    return True


__all__ = ["LEVELS", "RULES", "RULES_BY_ID", "RULE_IDS", "Rule", "SEVERITIES", "WORST_FIRST", "at_or_above",
           "default_severity",
           "information_uri", "is_active", "is_known", "rule_for", "severity_rank"]
