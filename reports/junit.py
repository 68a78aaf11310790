"""JUnit XML for ``idinspect audit --format junit``: one test suite per model, one test case per rule.

A test case fails when the model has findings of that rule at or above ``--fail-on``; findings
below it pass and are listed in ``system-out``; rules switched off by the policy (or opt-in rules
not switched on) are skipped; a model that could not be audited is one errored test case.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ..rules import RULES, at_or_above, is_active
from .summary import plural

_INVALID_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text) -> str:
    """XML 1.0 cannot carry most control characters, even escaped: replace them."""
    return _INVALID_XML.sub("\ufffd", "" if text is None else str(text))


def _line(f: dict) -> str:
    where = f" [{f['tensor']}]" if f.get("tensor") else ""
    return f"{f['severity']}: {f['message']}{where} ({f['file']})"


def _model_suite(model: dict, fail_on: str) -> ET.Element:
    audit = model.get("audit", {})
    source = audit.get("source", "?")
    suite = ET.Element("testsuite", name=_clean(f"idinspect audit {source}"))
    cases = failures = errors = skipped = 0
    if audit.get("error"):
        case = ET.SubElement(suite, "testcase", classname=_clean(source), name="audit")
        ET.SubElement(case, "error", type="error", message=_clean(audit["error"])).text = _clean(audit["error"])
        cases, errors = 1, 1
    else:
        findings = audit.get("findings", [])
        rule_ids = [r.id for r in RULES] + sorted({f["rule"] for f in findings} - {r.id for r in RULES})
        for rule_id in rule_ids:
            mine = [f for f in findings if f["rule"] == rule_id]
            case = ET.SubElement(suite, "testcase", classname=_clean(source), name=rule_id)
            cases += 1
            if not mine and not is_active(rule_id, audit.get("policy")):
                ET.SubElement(case, "skipped", message="rule not active for this model")
                skipped += 1
                continue
            failing = [f for f in mine if at_or_above(f["severity"], fail_on)]
            if failing:
                failures += 1
                el = ET.SubElement(case, "failure", type=rule_id,
                                   message=_clean(f"{plural(len(failing), 'finding')} at or above {fail_on}: {failing[0]['message']}"))
                el.text = _clean("\n".join(_line(f) for f in failing))
            passing = [f for f in mine if f not in failing]
            if passing:
                ET.SubElement(case, "system-out").text = _clean("\n".join(_line(f) for f in passing))
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return suite


def junit_tree(result: dict) -> ET.Element:
    """The ``<testsuites>`` element for an audit result."""
    summary = result.get("audit", {})
    fail_on = summary.get("fail_on", "error")
    root = ET.Element("testsuites", name="idinspect audit")
    suites = [_model_suite(m, fail_on) for m in result.get("models", [])]
    if summary.get("error"):
        suite = ET.Element("testsuite", name="idinspect audit", tests="1", failures="0", errors="1", skipped="0")
        case = ET.SubElement(suite, "testcase", classname="idinspect", name="audit")
        ET.SubElement(case, "error", type="error", message=_clean(summary["error"])).text = _clean(summary["error"])
        suites.insert(0, suite)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in suites)))
    root.extend(suites)
    return root


def render_junit(result: dict) -> str:
    tree = junit_tree(result)
    ET.indent(tree)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(tree, encoding="unicode") + "\n"


__all__ = ["junit_tree", "render_junit"]
