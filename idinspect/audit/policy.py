"""Audit policy: ``[tool.idinspect.audit]`` in pyproject.toml, ``--config FILE``, then the command line.

Layers, later ones winning: rule defaults < the config table < each matching ``[[overrides]]``
entry (in file order) < command-line options. Keys are kebab-case; an unknown key, an unknown rule
or a wrong type is a :class:`PolicyError` (exit status 2) naming it.

.. code-block:: toml

    [tool.idinspect.audit]
    fail-on = "warning"                  # error | warning | note
    disable = ["absorbable-bias"]
    require-gauge-fixed = false
    gauge-rtol = 1e-6
    max-unidentified-ratio = 0.5
    baseline = "idinspect-baseline.json" # relative to this file

    [tool.idinspect.audit.severity]
    noop-bias = "error"                  # error | warning | note | off

    [[tool.idinspect.audit.overrides]]
    models = ["models/legacy-*"]         # globs on the source as given, or the path from this file
    severity = { noop-bias = "note" }
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import IdinspectError
from ..rules import LEVELS, RULES_BY_ID, SEVERITIES, is_known

try:
    import tomllib  # novermin: Python 3.10 takes the tomli fallback below
except ModuleNotFoundError:
    import tomli as tomllib  # the same parser, before it joined the standard library

TABLE = "[tool.idinspect.audit]"
_SETTING_KEYS = ("severity", "disable", "require-gauge-fixed", "gauge-rtol", "max-unidentified-ratio")
TOP_KEYS = ("fail-on", "baseline", "overrides", *_SETTING_KEYS)
OVERRIDE_KEYS = ("models", *_SETTING_KEYS)


class PolicyError(IdinspectError):
    """A bad policy file or option: exit status 2, the message names the key."""


@dataclass(frozen=True)
class Settings:
    """One layer of options; ``None`` (or an empty dict) means "not set here"."""

    severity: dict[str, str] = field(default_factory=dict)
    require_gauge_fixed: bool | None = None
    gauge_rtol: float | None = None
    max_unidentified_ratio: float | None = None

    def over(self, lower: "Settings") -> "Settings":
        """This layer on top of ``lower``."""
        return Settings(
            severity={**lower.severity, **self.severity},
            require_gauge_fixed=_pick(self.require_gauge_fixed, lower.require_gauge_fixed),
            gauge_rtol=_pick(self.gauge_rtol, lower.gauge_rtol),
            max_unidentified_ratio=_pick(self.max_unidentified_ratio, lower.max_unidentified_ratio))


def _pick(value, fallback):
    return fallback if value is None else value


@dataclass(frozen=True)
class Override:
    """``[[overrides]]``: settings for the models matching any of ``patterns``."""

    patterns: tuple[str, ...]
    settings: Settings

    def matches(self, names: list[str]) -> bool:
        return any(fnmatch.fnmatchcase(n, p) for n in names for p in self.patterns)


@dataclass(frozen=True)
class ModelPolicy:
    """The effective policy for one model."""

    severity: dict[str, str]
    require_gauge_fixed: bool
    gauge_rtol: float | None
    max_unidentified_ratio: float | None
    overrides: tuple[str, ...] = ()

    def level(self, rule_id: str, default: str = "warning") -> str:
        """The rule's severity, or ``off``; ``default`` for a rule outside the table."""
        return self.severity.get(rule_id, default)

    def to_dict(self) -> dict:
        return {"severity": dict(sorted(self.severity.items())), "require_gauge_fixed": self.require_gauge_fixed,
                "gauge_rtol": self.gauge_rtol, "max_unidentified_ratio": self.max_unidentified_ratio,
                "overrides": list(self.overrides)}


