"""SARIF 2.1.0 for ``idinspect audit --format sarif``, shaped for GitHub code scanning.

Reads the audit result dict (``AuditResult.to_dict()``). GitHub rejects a whole upload if any
result lacks a physical location, so every result points at a file of the model (the shard that
holds the tensor, else ``config.json``) at line 1, with the tensor as a logical location. Rule
ids are the audit's stable rule ids; ``partialFingerprints`` carry the baseline fingerprint.
Models that could not be audited appear as tool execution notifications, and
``invocations[0].executionSuccessful`` is false.
"""

from __future__ import annotations

import json

from ..rules import RULES, Rule, information_uri, rule_for

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
VERSION = "2.1.0"
FINGERPRINT_KEY = "idinspect/v1"


def _rule_descriptor(rule: Rule) -> dict:
    props: dict = {"tags": list(rule.tags), "precision": "very-high"}
    if rule.activation:
        props["activation"] = rule.activation
    props.update(rule.properties)
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.short},
        "fullDescription": {"text": rule.full},
        "help": {"text": rule.help, "markdown": f"**{rule.short}.** {rule.help}"},
        "defaultConfiguration": {"level": rule.severity},
        "properties": props,
    }


def _rules_for(result: dict) -> list[Rule]:
    """The whole table, plus any rule id a newer analyzer reported that the table lacks."""
    rules = list(RULES)
    known = {r.id for r in rules}
    for model in result.get("models", []):
        for f in model.get("audit", {}).get("findings", []):
            if f["rule"] not in known:
                rules.append(rule_for(f["rule"], f["severity"]))
                known.add(f["rule"])
    return rules


def _result(finding: dict, audit: dict, index: dict[str, int]) -> dict:
    tensor = finding.get("tensor")
    if tensor:
        logical = {"name": tensor, "fullyQualifiedName": tensor, "kind": "member"}
    else:
        logical = {"name": audit["identity"], "fullyQualifiedName": audit["identity"], "kind": "module"}
    props = {"model": audit["source"], "modelIdentity": audit["identity"], "file": finding["file"]}
    if finding.get("layer") is not None:
        props["layer"] = finding["layer"]
    if tensor:
        props["tensor"] = tensor
    return {
        "ruleId": finding["rule"],
        "ruleIndex": index[finding["rule"]],
        "level": finding["severity"],
        "message": {"text": f"{audit['source']}: {finding['message']}"},
        "locations": [{
            "physicalLocation": {"artifactLocation": {"uri": finding["uri"]}, "region": {"startLine": 1}},
            "logicalLocations": [logical],
        }],
        "partialFingerprints": {FINGERPRINT_KEY: finding["fingerprint"]},
        "properties": props,
    }


def sarif_log(result: dict) -> dict:
    """The SARIF log object for an audit result."""
    rules = _rules_for(result)
    index = {r.id: i for i, r in enumerate(rules)}
    results, notes = [], []
    for model in result.get("models", []):
        audit = model.get("audit", {})
        if audit.get("error"):
            notes.append({"level": "error", "message": {"text": f"{audit['source']}: {audit['error']}"}})
        for f in audit.get("findings", []):
            results.append(_result(f, audit, index))
    summary = result.get("audit", {})
    if summary.get("error"):
        notes.append({"level": "error", "message": {"text": summary["error"]}})
    tool = result.get("tool", {})
    invocation = {"executionSuccessful": not notes, "exitCode": summary.get("exit_code", 2 if notes else 0)}
    if notes:
        invocation["toolExecutionNotifications"] = notes
    driver = {"name": tool.get("name", "idinspect"), "version": str(tool.get("version", "0"))}
    if information_uri():  # only a real project URL from the package metadata; never a placeholder
        driver["informationUri"] = information_uri()
    run = {
        "tool": {"driver": {**driver, "rules": [_rule_descriptor(r) for r in rules]}},
        "invocations": [invocation],
        "results": results,
        "properties": {"failOn": summary.get("fail_on"), "verdict": summary.get("verdict"),
                       "baselined": summary.get("baselined", 0)},
    }
    return {"$schema": SCHEMA_URI, "version": VERSION, "runs": [run]}


def render_sarif(result: dict) -> str:
    """The SARIF document as text (deterministic: stable key order, two-space indent)."""
    return json.dumps(sarif_log(result), indent=2) + "\n"


__all__ = ["render_sarif", "sarif_log"]
