"""Audit models: inspect each, add the audit's own rules, apply the policy and the baseline.

The result is one JSON-ready dict (:meth:`AuditResult.to_dict`) that every writer reads: the
analyzer's contract per model plus an ``audit`` object (policy used, findings with severity,
location and fingerprint, counts, verdict), and a top-level ``audit`` summary with the exit code.

Exit code: 2 if the tool failed or any model was unreadable (the others are still audited and
reported), else 1 if any finding is at or above ``fail_on`` (unless ``exit_zero`` or a baseline
is being written), else 0. It never depends on the output format.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from ..errors import IdinspectError, UnsupportedLayerError
from ..sources.file_names import CONFIG_FILE
from . import checks
from .baseline import Baseline, Entry, fingerprint
from .policy import ModelPolicy, Policy
from ..rules import WORST_FIRST, at_or_above, rule_for, severity_rank

log = logging.getLogger("idinspect.audit")

def fingerprint_key(item: dict) -> str | None:
    """What identifies a finding within its model: the tensor, qualified by head and kind where
    the analyzer reports one finding per head of the same tensors (``rank-deficient-head``)."""
    tensor = item.get("tensor")
    key = tensor if isinstance(tensor, str) else ""
    for field_name in ("kind", "head"):
        value = item.get(field_name)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            key += f"#{field_name}={value}"
    return key or None


@dataclass
class Finding:
    """A finding after policy: effective severity, the file that holds it and its fingerprint."""

    rule: str
    severity: str
    message: str
    tensor: str | None
    layer: int | None
    file: str
    path: str
    uri: str
    fingerprint: str
    key: str | None = None
    baselined: bool = False

    def to_dict(self) -> dict:
        return {"rule": self.rule, "severity": self.severity, "message": self.message, "tensor": self.tensor,
                "layer": self.layer, "file": self.file, "path": self.path, "uri": self.uri,
                "fingerprint": self.fingerprint}


@dataclass
class ModelResult:
    source: str
    identity: str
    policy: ModelPolicy | None
    report: dict | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None

    @property
    def active(self) -> list[Finding]:
        """Findings not covered by the baseline, worst first."""
        return [f for f in self.findings if not f.baselined]

    def counts(self) -> dict[str, int]:
        counts = {s: 0 for s in WORST_FIRST}
        for f in self.active:
            counts[f.severity] += 1
        return counts

    def verdict(self, fail_on: str) -> str:
        if self.error is not None:
            return "error"
        return "fail" if any(at_or_above(f.severity, fail_on) for f in self.active) else "pass"

    def to_dict(self, fail_on: str) -> dict:
        base = dict(self.report) if self.report is not None else {"model": {"source": self.source}}
        base["audit"] = {
            "source": self.source, "identity": self.identity,
            "policy": self.policy.to_dict() if self.policy else None,
            "counts": self.counts(), "baselined": sum(f.baselined for f in self.findings),
            "verdict": self.verdict(fail_on), "error": self.error,
            "findings": [f.to_dict() for f in self.active],
        }
        return base


@dataclass
class AuditResult:
    models: list[ModelResult]
    fail_on: str
    exit_zero: bool = False
    writing_baseline: bool = False
    config: str | None = None
    baseline: str | None = None
    error: str | None = None

    def exit_code(self) -> int:
        if self.error is not None or any(m.error is not None for m in self.models):
            return 2
        if self.exit_zero or self.writing_baseline:
            return 0
        return 1 if any(m.verdict(self.fail_on) == "fail" for m in self.models) else 0

    @property
    def passed(self) -> bool:
        """Every model was audited and none has a finding at or above ``fail_on`` (``--exit-zero`` aside)."""
        return self.verdict() == "pass"

    def __bool__(self) -> bool:
        """``if run_audit(...):`` asks "did the models pass?"."""
        return self.passed

    def verdict(self) -> str:
        code = self.exit_code()
        if code == 2:
            return "error"
        return "fail" if any(m.verdict(self.fail_on) == "fail" for m in self.models) else "pass"

    def counts(self) -> dict[str, int]:
        total = {s: 0 for s in WORST_FIRST}
        for m in self.models:
            for s, n in m.counts().items():
                total[s] += n
        return total

    def to_dict(self) -> dict:
        from ..analysis.inspection import SCHEMA_VERSION, tool_info

        return {
            "schema_version": SCHEMA_VERSION, "tool": tool_info(),
            "audit": {"fail_on": self.fail_on, "exit_zero": self.exit_zero, "config": self.config,
                      "baseline": self.baseline, "models": len(self.models), "counts": self.counts(),
                      "baselined": sum(sum(f.baselined for f in m.findings) for m in self.models),
                      "errors": sum(m.error is not None for m in self.models) + (self.error is not None),
                      "verdict": self.verdict(), "exit_code": self.exit_code(), "error": self.error},
            "models": [m.to_dict(self.fail_on) for m in self.models],
        }

    def baseline_entries(self) -> list[Entry]:
        return [Entry(f.fingerprint, f.rule, m.identity, f.key) for m in self.models for f in m.findings]


def model_identity(source: str, path: Path | None, kind: str | None, cwd: Path) -> str:
    """How a model is named in fingerprints: the hub id, ``pkg:...``, or a local path relative to
    the working directory (absolute when outside it), POSIX separators, no trailing slash."""
    if kind in ("local", "gguf") and path is not None and not source.startswith("pkg:"):
        return _relative(Path(path), cwd)
    if kind == "hub":
        return source.split("@", 1)[0]
    return source.rstrip("/")


def _relative(path: Path, cwd: Path) -> str:
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(Path(os.path.abspath(cwd))).as_posix() or "."
    except ValueError:
        return absolute.as_posix()


def _uri(path: Path, cwd: Path) -> str:
    """A SARIF artifact URI: relative to the working directory (the repository root in CI) when
    inside it, else an absolute ``file://`` URI."""
    rel = _relative(path, cwd)
    return Path(os.path.abspath(path)).as_uri() if rel.startswith("/") else quote(rel)


