"""``idinspect verify A B``: exit 0 when B computes what A computes, 1 when not, 2 on error."""

from __future__ import annotations

import json

import click

from ..textsafe import visible
from .options import MODEL_FORMS, debug_option, hub_options, progress_options


@click.command("verify", epilog=MODEL_FORMS)
@click.argument("a")
@click.argument("b")
@click.option("--functional/--no-functional", default=True, show_default=True,
              help="Also load both with transformers and compare outputs on seeded random token ids.")
@click.option("--tokens", type=click.IntRange(1), default=16, show_default=True, help="Probe sequence length.")
@click.option("--decode", type=click.IntRange(0), default=8, show_default=True,
              help="Greedy tokens compared for causal LMs.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random token ids.")
@click.option("--strict-config", is_flag=True, help="Fail on any differing config.json key, not only those the "
              "model's computation reads (docs/verify.md says how they are found); by default the others are notes.")
@click.option("--memory", type=click.Choice(["auto", "memory", "stream", "offload"]), default="auto", show_default=True,
              help="How the functional check holds each model: auto = in memory when its copy in the compute dtype "
                   "(float64; float32 for bf16/fp16 checkpoints) fits in half the available memory, else streamed "
                   "(stored dtype, widened block by block), else offloaded to disk (float32); or one of these by name.")
@hub_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: one line per check; json: the full record on stdout.")
@progress_options
@debug_option
@click.pass_context
def verify_command(ctx: click.Context, a: str, b: str, functional: bool, tokens: int, decode: int, seed: int,
                   strict_config: bool, memory: str, token: str | None, cache_dir: str | None, offline: bool, fmt: str,
                   progress: str, quiet: bool) -> None:
    """Check that checkpoint B computes the same function as A (e.g. B = idinspect export A).

    Layer-wise gauge invariants (cheap at any size), non-attention tensors, and (unless
    --no-functional) outputs of both models loaded by stock transformers. Tolerances depend on
    B's dtype and are printed; bfloat16/float16 are judged against the error of rounding A alone.
    Exit status: 0 equivalent, 1 not equivalent, 2 error.
    """
    from ..sources.local_source import check_local_source

    for model in (a, b):
        check_local_source(model)   # refusals the file system decides, before torch loads
    from ..equivalence.verify import verify
    from ..progress import ProgressReporter, silence_library_progress

    # transformers is not imported here: verify imports it on the thread that loads A for the functional
    # check, beside the tensor comparison (its bars and chatter are off through the environment, and each
    # of the library's own calls into it is quiet too)
    silence_library_progress()
    with ProgressReporter("never" if quiet else progress) as bars, \
            bars.stage(f"verifying {a} -> {b}"):
        result = verify(a, b, functional=functional, tokens=tokens, decode=decode, seed=seed, token=token,
                        cache_dir=cache_dir, local_files_only=offline, progress=bars.callback(VERIFY_STAGES),
                        strict_config=strict_config, memory=memory)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(visible(render(result), newlines=True))
    ctx.exit(0 if result.equivalent else 1)


#: What each stage of :func:`~idinspect.equivalence.verify.verify` counts, as its progress label.
VERIFY_STAGES = {"open": "opening A and B", "tensors": "comparing other tensors", "invariants": "invariants by layer",
                 "functional": "transformers runs (A, B, rounding baseline)"}


def render(result) -> str:
    """Plain text, one line per check, then the verdict, of a :class:`~idinspect.equivalence.verify.VerifyResult`."""
    lines = [f"verify {result.a} -> {result.b} (B stored as {result.dtype})"]
    for c in result.checks:
        lines.append(f"  {_mark(c):4} {c.name:11} {_numbers(c)}{c.detail}")
        for kind, v in c.extra.get("per_invariant", {}).items():
            base = ("not needed: within one rounding" if v["baseline"] is None
                    else f"{v['baseline']:.2e}")
            lines.append(f"{'':18}{kind:12} {v['error']:.2e} (tolerance {v['tolerance']:.1e}; "
                         f"rounding baseline {base}) at {v['where']}")
    lines.append("equivalent" if result.equivalent else "NOT equivalent")
    return "\n".join(lines)


def _mark(c) -> str:
    return {True: "ok", False: "FAIL", None: "skip"}[c.passed]


def _numbers(c) -> str:
    if c.error is None or c.tolerance is None:
        return ""
    base = f", rounding baseline {c.baseline:.2e}" if c.baseline is not None else ""
    return f"{c.error:.2e} (tolerance {c.tolerance:.1e}{base}); "
