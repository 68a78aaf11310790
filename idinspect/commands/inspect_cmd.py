"""``idinspect inspect MODEL``: the report (text on the terminal, or JSON on stdout)."""

from __future__ import annotations

import click

from .options import MODEL_FORMS, debug_option, hub_options


def report_options(f):
    """--json/--html files, --heads, --layers, --progress, --quiet, --timestamp (the reporter's options)."""
    for option in reversed([
        click.option("--json", "json_path", type=click.Path(dir_okay=False), metavar="PATH",
                     help="Also write the JSON report to PATH (any --format)."),
        click.option("--html", "html_path", type=click.Path(dir_okay=False), metavar="PATH",
                     help="Also write the single-file HTML report (charts, no network needed) to PATH."),
        click.option("--heads", is_flag=True, help="Text report: per-head ranks, condition numbers, top singular values."),
        click.option("--layers", type=click.Choice(["collapsed", "all"]), default="collapsed", show_default=True,
                     help="Text report: collapse runs of identical layers into one row, or show every layer."),
        click.option("--progress", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
                     help="Progress on stderr; auto: only on an interactive terminal and not in CI."),
        click.option("-q", "--quiet", is_flag=True, help="No progress and no 'wrote ...' messages (errors still print)."),
        click.option("--timestamp", is_flag=True,
                     help="Record the generation time (UTC, or SOURCE_DATE_EPOCH) in the JSON and HTML reports."),
    ]):
        f = option(f)
    return f


@click.command("inspect", epilog=MODEL_FORMS)
@click.argument("model")
@click.option("--revision", help="Hub branch, tag or commit (same as MODEL@REVISION).")
@hub_options
@click.option("--download", is_flag=True,
              help="Hub ids: download whole safetensors files into the hub cache instead of reading only the "
                   "headers and attention tensors' byte ranges.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: rich report on the terminal; json: the machine contract on stdout.")
@click.option("--device", default="cpu", show_default=True,
              help="Where the linear algebra runs: cpu or cuda (falls back to cpu with a warning).")
@click.option("--prove", is_flag=True,
              help="Also build a small twin of the attention with transformers and report its Jacobian "
                   "nullity next to its structural count.")
@click.option("--whole-model", "whole_model", is_flag=True,
              help="Also count the continuous symmetries of the whole checkpoint (norm gains, MLP scalings, "
                   "residual rotation or the tie commutant, LayerNorm mean directions, position tables); reads "
                   "headers and the final norm's gain only.")
@click.option("--heavy-tails", "heavy_tails", is_flag=True,
              help="Also fit the heavy-tailed spectra of the gauge-invariant circuits W_QK, W_OV per head and "
                   "per layer (alpha, stable rank, spectral norm, Marchenko-Pastur spikes, correlation traps); "
                   "about 20x the time of the rest at Llama-3.2-1B's shape.")
@click.option("--auto", is_flag=True,
              help="For a model type no adapter claims: infer the attention layout from the transformers module "
                   "itself (traced on a tiny twin) and prove it (reference to 1e-10, twin Jacobian nullity = count) "
                   "before counting; refused by name where the proof fails.")
@click.option("--trust-remote-code", "trust_remote_code", is_flag=True,
              help="With --auto: let transformers run the repository's own configuration and modelling code "
                   "(auto_map), as transformers would; never otherwise.")
@report_options
@debug_option
def inspect_command(model: str, revision: str | None, token: str | None, cache_dir: str | None, offline: bool,
                    download: bool, fmt: str, device: str, prove: bool, whole_model: bool, heavy_tails: bool,
                    auto: bool, trust_remote_code: bool, json_path: str | None, html_path: str | None, heads: bool,
                    layers: str, progress: str, quiet: bool, timestamp: bool) -> None:
    """Report a model's attention structure and parameter identification."""
    from ..sources.local_source import check_local_source
    from .paths import check_output_paths

    # before any work: a report never lands in its input, or in no folder
    check_output_paths([("--json", json_path), ("--html", html_path)], [model])
    check_local_source(model)   # refusals the file system decides, before torch loads
    if not (download or offline or auto):
        from ..sources.remote_warm import warm

        warm(model, revision, token=token, cache_dir=cache_dir)   # the hub's answers while torch imports
    from ..analysis.inspection import inspect
    from ..automatic.loading import load
    from ..progress import ProgressReporter, silence_library_progress
    from ..reports.emit import emit
    from ..reports.json_report import timestamp_now

    silence_library_progress()
    with ProgressReporter("never" if quiet or fmt == "json" else progress) as bars:
        with bars.stage(f"opening {model}"):
            opened = load(model, revision=revision, token=token, cache_dir=cache_dir, local_files_only=offline,
                          whole_files=download, auto=auto, trust_remote_code=trust_remote_code)
        with opened:
            bars.track_model(opened)
            result = inspect(opened, device=device, prove=prove, whole_model=whole_model, heavy_tails=heavy_tails,
                             on_layer=bars.on_layer)
    if timestamp:
        result["generated_at"] = timestamp_now()
    emit(result, fmt=fmt, json_path=json_path, html_path=html_path, heads=heads, layers=layers, quiet=quiet)
    if prove and not result["proof"]["agree"]:
        p = result["proof"]
        click.echo(f"idinspect: --prove failed: the twin's Jacobian nullity {p['jacobian_nullity']} differs from its "
                   f"structural count {p['structural_unidentified']}; please report this", err=True)
        raise click.exceptions.Exit(1)
    whole_proof = (result.get("whole_model") or {}).get("proof")
    if whole_proof is not None and not whole_proof["agree"]:
        click.echo(f"idinspect: --prove --whole-model failed: the twin's whole-model Jacobian nullity "
                   f"{whole_proof['jacobian_nullity']} / {whole_proof['jacobian_nullity_log_prob']} (logits / "
                   f"log-probabilities) differs from its count {whole_proof['whole_model_count']} / "
                   f"{whole_proof['whole_model_count_log_prob']}; please report this", err=True)
        raise click.exceptions.Exit(1)