class Auditor:
    """Audits sources one by one under ``policy``; ``baseline`` suppresses known findings."""

    def __init__(self, policy: Policy, *, baseline: Baseline | None = None, token: str | None = None,
                 cache_dir: str | Path | None = None, offline: bool = False, cwd: Path | None = None,
                 check_base_model: bool = False):
        self.policy = policy
        self.check_base_model = check_base_model
        self.baseline = baseline
        self.load_options = {"token": token, "cache_dir": cache_dir, "local_files_only": offline}
        self.cwd = Path(cwd or Path.cwd())

    def audit(self, source: str) -> ModelResult:
        from ..model import load

        try:
            model = load(source, **self.load_options)
        except UnsupportedLayerError as exc:
            return self._unsupported(source, self._directory(source), str(exc))
        except IdinspectError as exc:
            directory = self._directory(source)
            message = checks.unsupported_model_type(directory)
            if message is not None:
                return self._unsupported(source, directory, message)
            return ModelResult(source, source.rstrip("/"), None, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug: still reported per model, exit status 2
            log.debug("loading %s failed", source, exc_info=True)
            return ModelResult(source, source.rstrip("/"), None, error=f"internal error: {type(exc).__name__}: {exc}")
        try:
            return self._audit_model(source, model)
        except IdinspectError as exc:
            return ModelResult(source, self._identity_of(source, model), None, error=str(exc))
        except Exception as exc:  # noqa: BLE001
            log.debug("auditing %s failed", source, exc_info=True)
            return ModelResult(source, self._identity_of(source, model), None,
                               error=f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)")
        finally:
            model.close()

    def _directory(self, source: str) -> Path | None:
        return checks.local_directory(source, self.load_options["cache_dir"])

    def _identity_of(self, source: str, model) -> str:
        prov = model.provenance
        return model_identity(source, prov.path, prov.kind, self.cwd)

    def _unsupported(self, source: str, directory: Path | None, message: str) -> ModelResult:
        from ..sources.hub import looks_like_path

        kind = "local" if looks_like_path(source) else ("hub" if not source.startswith("pkg:") else None)
        identity = model_identity(source, directory, kind, self.cwd)
        policy = self.policy.for_model(source, directory)
        result = ModelResult(source, identity, policy, report={"model": {"source": source}})
        self._add(result, checks.unsupported_architecture(message), directory, reader=None)
        return result

    def _audit_model(self, source: str, model) -> ModelResult:
        from ..analysis.inspection import inspect

        prov = model.provenance
        identity = self._identity_of(source, model)
        policy = self.policy.for_model(source, prov.path)
        result = ModelResult(source, identity, policy)
        try:
            report = inspect(model)
        except UnsupportedLayerError as exc:
            result.report = {"model": model.summary()}
            self._add(result, checks.unsupported_architecture(str(exc)), prov.path, model.reader)
            return result
        result.report = report
        raw = list(report.get("findings") or [])
        if policy.max_unidentified_ratio is not None and policy.level("identification-ratio") != "off":
            raw += checks.identification_ratio(report, policy.max_unidentified_ratio)
        if policy.require_gauge_fixed and policy.level("not-gauge-fixed") != "off":
            raw += checks.gauge_fixed(model, policy.gauge_rtol)
        if self.check_base_model and policy.level("base-model-unrelated") != "off":
            from .lineage import base_model_findings

            raw += base_model_findings(model, prov.path, self.load_options, self.cwd)
        self._add(result, raw, prov.path, model.reader)
        return result

    def _add(self, result: ModelResult, raw: list[dict], directory: Path | None, reader) -> None:
        """Apply the policy to analyzer-style findings, locate them, fingerprint, baseline."""
        policy = result.policy
        out = []
        for item in raw:
            rule_id = str(item.get("rule"))
            rule = rule_for(rule_id, str(item.get("severity", "warning")))
            level = policy.level(rule_id, rule.severity)
            if level == "off":
                continue
            tensor = item.get("tensor")
            fname = self._file_of(item, reader)
            path = (Path(directory) / fname) if directory is not None else Path(fname)
            key = fingerprint_key(item)
            fp = fingerprint(rule_id, result.identity, key)
            out.append(Finding(rule=rule_id, severity=level, message=str(item.get("message", rule.short)),
                               tensor=tensor if isinstance(tensor, str) else None,
                               layer=item.get("layer") if isinstance(item.get("layer"), int) else None,
                               file=fname, path=_relative(path, self.cwd), uri=_uri(path, self.cwd), fingerprint=fp, key=key))
        out.sort(key=lambda f: (-severity_rank(f.severity), f.rule, f.layer if f.layer is not None else -1, f.tensor or ""))
        if self.baseline is not None:
            for f in out:
                f.baselined = self.baseline.consume(f.fingerprint)
        result.findings.extend(out)

    @staticmethod
    def _file_of(item: dict, reader) -> str:
        """The file a finding names, else the shard holding the first of its ``tensors``, else config.json."""
        if isinstance(item.get("file"), str):
            return item["file"]
        tensors = item.get("tensors")
        if reader is not None and isinstance(tensors, list):
            for name in tensors:
                fname = reader.file_of(name) if isinstance(name, str) else None
                if fname:
                    return fname
        return CONFIG_FILE


def run_audit(sources: list[str], policy: Policy, *, baseline: Baseline | None = None, exit_zero: bool = False,
              writing_baseline: bool = False, token: str | None = None, cache_dir: str | Path | None = None,
              offline: bool = False, cwd: Path | None = None, check_base_model: bool = False) -> AuditResult:
    """Audit every source (an unreadable one is recorded as an error and the rest still run);
    ``check_base_model``: compare each with the base_model its model card declares (:mod:`.lineage`)."""
    auditor = Auditor(policy, baseline=baseline, token=token, cache_dir=cache_dir, offline=offline, cwd=cwd,
                      check_base_model=check_base_model)
    models = []
    for source in sources:
        log.info("auditing %s", source)
        models.append(auditor.audit(source))
    return AuditResult(models, policy.fail_on, exit_zero=exit_zero, writing_baseline=writing_baseline,
                       config=str(policy.source) if policy.source else None,
                       baseline=str(baseline.path) if baseline is not None and baseline.path else None)


__all__ = ["AuditResult", "Auditor", "Finding", "ModelResult", "fingerprint_key", "model_identity", "run_audit"]
