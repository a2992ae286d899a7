"""calibration/device_run.sh end to end on a CPU (--allow-cpu: tiny grid, Triton interpreter).

The script is what a GPU session runs once, unattended; here it runs both suites on the tiny grid
and its output must be complete and labelled ``cpu`` (never GPU data, never in calibration/data).
The decoder layer it times is checked against a plain torch layer over the reference attention.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # must precede the first triton import
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from calibration import layer_suite  # noqa: E402
from calibration.kernels import reference_attention  # noqa: E402

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(
    torch.cuda.is_available(), reason="on a GPU the script runs the real 8-minute grid")]
REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "calibration" / "device_run.sh"
DATA = REPO / "calibration" / "data"


def run(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=240)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One run with no --out: it must pick a temporary folder by itself."""
    tmp = tmp_path_factory.mktemp("device_run")
    p = run("--allow-cpu", tmp=tmp)
    assert p.returncode == 0, p.stderr[-2000:]
    out = Path(p.stdout.split("device run -> ")[1].split()[0])
    assert out.parent == tmp and not (DATA / "cpu").exists()  # never into calibration/data
    return out, p.stdout


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_every_file_written_and_labelled_cpu(cpu_run: tuple[Path, str]) -> None:
    out, stdout = cpu_run
    for name in ("meta.json", "summary.json", "attention.csv", "gemm.csv", "kv_write.csv",
                 "copy.csv", "layer.csv"):
        assert (out / name).stat().st_size > 0, name
    meta = json.loads((out / "meta.json").read_text())
    assert meta["gpu"] == "cpu" and "NOT GPU DATA" in meta["timing"]
    assert "NOT GPU DATA" in meta["layer_suite"]["timing"]
    for suite in ("harness", "layer_suite"):
        assert meta[suite]["not_run"] == 0 and not meta[suite]["budget_spent"], suite
        assert meta[suite]["failed"] == [], suite
    stages = meta["device_run"]["stages"]
    codes = {k: v["exit_code"] for k, v in stages.items()}
    assert codes == {"harness": 0, "layer_suite": 0, "harness_resume": 125}  # nothing to resume
    assert "NOT GPU DATA" in stdout and "kvsim calibrate fit" not in stdout  # nothing to commit


def test_summary_claims_no_gpu_data(cpu_run: tuple[Path, str]) -> None:
    out, _ = cpu_run
    doc = json.loads((out / "summary.json").read_text())
    assert doc["gpu"] == "cpu" and doc["not_gpu_data"] is True and "NOT GPU DATA" in doc["label"]
    pg = doc["paging_overhead_block16"]
    assert set(pg["by_kind"]) == {"decode", "prefill", "mixed"}
    att = rows(out / "attention.csv")
    n_decode = sum(r["kind"] == "decode" and r["block_size"] == "16" and r["paged"] == "True"
                   for r in att)
    assert len(pg["decode_points"]) == n_decode > 0  # every block-16 decode has its slab twin
    p0 = pg["decode_points"][0]
    assert p0["overhead"] == pytest.approx(p0["t_paged_us"] / p0["t_contiguous_us"] - 1, abs=1e-3)
    bw = doc["paged_bandwidth_block16"]
    assert bw["paged_peak_gbps"] == max(p["paged_gbps"] for p in pg["decode_points"]) > 0
    assert bw["d2d_copy_gbps"] > 0


def test_layer_rows_cover_the_grid_unlabelled_as_graphs(cpu_run: tuple[Path, str]) -> None:
    out, _ = cpu_run
    layer = rows(out / "layer.csv")
    assert len(layer) == len(layer_suite.layer_points(cpu=True))
    assert {r["graph"] for r in layer} == {"False"}  # eager wall clock: no CUDA graph claimed
    assert {r["kind"] for r in layer} == {"decode", "prefill", "mixed"}
    shards = {r["tp"]: (int(r["q_heads"]), int(r["kv_heads"]), int(r["ffn"])) for r in layer}
    assert shards["2"] == tuple(x // 2 for x in shards["1"])  # TP 2: heads and FFN halved
    assert all(float(r["t_us_median"]) > 0 and float(r["flops"]) > 0 for r in layer)


def test_rerun_resumes_and_refusals(cpu_run: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = cpu_run
    before = (out / "layer.csv").read_text()
    assert layer_suite.main(["--allow-cpu", "--out", str(out)]) == 0
    assert (out / "layer.csv").read_text() == before  # nothing re-measured
    assert layer_suite.main(["--allow-cpu", "--out", str(tmp_path), "--budget-s", "0"]) == 0
    status = json.loads((tmp_path / "meta.json").read_text())["layer_suite"]
    assert status["budget_spent"] and status["not_run"] == status["points"] > 0
    assert layer_suite.main(["--out", str(tmp_path)]) == 2  # CPU without --allow-cpu
    bad = run("--allow-cpu", "--out", str(DATA / "cpu-test"), tmp=tmp_path)
    assert bad.returncode == 2 and not (DATA / "cpu-test").exists()
    assert run("--budget", "5", tmp=tmp_path).returncode == 2  # unknown flag: refused


def test_layer_matches_a_torch_layer_over_the_reference_attention() -> None:
    import torch.nn.functional as F

    q_lens, seq_lens = [8, 1, 1], [24, 40, 17]  # a prefixed chunk and two decodes
    s = layer_suite.shape_of("tiny", 1)
    h, hq, hkv, d = s["hidden"], s["heads"], s["kv_heads"], s["head_dim"]
    w = layer_suite.make_weights(torch, s, torch.float16, "cpu")
    step = layer_suite.build_step(torch, s, w, q_lens, seq_lens, torch.float16, "cpu", 132)
    got = step.run().float()
    i = step.inputs
    x, n = i["x"].float(), sum(q_lens)
    q, k, v = F.linear(F.rms_norm(x, (h,), eps=1e-5), w["qkv"].float()).split(
        [hq * d, hkv * d, hkv * d], dim=-1)
    ang = i["pos"].float()[:, None] / 10000.0 ** (torch.arange(0, d, 2).float() / d)
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]

    def rope(t: torch.Tensor) -> torch.Tensor:
        return torch.cat((t[..., : d // 2] * cos - t[..., d // 2:] * sin,
                          t[..., d // 2:] * cos + t[..., : d // 2] * sin), dim=-1)

    k_new = rope(k.view(n, hkv, d))
    seq = torch.repeat_interleave(torch.arange(len(q_lens)), torch.tensor(q_lens))
    page = i["block_table"][seq, i["pos"] // layer_suite.BLOCK].long()
    row = i["pos"] % layer_suite.BLOCK  # the new K/V must be where the block table says
    assert (i["k_cache"][page, row].float() - k_new).abs().max() < 2e-2
    assert (i["v_cache"][page, row].float() - v.view(n, hkv, d)).abs().max() < 2e-2
    assert i["pos"].tolist() == [*range(16, 24), 39, 16]
    att = reference_attention(rope(q.view(n, hq, d)).half(), i["k_cache"], i["v_cache"], q_lens,
                              seq_lens, i["block_table"]).float()
    r = x + F.linear(att.view(n, hq * d), w["o"].float())
    g, u = F.linear(F.rms_norm(r, (h,), eps=1e-5), w["gate_up"].float()).chunk(2, dim=-1)
    want = r + F.linear(F.silu(g) * u, w["down"].float())
    assert torch.isfinite(got).all()
    assert (got - want).abs().max() < 5e-2 * want.abs().max()
