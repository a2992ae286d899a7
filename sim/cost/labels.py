"""What a calibrated cost model rests on: each term's source (labels) and its basis and band."""

from __future__ import annotations

from sim.cost.batch import CostBasis
from sim.cost.kernels import Kernels, TableKernels
from sim.cost.sources import Term
from sim.cost.stack import ServingStack
from sim.model.catalog import GpuSpec, ModelSpec


def labels_of(terms: dict[str, Term | None], tp: int, copy_label: str, stack: ServingStack,
              kernels: Kernels | None = None) -> tuple[tuple[str, str], ...]:
    if isinstance(kernels, TableKernels):
        out = [("attention", f"{kernels.label} (fitted to the step form, MAPE {kernels.fit_mape:.0%}; page "
                             "term from the paged-kernel fit)"),
               ("dense", f"{kernels.label} (GEMMs, MoE, router" + (", all-reduce)" if tp > 1 else ")")),
               ("elementwise", t.label if (t := terms["elementwise"]) else "roofline (uncalibrated)")]
    else:
        out = [("attention", terms["attention"].label if terms["attention"] else "?"),
               ("dense", t.label if (t := terms["gemm"]) else "roofline (uncalibrated)"),
               ("elementwise", t.label if (t := terms["elementwise"]) else "roofline (uncalibrated)")]
        if tp > 1:
            out.append(("all-reduce", t.label if (t := terms["allreduce"]) else "analytic (datasheet link)"))
    out += [("swap", copy_label), ("kv-write", "roofline (uncalibrated)"),
            ("stack", f"{stack.name} ({stack.engine or 'engine not named'}): fitted on "
                      f"{stack.source or 'committed profile'}")]
    return tuple(out)


def basis_of_terms(model: ModelSpec, gpu: GpuSpec, tp: int, terms: dict[str, Term | None], stack: ServingStack,
                   labels: tuple[tuple[str, str], ...], bands: dict[str, tuple[float, float]],
                   kernels: Kernels | None = None) -> CostBasis:
    """``fitted``: the stack was fitted at this TP, either on this GPU (an end-to-end fit absorbs
    how the operator terms transfer to it) or with this GPU's kernels measured by your own harness
    run; another GPU or TP is ``extrapolated``, and so is a MoE (no stack was fitted on MoE
    measurements). Batch and context ranges are a property of a run, not of the cost model: the
    summary checks them against ``stack.regime`` after the run."""
    key = ["attention", "gemm"] + (["allreduce"] if tp > 1 else [])
    tables = isinstance(kernels, TableKernels)
    own = tables or all((t := terms[k]) is not None and t.own for k in key)
    end_to_end = gpu.key in [g.strip() for g in stack.gpu.split(",")]
    stack_tp = tp in stack.fitted_tps
    harness = not tables and own and not any(str(getattr(terms[k], "label", "")).startswith("vidur") for k in key)
    basis = "fitted" if (end_to_end or harness) and stack_tp and not model.is_moe else "extrapolated"
    if not end_to_end and not harness:
        how = [f"{stack.name} stack fitted on {stack.gpu or '?'}, not {gpu.key}"
               + (" (its kernels measured on this GPU)" if tables else "")]
    else:
        how = []
    how += [f"{n}: {lab}" for n, lab in labels if n not in ("swap", "kv-write")]
    if not own:
        how.append("some operator terms scaled from another GPU")
    if model.is_moe:
        path = "the MoE tables" if tables else "the dense operator fits"
        how.append(f"MoE ({model.num_experts} experts, top {model.experts_per_token}): expert path from {path}, "
                   "no serving stack fitted on MoE end-to-end measurements")
    if isinstance(kernels, TableKernels) and kernels.notes:
        how.append("outside the tables' measured grid: " + " | ".join(kernels.notes))
    if not stack_tp:
        how.append(f"{stack.name} stack fitted at TP {', '.join(map(str, stack.fitted_tps))}; "
                   f"TP {tp} interpolated in log2(TP)")
    if (r := stack.regime) is not None:  # a run outside it is judged after the run (sim/cost/regime.py)
        how.append(f"{stack.name} fitted for batch <= {r.batch[1]:,.0f}, context <= {r.context[1]:,.0f}, "
                   f"prompt <= {r.prompt[1]:,.0f} tokens (p95 of its fit stages); each run is checked against them")
    return CostBasis(basis, "; ".join(how), bands["fitted" if basis == "fitted" else "extrapolated"])
