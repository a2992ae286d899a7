"""Cost-model call cost: ns per ``step_time`` call, roofline vs calibrated, in one process.

``step_time`` runs once per simulated step (~100k times on the Azure conv trace), so the
calibrated model should stay within a small factor of the roofline's cost per call. Both are
timed here under the same load and their ratio reported (a benchmark, not a test).

    python bench/bench_cost.py
"""

from __future__ import annotations

import timeit

from sim.cost import StepBatch, build_cost_model
from sim.model.catalog import resolve_gpu, resolve_model


def per_call_ns(cost: object, batches: list[StepBatch]) -> float:
    f = cost.step_time  # type: ignore[attr-defined]
    return min(timeit.repeat(lambda: [f(b) for b in batches], number=20, repeat=7)) / 20 / len(batches) * 1e9


def main() -> None:
    m, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("h100")
    batches = [StepBatch(num_decode_seqs=b, decode_context_tokens=700 * b, pages_touched=44 * b)
               for b in range(1, 129)]
    for tp in (1, 2):
        roof = per_call_ns(build_cost_model("roofline", m, gpu, tp), batches)
        cal = per_call_ns(build_cost_model("calibrated", m, gpu, tp), batches)
        print(f"tp={tp}: roofline {roof:7.0f} ns/call | calibrated {cal:7.0f} ns/call | ratio {cal / roof:.2f}")


if __name__ == "__main__":
    main()
