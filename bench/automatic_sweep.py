"""How far ``--auto`` reaches: the automatic adapter against every hand-written one, and on the model
types transformers ships that no adapter claims.

    python -m bench.automatic_sweep                 # both parts; writes bench/results/<UTC>-automatic.json
    python -m bench.automatic_sweep --part supported
    python -m bench.automatic_sweep --part unclaimed --limit 50

Part ``supported``: every tiny test variant (tests/families/) is read twice, by its hand-written adapter
and, with its model type hidden from the registry, by the adapter ``--auto`` infers and proves from the
live model; the outcome is "agrees" (same totals: parameters, unidentified, per-layer counts), "refused"
(with the reason) or "DISAGREES" (a defect). Part ``unclaimed``: for each model type transformers'
AutoModel maps and no adapter claims (or one refused by hand), a default config's base model, shrunk,
goes through the same inference; "automatic" (proven) or "refused" (why).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results"


@contextlib.contextmanager
def hidden(model_type: str):
    """The registry without ``model_type``'s hand-written adapter (restored on exit)."""
    from idinspect.adapters import ADAPTERS

    cls = ADAPTERS._adapters.pop(model_type)
    try:
        yield
    finally:
        ADAPTERS.remove_automatic(model_type)
        ADAPTERS._adapters[model_type] = cls


def _totals(model) -> dict:
    import idinspect

    r = idinspect.inspect(model)
    totals = {k: v for k, v in r["totals"].items() if k != "stacks"}   # stack names are a hand-written adapter's words
    return {"totals": totals, "layers": [(x.get("parameters"), x.get("unidentified")) for x in r["layers"]]}


def supported() -> list[dict]:
    import idinspect
    from idinspect.errors import IdinspectError
    from tests.tiny import VARIANTS, build

    rows = []
    for name in sorted(VARIANTS):
        model = build(name)
        model_type = model.config.model_type
        start = time.perf_counter()
        by_hand = _totals(idinspect.load(model))
        row = {"variant": name, "model_type": model_type}
        with hidden(model_type):
            try:
                auto = _totals(idinspect.load(model, auto=True))
                row["outcome"] = "agrees" if auto == by_hand else "DISAGREES"
                if auto != by_hand:
                    row["by_hand"], row["automatic"] = by_hand["totals"], auto["totals"]
            except IdinspectError as exc:
                row["outcome"], row["reason"] = "refused", str(exc)
        row["seconds"] = round(time.perf_counter() - start, 2)
        print(f"{name:32s} {row['outcome']:10s} {row['seconds']:6.2f} s  {row.get('reason', '')[:160]}", flush=True)
        rows.append(row)
    return rows


def unclaimed(limit: int | None = None) -> list[dict]:
    from idinspect.adapters import ADAPTERS
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from idinspect.automatic import infer_adapter
    from idinspect.errors import IdinspectError

    types = [t for t in sorted(CONFIG_MAPPING.keys()) if t not in ADAPTERS or t in ADAPTERS.refused]
    rows = []
    for model_type in types[:limit]:
        start = time.perf_counter()
        row = {"model_type": model_type}
        try:
            config = CONFIG_MAPPING[model_type]()
            cls = AutoModel._model_mapping.get(type(config))
            if cls is None:
                raise IdinspectError("AutoModel maps no base model for it")
            if not hasattr(config, "num_attention_heads") or not hasattr(config, "num_hidden_layers"):
                raise IdinspectError("its config has no num_attention_heads / num_hidden_layers at the top "
                                     "(a composite or non-attention model)")
            infer_adapter(model_type, config, cls)
            row["outcome"] = "automatic"
            row["evidence"] = ADAPTERS._evidence(model_type)
        except IdinspectError as exc:
            row["outcome"], row["reason"] = "refused", str(exc)
        except Exception as exc:  # noqa: BLE001 - a model class that does not build: recorded, not fatal
            row["outcome"], row["reason"] = "refused", f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        finally:
            ADAPTERS.remove_automatic(model_type)
        row["seconds"] = round(time.perf_counter() - start, 2)
        print(f"{model_type:32s} {row['outcome']:10s} {row['seconds']:6.2f} s  {row.get('reason', '')[:160]}", flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["supported", "unclaimed", "both"], default="both")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    out: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    import transformers
    out["transformers"] = transformers.__version__
    if args.part in ("supported", "both"):
        out["supported"] = supported()
    if args.part in ("unclaimed", "both"):
        out["unclaimed"] = unclaimed(args.limit)
    for part in ("supported", "unclaimed"):
        if part in out:
            tally: dict[str, int] = {}
            for r in out[part]:
                tally[r["outcome"]] = tally.get(r["outcome"], 0) + 1
            print(f"{part}: {tally}")
            out[f"{part}_tally"] = tally
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-automatic.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
