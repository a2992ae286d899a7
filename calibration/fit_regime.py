"""The regime an end-to-end stack fit covered, from replays of its own stages.

``regime_block`` replays each fit stage through the simulator under a profile (the same trace,
config and front end as :func:`calibration.replay.replay`) and pools, over all of them, the
requests in flight over time (the batch), and each served request's context (prompt + output) and prompt
length; their 5th / 95th percentiles, with the GPU, TP degrees and dense/MoE of the fitted
models, are the ``regime:`` block of a stack entry (:mod:`sim.cost.regime`).

``python -m calibration.fit_regime`` computes that block for the committed ``vllm-v1`` entry
with the committed profile (no refit) and writes it, with the held-out E2E and TTFT bands read
from the entry's own ``stages`` rows, into ``calibration/data/stacks.yaml``: only those three keys
are inserted, every other line of the file is left as it is.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import simpy
import yaml

from calibration.replay import stage_config, stage_trace
from calibration.serving_runs import Stage
from sim.cost.regime import QUANTITIES, run_quantities
from sim.cost.stack import STACKS_PATH
from sim.frontend.stage import FrontEnd, enter
from sim.io.ingest import make_requests
from sim.io.results import request_frame
from sim.model.catalog import resolve_model
from sim.run.build import build, new_replica
from sim.safe_yaml import safe_load

NEW_KEYS = ("regime", "band_e2e", "band_ttft")


def stage_quantities(st: Stage, stack: str, *, seed: int = 0, window_s: float | None = 150.0) -> dict[str, np.ndarray]:
    """One stage replayed under ``stack``: its batch, context and prompt samples."""
    cfg = stage_config(st, stack, seed=seed)
    trace = stage_trace(st, np.random.default_rng(seed), window_s)
    parts = build(cfg)
    if stack.endswith((".yaml", ".yml")):  # read the file now, not a cost model cached under its name
        from sim.cost.for_config import cost_model_for
        from sim.memory.budget import model_for
        parts = parts._replace(cost=cost_model_for(cfg, model_for(cfg, resolve_model(cfg.model))))
    reqs = make_requests(trace, cfg)
    fe = FrontEnd.of(cfg)
    inbox = enter(reqs, fe)[1] if fe is not None else reqs
    env = simpy.Environment()
    rep = new_replica(env, cfg, parts=parts)
    rep.submit_all(inbox)
    env.run()
    return run_quantities(request_frame(reqs))


def regime_block(stages: Sequence[Stage], stack: str, *, window_s: float | None = 150.0) -> dict[str, Any]:
    per = [stage_quantities(s, stack, window_s=window_s) for s in stages]
    out: dict[str, Any] = {
        "gpu": sorted({s.gpu for s in stages}), "tp": sorted({int(s.tp) for s in stages}),
        "models": sorted({s.model for s in stages}), "moe": any(resolve_model(s.model).is_moe for s in stages)}
    for k in QUANTITIES:
        x = np.concatenate([q[k] for q in per])
        out[k] = {"p5": round(float(np.percentile(x, 5)), 1), "p95": round(float(np.percentile(x, 95)), 1)}
    out["basis"] = (f"5th/95th percentiles pooled over replays of the {len(stages)} fit stages with this profile: "
                    "batch = requests in flight over time, context = prompt + output tokens of each served request, "
                    "prompt = its prompt tokens computed (less its prefix-cache hit)")
    return out


def stage_bands(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """band_e2e and band_ttft from a fit's stage rows (leave-one-run-out held-out means)."""
    from calibration.bands import band_of

    e2e = np.array([r["e2e_measured_s"] / r["e2e_heldout_s"] - 1 for r in rows])
    ttft = np.array([r["ttft_measured_s"] / r["ttft_heldout_s"] - 1 for r in rows])
    return (band_of(e2e, len(e2e), "stages (leave one run out, mean E2E)"),
            band_of(ttft, len(ttft), "stages (leave one run out, mean TTFT)"))


def patch_entry(text: str, name: str, block: dict[str, Any]) -> str:
    """``text`` (a stacks.yaml) with ``block``'s keys inserted at the end of entry ``name``
    (replacing those keys if present); every other line is kept byte for byte."""
    lines = text.splitlines(keepends=True)
    start = lines.index(f"  {name}:\n")
    end = next((i for i in range(start + 1, len(lines)) if len(lines[i]) - len(lines[i].lstrip(" ")) < 4),
               len(lines))
    body, i = [], start + 1
    while i < end:  # drop an earlier copy of the new keys
        key = lines[i][4:].split(":")[0] if lines[i].startswith("    ") and not lines[i].startswith("     ") else ""
        j = i + 1
        while j < end and lines[j].startswith("     "):
            j += 1
        if key not in block:
            body += lines[i:j]
        i = j
    dumped = yaml.safe_dump(block, sort_keys=False, width=120)
    new = ["    " + ln + "\n" for ln in dumped.splitlines()]
    return "".join(lines[:start + 1] + body + new + lines[end:])


def main(argv: Sequence[str] = ()) -> int:
    from calibration.bands import RUNS
    from calibration.serving_runs import read_results

    entry = safe_load(STACKS_PATH.read_text())["stacks"]["vllm-v1"]
    keys = set(entry["fitted_on"]["refs"])
    stages = [s for s in read_results(RUNS) if s.key in keys]
    block = {"regime": regime_block(stages, "vllm-v1")}
    block["band_e2e"], block["band_ttft"] = stage_bands(entry["stages"])
    out = Path(argv[0]) if argv else STACKS_PATH
    out.write_text(patch_entry(STACKS_PATH.read_text(), "vllm-v1", block))
    print(yaml.safe_dump(block, sort_keys=False, width=120))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
