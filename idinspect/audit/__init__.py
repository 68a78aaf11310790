"""``idinspect audit``: gate checkpoints in CI the way linters gate code.

``rules`` is the rule table, ``policy`` reads ``[tool.idinspect.audit]`` and the options,
``baseline`` fingerprints findings, ``checks`` holds the audit's own rules and ``run`` audits
models into one JSON-ready result that the writers in ``idinspect.reports`` render.
"""

from __future__ import annotations

from .policy import Policy, PolicyError, load_policy
from ..rules import RULES, RULES_BY_ID, SEVERITIES, Rule
from .run import AuditResult, run_audit

__all__ = ["AuditResult", "Policy", "PolicyError", "RULES", "RULES_BY_ID", "Rule", "SEVERITIES", "load_policy",
           "run_audit"]
