"""``kvsim calibrate``: fit the step-cost model to harness data or to Vidur's profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from sim.errors import ConfigError

app = typer.Typer(help="Fit the calibrated step-cost model (GPU timings -> fit.yaml).",
                  no_args_is_help=True)

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "calibration" / "data"
_BESIDE = Path(__file__).resolve().parents[3] / "shared" / "gpu_profiles" / "vidur"
DEFAULT_VIDUR = _BESIDE if _BESIDE.exists() else Path("/work/shared/gpu_profiles/vidur")


@app.command()
def fit(
    data_dir: Annotated[Path, typer.Argument(help="a harness output dir (has meta.json + CSVs)")] = DEFAULT_DATA / "h200",
    out: Annotated[Path | None, typer.Option("--out", help="YAML path (default DATA_DIR/fit.yaml)")] = None,
) -> None:
    """Fit attention / GEMM / KV-write terms; print held-out MAPE and p95; write YAML."""
    from calibration.fit import summary_lines, write_fit

    if not (data_dir / "meta.json").exists():
        raise ConfigError(f"{data_dir}: no harness data (meta.json missing); run "
                          "`python -m calibration.run_gpu` on a GPU first")
    path, doc = write_fit(data_dir, out)
    for line in summary_lines(doc):
        typer.echo(line)
    typer.echo(f"wrote {path}")


@app.command()
def vidur(
    root: Annotated[Path, typer.Option("--root", help="Vidur profiles dir")] = DEFAULT_VIDUR,
    write: Annotated[bool, typer.Option("--write", help="write calibration/data/vidur/<gpu>.yaml")] = False,
) -> None:
    """Fit the same model form to Vidur's published A100/H100 timings and report the error."""
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
            path = DEFAULT_DATA / "vidur" / f"{gpu}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("# Fitted from Vidur's published profiles (real A100/H100 measurements, "
                            "not ours).\n# Regenerate: kvsim calibrate vidur --write\n"
                            + yaml.safe_dump(doc, sort_keys=False))
            typer.echo(f"wrote {path}")
