"""``idinspect audit MODEL [MODEL ...]``: gate checkpoints in CI.

Exit status: 0 no finding at or above ``--fail-on``; 1 some; 2 an error of the tool or input (an
unreadable or missing model, an empty directory, a bad policy, an unknown rule), in every output
format. With several models an unreadable one still lets the others be audited and reported,
and the run exits 2. ``--exit-zero`` reports findings without failing (errors still exit 2).
Machine formats go to stdout (or ``--output``); messages go to stderr.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from ..audit.baseline import Baseline, render as render_baseline
from ..audit.policy import cli_settings, load_policy
from ..rules import RULE_IDS, SEVERITIES
from ..audit.run import AuditResult, run_audit
from .options import MODEL_FORMS, debug_option, hub_options
from ..errors import IdinspectError
from ..reports.atomic import write_text_atomic
from ..sources.file_names import CONFIG_FILE, INDEX_FILE, SAFETENSORS_SUFFIX
from ..textsafe import visible
from ..reports.summary import plural

FORMATS = ("text", "json", "sarif", "github", "junit")
#: Files that stand for their checkpoint directory (so pre-commit can pass changed files).
CHECKPOINT_FILES = (CONFIG_FILE, INDEX_FILE)


def _targets(models: tuple[str, ...]) -> list[str]:
    """Models as given, with a checkpoint's own files (config.json, *.safetensors, the index)
    replaced by their directory; duplicates dropped, order kept."""
    out: list[str] = []
    for m in models:
        p = Path(m)
        if p.is_file() and (p.name in CHECKPOINT_FILES or p.suffix == SAFETENSORS_SUFFIX):
            m = str(p.parent)  # an existing directory: always read as a path, never a hub id
        if m not in out:
            out.append(m)
    return out


def render(result: dict, fmt: str, show_all: bool = False, color: bool = True) -> str | None:
    """The report text for ``fmt``; for ``text`` on the terminal, prints and returns None."""
    if fmt == "json":
        return json.dumps(result, indent=2) + "\n"
    if fmt == "sarif":
        from ..reports.sarif import render_sarif

        return render_sarif(result)
    if fmt == "github":
        from ..reports.github import render_github

        return render_github(result)
    if fmt == "junit":
        from ..reports.junit import render_junit

        return render_junit(result)
    from ..reports.audit_text import render_audit

    if color:
        render_audit(result, show_all=show_all)
        return None
    import io

    buf = io.StringIO()
    render_audit(result, Console(file=buf, width=100, color_system=None, force_terminal=False, _environ={}),
                 show_all=show_all)
    return buf.getvalue()


def _emit(result: AuditResult, fmt: str, output: str | None, show_all: bool, err: Console) -> None:
    data = result.to_dict()
    text = render(data, fmt, show_all=show_all, color=output is None)
    if output is not None:
        _write(output, text or "")
        err.print(f"idinspect audit: wrote {escape(output)}", highlight=False)
    elif text is not None:
        click.echo(text, nl=False)
    if fmt == "github" and os.environ.get("GITHUB_STEP_SUMMARY"):
        from ..reports.github import step_summary

        try:
            with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
                fh.write(step_summary(data))
        except OSError as exc:
            err.print(f"warning: cannot append to $GITHUB_STEP_SUMMARY ({escape(str(exc))})", highlight=False)


def _write(path: str, text: str) -> None:
    """An output file, whole or not at all; a failure is a one-line error naming the path."""
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise IdinspectError(f"{path}: cannot write ({exc.strerror or exc}); check that the folder exists "
                             "and is writable") from None


def _debug_logging() -> None:
    """With ``--debug``, show the tracebacks of per-model failures (logged, not raised) on stderr."""
    from .options import _DEBUG

    if _DEBUG["on"]:
        import logging

        logger = logging.getLogger("idinspect.audit")
        if not logger.handlers:
            logger.addHandler(logging.StreamHandler())
        logger.setLevel(logging.DEBUG)


@click.command("audit", epilog="Exit status: 0 pass; 1 a finding at or above --fail-on; 2 an error (missing, empty or "
                                "unreadable model, bad policy or baseline, unknown rule), whatever --format. " + MODEL_FORMS)
@click.argument("models", nargs=-1, required=True, metavar="MODEL [MODEL ...]")
@click.option("--fail-on", type=click.Choice(SEVERITIES), default=None,
              help="Exit 1 when a finding is at or above this severity. [default: error, or fail-on in the policy]")
@click.option("--exit-zero", is_flag=True, help="Report findings but exit 0 (errors still exit 2).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="text (rich), json (contract + audit), sarif (GitHub code scanning), github (annotations), junit.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the report to FILE (atomically) instead of stdout.")
@click.option("--config", type=click.Path(dir_okay=False), default=None,
              help="Policy file: a TOML with [tool.idinspect.audit] or the same keys at top level.")
@click.option("--no-config", is_flag=True, help="Ignore pyproject.toml policy discovery.")
@click.option("--severity", "severity", multiple=True, metavar="RULE=LEVEL",
              help=f"Set a rule's severity (error, warning, note, off); repeatable. Rules: {', '.join(RULE_IDS)}.")
@click.option("--disable", multiple=True, metavar="RULE", help="Turn a rule off; repeatable.")
@click.option("--require-gauge-fixed/--no-require-gauge-fixed", default=None,
              help="Report not-gauge-fixed when a checkpoint differs from its canonical form beyond rounding.")
@click.option("--gauge-rtol", type=float, default=None, help="Relative tolerance for --require-gauge-fixed.")
@click.option("--max-unidentified-ratio", type=float, default=None, metavar="X",
              help="Report identification-ratio when the unidentified share U/P exceeds X (0..1).")
@click.option("--baseline", type=click.Path(dir_okay=False), default=None,
              help="Report only findings not recorded in this baseline file.")
@click.option("--write-baseline", type=click.Path(dir_okay=False), default=None,
              help="Record the current findings in FILE and exit 0 (2 on errors, and then nothing is written).")
@click.option("--all", "show_all", is_flag=True, help="text: list every finding (default: the first 50 per model).")
@click.option("--check-base-model", "check_base_model", is_flag=True,
              help="Compare each model with the base_model its model card (README.md) declares: a finding "
                   "base-model-unrelated when the weights are unrelated to it (lineage p-value).")
@hub_options
@debug_option
@click.pass_context
def audit_command(ctx: click.Context, models: tuple[str, ...], fail_on: str | None, exit_zero: bool, fmt: str,
                  output: str | None, config: str | None, no_config: bool, severity: tuple[str, ...],
                  disable: tuple[str, ...], require_gauge_fixed: bool | None, gauge_rtol: float | None,
                  max_unidentified_ratio: float | None, baseline: str | None, write_baseline: str | None,
                  show_all: bool, token: str | None, cache_dir: str | None, offline: bool,
                  check_base_model: bool = False) -> None:
    """Audit models against rules and a policy; exit 0 pass, 1 findings, 2 error.

    MODEL is anything `idinspect inspect` accepts: a checkpoint directory (or its config.json /
    safetensors files), a hub id org/name[@revision], or pkg:PACKAGE/SUBDIR.
    """
    err = Console(stderr=True, highlight=False)
    _debug_logging()
    from .paths import check_output_paths

    # before any work, and before any document is written: never into an input
    check_output_paths([("--output", output), ("--write-baseline", write_baseline)], _targets(models))
    try:
        policy = load_policy(Path(config) if config else None, isolated=no_config)
        policy = policy.with_cli(cli_settings(severity, disable, require_gauge_fixed, gauge_rtol, max_unidentified_ratio),
                                 fail_on)
        base_path = Path(baseline) if baseline else policy.baseline
        base = None
        if base_path is not None and not (write_baseline and not base_path.exists() and baseline is None):
            base = Baseline.read(base_path)
    except IdinspectError as exc:
        result = AuditResult([], fail_on or "error", exit_zero=exit_zero, error=str(exc))
        err.print(f"[bold red]error:[/] {escape(visible(str(exc)))}", soft_wrap=True)
        if fmt != "text" or output is not None:  # machine formats still get a document that says so
            _emit(result, fmt, output, show_all, err)
        ctx.exit(2)
    result = run_audit(_targets(models), policy, baseline=base, exit_zero=exit_zero,
                       writing_baseline=write_baseline is not None, token=token, cache_dir=cache_dir, offline=offline,
                       check_base_model=check_base_model)
    for m in result.models:
        if m.error is not None:
            where = "" if m.source in m.error else f"{escape(m.source)}: "
            err.print(f"[bold red]error:[/] {visible(where)}{escape(visible(m.error))}", soft_wrap=True)
    if write_baseline is not None:
        if result.exit_code() == 2:
            err.print(f"error: baseline {escape(write_baseline)} not written: some models could not be audited")
        else:
            try:
                _write(write_baseline, render_baseline(result.baseline_entries()))
            except IdinspectError as exc:
                result.error = str(exc)
                err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
            else:
                err.print(f"idinspect audit: recorded {plural(len(result.baseline_entries()), 'finding')} in "
                          f"{escape(write_baseline)}")
    _emit(result, fmt, output, show_all, err)
    ctx.exit(result.exit_code())
