"""The calibrated model's kernel basis: NVIDIA's vLLM tables where a stack was fitted over them and the
GPU has them, Vidur's operator fits otherwise; what every output says about it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import nnls as scipy_nnls

from sim.config.schema import make_config
from sim.cost.batch import StepBatch
from sim.cost.for_config import cost_model_for
from sim.cost.kernel_tables import kernel_tables
from sim.cost.kernels import FitKernels, TableKernels
from sim.cost.table_basis import TableBasis, nnls
from sim.model.catalog import resolve_model


def test_the_token_curve_is_the_tables_within_one_percent() -> None:
    """tokens(N) reads the tables at 4 points per octave and interpolates between them."""
    m = resolve_model("llama-3.1-8b")
    cost = cost_model_for(make_config(model="llama-3.1-8b", gpu="h100"))
    k = cost.kernels
    assert isinstance(k, TableKernels)
    direct = TableBasis(kernel_tables("h100"), m, 1)  # type: ignore[arg-type]  # h100 has tables
    e0, e1 = k._e0, k._e1
    for n in [*np.random.default_rng(0).integers(1, 65_536, 60).tolist(), 1, 7, 100, 8192]:
        want = direct.dense(n) + e0 + e1 * n
        assert k.tokens(n) == pytest.approx(want, rel=0.01), n


def test_stacks_keep_the_basis_they_were_fitted_over() -> None:
    m = "llama-3.1-8b"
    assert isinstance(cost_model_for(make_config(model=m, gpu="h100")).kernels, TableKernels)  # vllm-v1
    old = cost_model_for(make_config(model=m, gpu="h100", serving_stack="vllm-0.6"))
    assert isinstance(old.kernels, FitKernels)
    l4 = cost_model_for(make_config(model=m, gpu="l4"))  # no tables: Vidur's fits, labelled
    assert isinstance(l4.kernels, FitKernels)
    assert "vidur" in dict(l4.labels)["dense"]


def test_outputs_name_the_tables_and_their_vllm_version() -> None:
    cost = cost_model_for(make_config(model="llama-3.1-8b", gpu="h100"))
    dense = dict(cost.labels)["dense"]
    assert "aiconfigurator-core 0.12.0" in dense and "vLLM 0.24.0" in dense
    moe = cost_model_for(make_config(model="mixtral-8x7b", gpu="a100-80gb", tensor_parallel_size=2))
    assert "vLLM 0.14.0" in dict(moe.labels)["dense"]
    assert moe.basis.basis == "extrapolated" and "MoE tables" in moe.basis.detail


def test_a_table_step_is_at_least_its_parts_and_grows_with_the_batch() -> None:
    cost = cost_model_for(make_config(model="llama-3.1-8b", gpu="h100"))
    prev = 0.0
    for b in (1, 8, 64, 256):
        t = cost.step_time(StepBatch(num_decode_seqs=b, decode_context_tokens=b * 2048, pages_touched=b * 128))
        assert t > prev
        prev = t


def test_nnls_is_scipys() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        a, b = rng.normal(size=(30, 5)), rng.normal(size=30)
        x, (y, _) = nnls(a, b), scipy_nnls(a, b)
        assert (x >= 0).all()
        assert np.linalg.norm(a @ x - b) == pytest.approx(np.linalg.norm(a @ y - b), abs=1e-9)


def test_an_fp8_moe_reads_the_table_that_measured_its_shape() -> None:
    """DeepSeek-V3 (FP8, 128x128 blocks) on H200 at TP 8: the block table measured its shape; the
    per-tensor one did not (scaled from a neighbour, and 4-9x slower): the measured one is read."""
    b = TableBasis(kernel_tables("h200"), resolve_model("deepseek-v3"), 8)  # type: ignore[arg-type]  # h200 has tables
    got = b._moe_lookup(64, 2048, 8, 1)
    assert not got.extrapolated and "fp8_block" in got.note
    per_tensor = kernel_tables("h200").moe(64, 7168, 2048, 256, 8, tp=8, ep=1, dtype="fp8")  # type: ignore[union-attr]
    assert per_tensor.extrapolated and per_tensor.seconds > got.seconds