@dataclass(frozen=True)
class Policy:
    """Every layer, resolved per model by :meth:`for_model`."""

    config: Settings = field(default_factory=Settings)
    overrides: tuple[Override, ...] = ()
    cli: Settings = field(default_factory=Settings)
    config_fail_on: str | None = None
    cli_fail_on: str | None = None
    baseline: Path | None = None
    source: Path | None = None

    @property
    def fail_on(self) -> str:
        return self.cli_fail_on or self.config_fail_on or "error"

    def for_model(self, source: str, path: Path | None = None) -> ModelPolicy:
        """Resolve the layers for the model given as ``source`` (read from ``path`` if local)."""
        names = _model_names(source, path, self.source.parent if self.source else None)
        merged = self.config.over(Settings(severity={r.id: r.severity for r in RULES_BY_ID.values()}))
        matched = []
        for ov in self.overrides:
            if ov.matches(names):
                merged = ov.settings.over(merged)
                matched.append(", ".join(ov.patterns))
        merged = self.cli.over(merged)
        return ModelPolicy(severity=merged.severity, require_gauge_fixed=bool(merged.require_gauge_fixed),
                           gauge_rtol=merged.gauge_rtol, max_unidentified_ratio=merged.max_unidentified_ratio,
                           overrides=tuple(matched))

    def with_cli(self, settings: Settings, fail_on: str | None) -> "Policy":
        return replace(self, cli=settings, cli_fail_on=fail_on)


def _model_names(source: str, path: Path | None, config_dir: Path | None) -> list[str]:
    """What override globs are matched against: the source as given and, for local models, its
    path relative to the config file's directory and its absolute path (POSIX separators)."""
    names = [source.rstrip("/\\"), source]
    if path is not None:
        absolute = Path(os.path.abspath(path))
        names.append(absolute.as_posix())
        if config_dir is not None:
            names.append(Path(os.path.relpath(absolute, os.path.abspath(config_dir))).as_posix())
    return names


# --- reading files ---------------------------------------------------------------------------------

def discover(start: Path | None = None) -> Path | None:
    """The closest ``pyproject.toml`` from ``start`` (the cwd) upward that has the audit table."""
    here = Path(os.path.abspath(start or Path.cwd()))
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _has_table(_read_toml(candidate)):
            return candidate
    return None


def _has_table(data: dict) -> bool:
    tool = data.get("tool")
    return isinstance(tool, dict) and isinstance(tool.get("idinspect"), dict) and "audit" in tool["idinspect"]


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{path}: not UTF-8 text (byte {exc.start}); TOML files must be UTF-8") from None
    except RecursionError:
        raise PolicyError(f"{path}: not valid TOML (nested too deeply to read)") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{path}: not valid TOML ({exc})") from None


def load_policy(config: Path | None = None, *, discover_from: Path | None = None, isolated: bool = False) -> Policy:
    """The policy of ``config`` (a TOML file with the audit table or its keys at top level), else of
    the pyproject.toml found from ``discover_from`` upward, else the defaults (``isolated``: no file)."""
    if config is not None:
        path = Path(config)
        if not path.is_file():
            raise PolicyError(f"{path}: --config file does not exist")
        data = _read_toml(path)
        if "tool" in data:
            if not _has_table(data):
                raise PolicyError(f"{path}: has a [tool] table but no {TABLE}")
            table = data["tool"]["idinspect"]["audit"]
            where = TABLE
        else:
            table, where = data, "top level"
        return parse_table(table, path, where)
    if isolated:
        return Policy()
    found = discover(discover_from)
    if found is None:
        return Policy()
    return parse_table(_read_toml(found)["tool"]["idinspect"]["audit"], found, TABLE)


def parse_table(table, path: Path, where: str = TABLE) -> Policy:
    """Validate one audit table strictly and turn it into a :class:`Policy`."""
    ctx = f"{path}: {where}"
    if not isinstance(table, dict):
        raise PolicyError(f"{ctx} must be a table")
    _check_keys(table, TOP_KEYS, ctx)
    fail_on = table.get("fail-on")
    if fail_on is not None and fail_on not in SEVERITIES:
        raise PolicyError(f"{ctx}: fail-on must be one of {', '.join(SEVERITIES)} (got {fail_on!r})")
    baseline = table.get("baseline")
    if baseline is not None and not isinstance(baseline, str):
        raise PolicyError(f"{ctx}: baseline must be a path string (got {baseline!r})")
    overrides = table.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(o, dict) for o in overrides):
        raise PolicyError(f"{ctx}: overrides must be an array of tables ([[tool.idinspect.audit.overrides]])")
    parsed = []
    for i, entry in enumerate(overrides):
        octx = f"{ctx} overrides[{i}]"
        _check_keys(entry, OVERRIDE_KEYS, octx)
        models = entry.get("models")
        if isinstance(models, str):
            models = [models]
        if not isinstance(models, list) or not models or not all(isinstance(m, str) and m for m in models):
            raise PolicyError(f"{octx}: needs models = [\"glob\", ...] naming the models it applies to")
        parsed.append(Override(tuple(models), _settings(entry, octx)))
    return Policy(config=_settings(table, ctx), overrides=tuple(parsed), config_fail_on=fail_on,
                  baseline=(path.parent / baseline) if baseline else None, source=path)


