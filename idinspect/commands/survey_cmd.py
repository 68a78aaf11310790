"""``idinspect survey SOURCE... | --from FILE``: one row per model, on a local process pool or on Ray.

Exit status: 0 every model ok (or already done), 1 some model failed (its row says why), 2 bad
invocation (no model, unreadable --from file, an output that is not a survey, a missing extra).
"""

from __future__ import annotations

import re
import sys

import click

from .options import debug_option, hub_options

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``8G``, ``512M``, ``1.5GiB`` or a plain number of bytes (powers of 1024)."""
    m = _SIZE.match(text or "")
    if not m:
        raise click.BadParameter(f"{text!r} is not a size; write e.g. 8G, 512M or a number of bytes")
    return int(float(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper()))


def _finite(value: float, name: str) -> float:
    if value != value:   # NaN passes FloatRange's comparisons
        raise click.BadParameter(f"{value!r} is not a number of seconds", param_hint=name)
    return value


@click.command("survey")
@click.argument("sources", nargs=-1)
@click.option("--from", "from_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Read models from FILE, one per line (# comments); added after any SOURCE.")
@click.option("--jsonl", metavar="PATH", help="Append rows to PATH as JSON lines ('-': stdout). The resume journal.")
@click.option("--parquet", metavar="PATH", help="Write the rows as a Parquet table (needs idinspect[survey]).")
@click.option("--html", "html_path", metavar="PATH", help="Write the single-file HTML summary to PATH.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Models inspected at once: local pool (default 1; fewer if --memory does not allow them), "
                   "or the CPUs of a local Ray instance (default: all).")
@click.option("--memory", "memory", metavar="SIZE",
              help="Local pool: memory budget for workers and models in flight (default: half the available memory).")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="Run on Ray (needs idinspect[ray]): alone, a local instance; 'auto' or host:port joins a "
                   "cluster. Write --ray=ADDRESS or put --ray after the models.")
@click.option("--timeout", "timeout", type=click.FloatRange(min=0, min_open=True, max=1e9), default=3600.0,
              callback=lambda ctx, param, value: _finite(value, "--timeout"),
              show_default=True, help="Local pool: seconds one model may take; past it the model fails with "
                                      "'timed out' in its row (not retried).")
@click.option("--model-memory", "model_memory", metavar="SIZE",
              help="Local pool: memory one model's inspection may allocate beyond its worker's own (default: "
                   "the --memory budget less the workers' base); past it the model fails in its row (not retried).")
@click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True,
              help="Extra attempts for a model that failed transiently (network, worker died); bad input is never retried.")
@click.option("--fingerprint", is_flag=True,
              help="Also fingerprint each model: its digest fills the 'fingerprint' column (the one "
                   "'idinspect fingerprint --digest' prints); reads the attention tensors twice.")
@click.option("--whole-model", "whole_model", is_flag=True,
              help="Also count each model's whole-model continuous symmetries (columns whole_model_form, "
                   "whole_model_symmetries); reads the final norm's gain besides the attention.")
@click.option("--heavy-tails", "heavy_tails", is_flag=True,
              help="Also fit each model's heavy-tailed circuit spectra (columns heavy_tail_alpha_qk, "
                   "heavy_tail_alpha_ov, heavy_tail_layers_outside); several times the inspection's time.")
@click.option("--no-resume", is_flag=True, help="Inspect every model again, even if the output has it at this revision.")
@click.option("--device", default="cpu", show_default=True, help="Where each inspection's linear algebra runs.")
@hub_options
@click.option("-q", "--quiet", is_flag=True, help="No per-model lines on stderr (errors still print).")
@debug_option
def survey_command(sources: tuple[str, ...], from_file: str | None, jsonl: str | None, parquet: str | None,
                   html_path: str | None, workers: int | None, memory: str | None, ray_address: str | None,
                   timeout: float, model_memory: str | None, retries: int,
                   fingerprint: bool, whole_model: bool, heavy_tails: bool, no_resume: bool, device: str, token: str | None, cache_dir: str | None, offline: bool,
                   quiet: bool) -> None:
    """Inspect many models and write one row per model (JSONL and/or Parquet, plus an HTML summary)."""
    from ..progress import silence_library_progress
    from ..survey import SurveyOptions, read_sources, run_survey

    models = list(sources) + (read_sources(from_file) if from_file else [])
    if not models:
        raise click.UsageError("no models: give SOURCE... or --from FILE")
    from .paths import check_output_paths

    check_output_paths([("--jsonl", None if jsonl == "-" else jsonl), ("--parquet", parquet), ("--html", html_path)],
                       [*dict.fromkeys(models), from_file])   # before any work: never over an input
    if jsonl == "-" and not no_resume and not quiet:
        click.echo("survey: rows go to stdout; nothing to resume from", err=True)
    budget = parse_size(memory) if memory else None
    silence_library_progress()
    options = SurveyOptions(token=token, cache_dir=cache_dir, offline=offline, device=device,
                            fingerprint=fingerprint, whole_model=whole_model, heavy_tails=heavy_tails, timeout=timeout,
                            model_memory=parse_size(model_memory) if model_memory else None)
    backend = None
    if ray_address is not None:
        from ..survey.ray_backend import RayBackend, require_ray

        require_ray(local=ray_address == "local")     # before Ray is imported: stay on loopback
        backend = RayBackend(ray_address, workers=workers if ray_address == "local" else None,
                             retries=retries, options=options)
    workers = workers or 1
    progress = _Progress(len(dict.fromkeys(models)), quiet)
    result = run_survey(models, jsonl=jsonl, parquet=parquet, backend=backend, options=options,
                        resume=not no_resume, workers=workers, memory_budget=budget, retries=retries,
                        on_row=progress.row, on_skip=progress.skip)
    if html_path:
        from ..reports.survey_html import write_survey_html

        write_survey_html(result.rows, html_path)
    failed = result.failed
    if not quiet:
        ok = len(result.new) - sum(1 for r in result.new if r.get("status") != "ok")
        outputs = ", ".join(p for p in (jsonl if jsonl != "-" else None, parquet, html_path) if p)
        click.echo(f"survey: {ok} ok, {len(failed)} failed, {len(result.skipped)} already done"
                   + (f" -> {outputs}" if outputs else ""), err=True)
    if failed:
        raise click.exceptions.Exit(1)


class _Progress:
    """One line per finished model on stderr: ``[k/n] SOURCE ok (1.2 s)`` or ``... failed: why``."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet, self.done = total, quiet, 0

    def _line(self, text: str) -> None:
        self.done += 1
        if not self.quiet:
            from ..textsafe import visible

            click.echo(f"[{self.done}/{self.total}] {visible(text)}", err=True)
            sys.stderr.flush()

    def skip(self, source: str) -> None:
        self._line(f"{source} already done at this revision")

    def row(self, row: dict) -> None:
        seconds = row.get("seconds")
        took = f" ({seconds:.2f} s)" if isinstance(seconds, (int, float)) else ""
        if row.get("status") == "ok":
            self._line(f"{row['source']} ok{took}")
        else:
            self._line(f"{row['source']} failed ({row.get('error_kind')}): {row.get('error')}")

