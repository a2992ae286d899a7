"""``kvsim calibrate``: fit the step-cost model (public measurements, or your GPU's harness run)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from sim.errors import ConfigError

app = typer.Typer(help="Fit the calibrated step-cost model (GPU timings -> calibration YAML).",
                  no_args_is_help=True)

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "calibration" / "data"
# the public gpu_profiles are optional large data: found through KVSIM_DATA (or --profiles)
DEFAULT_PROFILES = Path(os.environ.get("KVSIM_DATA", "$KVSIM_DATA")) / "gpu_profiles"
DEFAULT_VIDUR = DEFAULT_PROFILES / "vidur"
Profiles = Annotated[Path, typer.Option("--profiles", help="The public gpu_profiles dir (vidur/, splitwise/, distserve/).")]


def _check_profiles(root: Path) -> None:
    for sub in ("vidur/compute", "splitwise", "distserve"):
        if not (root / sub).is_dir():
            raise ConfigError(f"--profiles {root}: no {sub}/ (expected the shared gpu_profiles directory)")


def _write_vidur(gpu: str, doc: dict[str, Any]) -> Path:
    path = DEFAULT_DATA / "vidur" / f"{gpu}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Fitted from Vidur's published profiles (real A100/H100 measurements, not ours).\n"
                    "# Regenerate: kvsim calibrate fit\n" + yaml.safe_dump(doc, sort_keys=False))
    return path


def _fit_public(root: Path, write: bool) -> None:
    from calibration.fit import summary_lines
    from calibration.latency_fit import fit_public, write_stacks
    from calibration.vidur_profiles import fit_gpu
    from sim.cost.sources import forget_committed
    from sim.cost.stack import STACKS_PATH, committed_stacks

    _check_profiles(root)
    for gpu in ("a100", "h100"):
        doc = fit_gpu(root / "vidur", gpu)
        for line in summary_lines(doc):
            typer.echo(line)
        if write:
            typer.echo(f"wrote {_write_vidur(gpu, doc)}")
    forget_committed()  # the stack fit below times kernels with the operator fits just written
    stacks, _ = fit_public(root)
    for name, s in stacks["stacks"].items():
        held = s["heldout"]["by_regime"]
        typer.echo(f"stack {name}: held-out MAPE " + ", ".join(f"{r} {e['mape_pct']:.1f}% (n={e['n']})"
                                                               for r, e in held.items()))
        typer.echo("  leave-one-TP-out MAPE: " + ", ".join(f"TP {t} {e['mape_pct']:.1f}%"
                                                          for t, e in s["leave_one_tp_out"].items()))
    if write:
        typer.echo(f"wrote {write_stacks(stacks, STACKS_PATH)}")
        committed_stacks.cache_clear()


@app.command()
def fit(
    data_dir: Annotated[Path | None, typer.Argument(help="a harness output dir (meta.json + CSVs); "
                                                        "omit to fit the public measurements")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="YAML path (default DATA_DIR/fit.yaml)")] = None,
    profiles: Profiles = DEFAULT_PROFILES,
    write: Annotated[bool, typer.Option("--write/--dry-run", help="public fit: write calibration/data/")] = True,
) -> None:
    """Fit the step-cost model.

    Without DATA_DIR: Vidur's A100/H100 operator profiles -> calibration/data/vidur/*.yaml, and the
    serving-stack profiles on Splitwise's and DistServe's end-to-end step times (+ Vidur's vLLM CPU
    profiles) -> calibration/data/stacks.yaml; prints held-out errors. With DATA_DIR (a
    calibration/run_gpu.py run): attention / GEMM / KV-write / copy fits of that GPU; simulations
    then use them for that GPU, with the public dense, all-reduce and stack terms filling in.
    """
    if data_dir is None:
        _fit_public(profiles, write)
        return
    from calibration.fit import summary_lines, write_fit

    if not (data_dir / "meta.json").exists():
        raise ConfigError(f"{data_dir}: no harness data (meta.json missing); run "
                          "`python -m calibration.run_gpu` on a GPU first")
    path, doc = write_fit(data_dir, out)
    for line in summary_lines(doc):
        typer.echo(line)
    typer.echo(f"wrote {path}")


@app.command()
def report(
    out: Annotated[Path, typer.Option("--out", help="Report directory")] = Path("reports"),
    profiles: Profiles = DEFAULT_PROFILES,
) -> None:
    """Write reports/latency-model.md and its plots: held-out errors, roofline vs calibrated."""
    from calibration.latency_report import write_report

    _check_profiles(profiles)
    for p in write_report(out, profiles):
        typer.echo(f"wrote {p}")


@app.command()
def vidur(
    root: Annotated[Path, typer.Option("--root", help="Vidur profiles dir")] = DEFAULT_VIDUR,
    write: Annotated[bool, typer.Option("--write", help="write calibration/data/vidur/<gpu>.yaml")] = False,
) -> None:
    """Fit the operator form to Vidur's published A100/H100 timings only and report the error."""
    from calibration.fit import summary_lines
    from calibration.vidur_profiles import fit_gpu

    if not (root / "compute").is_dir():
        raise ConfigError(f"--root {root}: not a Vidur profiles dir (no compute/)")
    for gpu in ("a100", "h100"):
        doc = fit_gpu(root, gpu)
        for line in summary_lines(doc):
            typer.echo(line)
        for tp, e in doc.get("allreduce", {}).get("by_tp", {}).items():
            typer.echo(f"all-reduce tp={tp}: held-out MAPE {e['heldout_mape_pct']:.1f}%, "
                       f"p95 {e['heldout_p95_pct']:.1f}%")
        if write:
            typer.echo(f"wrote {_write_vidur(gpu, doc)}")