def _check_keys(table: dict, known: tuple[str, ...], ctx: str) -> None:
    for key in table:
        if key not in known:
            hint = key.replace("_", "-")
            extra = f"; did you mean {hint!r}?" if hint in known else ""
            raise PolicyError(f"{ctx}: unknown key {key!r}{extra} (known: {', '.join(known)})")


def _settings(table: dict, ctx: str) -> Settings:
    severity = table.get("severity", {})
    if not isinstance(severity, dict):
        raise PolicyError(f"{ctx}: severity must be a table of rule = level")
    levels: dict[str, str] = {}
    for rule_id, level in severity.items():
        check_rule(rule_id, f"{ctx} severity")
        levels[rule_id] = check_level(level, f"{ctx} severity.{rule_id}")
    disable = table.get("disable", [])
    if not isinstance(disable, list) or not all(isinstance(r, str) for r in disable):
        raise PolicyError(f"{ctx}: disable must be a list of rule ids")
    for rule_id in disable:
        check_rule(rule_id, f"{ctx} disable")
        levels[rule_id] = "off"
    gauge = table.get("require-gauge-fixed")
    if gauge is not None and not isinstance(gauge, bool):
        raise PolicyError(f"{ctx}: require-gauge-fixed must be true or false (got {gauge!r})")
    return Settings(severity=levels, require_gauge_fixed=gauge,
                    gauge_rtol=_positive(table.get("gauge-rtol"), f"{ctx} gauge-rtol"),
                    max_unidentified_ratio=check_ratio(table.get("max-unidentified-ratio"),
                                                       f"{ctx} max-unidentified-ratio"))


def check_rule(rule_id, ctx: str) -> str:
    """Refuse a rule id that is not in the table (exit 2), listing the known ones."""
    if not isinstance(rule_id, str) or not is_known(rule_id):
        raise PolicyError(f"{ctx}: unknown rule {rule_id!r} (known: {', '.join(RULES_BY_ID)})")
    return rule_id


def check_level(level, ctx: str) -> str:
    if level not in LEVELS:
        raise PolicyError(f"{ctx}: must be one of {', '.join(LEVELS)} (got {level!r})")
    return level


def check_ratio(value, ctx: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise PolicyError(f"{ctx}: must be a number between 0 and 1 (got {value!r})")
    return float(value)


def _positive(value, ctx: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise PolicyError(f"{ctx}: must be a positive number (got {value!r})")
    return float(value)


def cli_settings(severity: tuple[str, ...] = (), disable: tuple[str, ...] = (), require_gauge_fixed: bool | None = None,
                 gauge_rtol: float | None = None, max_unidentified_ratio: float | None = None) -> Settings:
    """The command-line layer: ``--severity RULE=LEVEL``, ``--disable RULE`` and the thresholds."""
    levels: dict[str, str] = {}
    for item in severity:
        rule_id, sep, level = item.partition("=")
        if not sep:
            raise PolicyError(f"--severity {item!r}: expected RULE=LEVEL, e.g. noop-bias=error")
        check_rule(rule_id.strip(), "--severity")
        levels[rule_id.strip()] = check_level(level.strip(), f"--severity {rule_id.strip()}")
    for rule_id in disable:
        levels[check_rule(rule_id, "--disable")] = "off"
    return Settings(severity=levels, require_gauge_fixed=require_gauge_fixed,
                    gauge_rtol=_positive(gauge_rtol, "--gauge-rtol"),
                    max_unidentified_ratio=check_ratio(max_unidentified_ratio, "--max-unidentified-ratio"))


__all__ = ["ModelPolicy", "Override", "Policy", "PolicyError", "Settings", "cli_settings", "discover",
           "load_policy", "parse_table"]
