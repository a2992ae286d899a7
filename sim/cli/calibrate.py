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
PUBLIC = DEFAULT_DATA / "public"  # the rows the fit uses, shipped with their licences


def _default_profiles() -> Path:
    env = os.environ.get("KVSIM_DATA")
    return Path(env) / "gpu_profiles" if env and (Path(env) / "gpu_profiles").is_dir() else PUBLIC


DEFAULT_PROFILES = _default_profiles()
DEFAULT_VIDUR = DEFAULT_PROFILES / "vidur"
Profiles = Annotated[Path, typer.Option("--profiles", help="gpu_profiles dir (default: $KVSIM_DATA/gpu_profiles, "
                                                           "else calibration/data/public)")]


def _check_profiles(root: Path) -> None:
    for sub in ("splitwise", "distserve"):
        if not (root / sub).is_dir():
            raise ConfigError(f"--profiles {root}: no {sub}/ (expected a gpu_profiles directory)")


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
    if (root / "vidur" / "compute").is_dir():
        for gpu in ("a100", "h100"):
            doc = fit_gpu(root / "vidur", gpu)
            for line in summary_lines(doc):
                typer.echo(line)
            if write:
                typer.echo(f"wrote {_write_vidur(gpu, doc)}")
        forget_committed()  # the stack fit below times kernels with the operator fits just written
    else:
        typer.echo(f"{root}: no Vidur operator profiles (vidur/compute; set KVSIM_DATA): "
                   "keeping the committed operator fits calibration/data/vidur/*.yaml")
    stacks, _ = fit_public(root, log=typer.echo)
    for name, s in stacks["stacks"].items():
        if name == "vllm-v1":
            for r in s["stages"]:
                typer.echo(f"stack vllm-v1: {r['stage']}: E2E {r['e2e_fitted_s']:.3f} s vs {r['e2e_measured_s']:.3f} s "
                           f"measured (held out {r['e2e_heldout_s']:.3f}), TTFT {r['ttft_fitted_s'] * 1e3:.1f} ms vs "
                           f"{r['ttft_measured_s'] * 1e3:.1f} ms")
            continue
        if name == "vllm-0.6":
            for r in s["heldout"]:
                typer.echo(f"stack vllm-0.6: held-out {r['gpu']} {r['regime']}: MAPE {r['mape']:.1f}% (n={r['n']})")
            continue
        held = s["heldout"]["by_regime"]
        typer.echo(f"stack {name}: held-out MAPE " + ", ".join(f"{r} {e['mape_pct']:.1f}% (n={e['n']})"
                                                               for r, e in held.items()))
        typer.echo("  leave-one-TP-out MAPE: " + ", ".join(f"TP {t} {e['mape_pct']:.1f}%"
                                                          for t, e in s["leave_one_tp_out"].items()))
    if write:
        typer.echo(f"wrote {write_stacks(stacks, STACKS_PATH)}")
        committed_stacks.cache_clear()


Model = Annotated[str | None, typer.Option("--model", help="served model (when the results do not name it)")]
Tp = Annotated[int, typer.Option("--tp", help="tensor parallel size of the served model")]
Gpu = Annotated[str, typer.Option("--gpu", help="GPU the results were measured on")]
Mbt = Annotated[int | None, typer.Option("--max-num-batched-tokens", help="vLLM server argument of the run")]
Mns = Annotated[int | None, typer.Option("--max-num-seqs", help="vLLM server argument of the run")]
Mml = Annotated[int | None, typer.Option("--max-model-len", help="vLLM server argument of the run")]
Window = Annotated[float | None, typer.Option("--window-s", help="replay the first SECONDS of each stage "
                                                          "(default: all of a `vllm bench serve` run, 150 s of an "
                                                          "inference-perf stage; 0: all)")]
Results = Annotated[list[Path], typer.Argument(help="benchmark results: experiments.json (or its folder), inference-perf "
                                                    "reports, `vllm bench serve` JSON (--save-result, or one per line "
                                                    "with --append-result) or a folder of them")]


def _stages(results: list[Path], model: str | None, tp: int, gpu: str, mbt: int | None, mns: int | None,
            mml: int | None) -> list[Any]:
    from calibration.serving_runs import read_many

    engine = {k: v for k, v in (("max_num_batched_tokens", mbt), ("max_num_seqs", mns), ("max_model_len", mml))
              if v is not None}
    return read_many(results, gpu=gpu, model=model, tp=tp, engine=engine)


def _window(window_s: float | None) -> float | None:
    return None if window_s is None else (window_s or float("inf"))


def _table(results: list[Any]) -> list[str]:
    """Measured vs replayed per-stage means: the lines of `calibrate check` (and of `fit --from`)."""
    out = [f"{'stage':58s} {'E2E meas':>9s} {'sim':>8s} {'err':>7s} {'TTFT meas':>10s} {'sim':>8s} {'err':>7s} "
           f"{'DTPT meas':>10s} {'sim':>8s}  overloaded (meas/sim)"]
    for r in results:
        st = r.stage
        out.append(f"{st.key[:58]:58s} {st.e2e_mean:8.3f}s {r.e2e_mean:7.3f}s {100 * (r.e2e_mean / st.e2e_mean - 1):+6.1f}% "
                   f"{st.ttft_mean * 1e3:8.1f}ms {r.ttft_mean * 1e3:6.1f}ms {100 * (r.ttft_mean / st.ttft_mean - 1):+6.1f}% "
                   f"{st.dtpt() * 1e3:8.2f}ms {r.dtpt * 1e3:6.2f}ms  {'yes' if st.overloaded else 'no'}/"
                   f"{'yes' if r.overloaded else 'no'}")
    from calibration.bench_serve import closed_loop_of

    for r in results:  # the names above are cut at 58 characters: say it where it cannot be cut
        n = closed_loop_of(str(r.stage.arrival))
        if n is not None:
            out.append(f"note: {r.stage.key}: replayed as a closed loop of {n} clients (--max-concurrency), "
                       "each sent when the one before reaches its client through the API server")
    return out


@app.command()
def check(
    results: Results,
    serving_stack: Annotated[str, typer.Option("--serving-stack", help="profile name or YAML")] = "vllm-v1",
    model: Model = None, tp: Tp = 1, gpu: Gpu = "h100", max_num_batched_tokens: Mbt = None,
    max_num_seqs: Mns = None, max_model_len: Mml = None, window_s: Window = None,
) -> None:
    """Replay every stage of RESULTS through the simulator; print measured vs simulated means."""
    from calibration.replay import replay_stages

    stages = _stages(results, model, tp, gpu, max_num_batched_tokens, max_num_seqs, max_model_len)
    for line in _table(replay_stages(stages, serving_stack, window_s=_window(window_s))):
        typer.echo(line)


def _fit_from(results: list[Path], out: Path, name: str, model: str | None, tp: int, gpu: str,
              engine: tuple[int | None, int | None, int | None], window_s: float | None) -> None:
    from calibration.user_fit import fit_user
    from calibration.user_report import profile_entry
    from calibration.v1_fit import write_profile

    stages = _stages(results, model, tp, gpu, *engine)
    fit_on = [s for s in stages if not s.overloaded]
    for s in stages:
        if s.overloaded:
            typer.echo(f"{s.key}: overloaded ({s.failures} of {s.sent} failed): predicted, not fitted")
    if not fit_on:
        raise ConfigError(f"--from {' '.join(map(str, results))}: no stage to fit (every stage is overloaded)")
    typer.echo(f"fitting {len(fit_on)} stage(s) at once: " + ", ".join(s.key for s in fit_on))
    fit = fit_user(fit_on, out=out, name=name, window_s=_window(window_s), log=typer.echo)
    sources = ", ".join(p.name for p in results)
    entry = profile_entry(fit, sources=sources, fitted_on={
        "source": sources, "gpu": gpu, "tps": sorted({s.tp for s in fit_on}), "models": sorted({s.model for s in fit_on}),
        "replay": {"window_s": window_s, "seed": 0}})
    write_profile(out, name, entry)
    typer.echo("in sample (the profile as written, replayed; `calibrate check` prints the same):")
    for line in _table(list(fit.results)):
        typer.echo(line)
    for r, h in zip(fit.results, fit.heldout, strict=False):
        typer.echo(f"held out {r.stage.key}: E2E {h:.3f} s vs {r.stage.e2e_mean:.3f} s measured "
                   f"({100 * (h / r.stage.e2e_mean - 1):+.1f} %; refit without it)")
    b = entry["band"]
    typer.echo(f"band (measured / predicted - 1): {100 * b['optimistic']:+.1f} % .. {100 * b['pessimistic']:+.1f} %: {b['basis']}")
    for line in entry["findings"] + entry["warnings"]:
        typer.echo(line)
    flags = [f"--{k} {v}" for k, v in (("model", model), ("tp", tp), ("gpu", gpu), ("max-num-batched-tokens", engine[0]),
                                       ("max-num-seqs", engine[1]), ("max-model-len", engine[2]), ("window-s", window_s))
             if v is not None]
    typer.echo(f"wrote {out} (check: kvsim calibrate check {' '.join(map(str, results))} --serving-stack {out} "
               f"{' '.join(flags)}; use: kvsim simulate ... --serving-stack {out})")


@app.command()
def fit(
    data_dir: Annotated[list[Path] | None, typer.Argument(help="a harness output dir (meta.json + CSVs); omit to fit "
                                                               "the public measurements. After --from: more results")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="YAML path (default DATA_DIR/fit.yaml; "
                                                           "--from: stack-profile.yaml)")] = None,
    profiles: Profiles = DEFAULT_PROFILES,
    write: Annotated[bool, typer.Option("--write/--dry-run", help="public fit: write calibration/data/")] = True,
    from_results: Annotated[list[Path] | None, typer.Option(
        "--from", help="your vLLM benchmark results (files, folders, JSON lines; as for `kvsim calibrate check`; "
                       "repeat the flag or list them after it): fit a serving-stack profile YAML on all at once")] = None,
    name: Annotated[str, typer.Option("--name", help="--from: the profile's name")] = "my-vllm",
    model: Model = None, tp: Tp = 1, gpu: Gpu = "h100", max_num_batched_tokens: Mbt = None,
    max_num_seqs: Mns = None, max_model_len: Mml = None, window_s: Window = None,
) -> None:
    """Fit the step-cost model.

    Without DATA_DIR: Vidur's A100/H100 operator profiles -> calibration/data/vidur/*.yaml, and the
    serving-stack profiles on Splitwise's and DistServe's end-to-end step times (+ Vidur's vLLM CPU
    profiles) -> calibration/data/stacks.yaml; prints held-out errors. With DATA_DIR (a
    calibration/run_gpu.py run): attention / GEMM / KV-write / copy fits of that GPU; simulations
    then use them for that GPU, with the public dense, all-reduce and stack terms filling in. With
    --from: a serving-stack profile fitted on every stage of your benchmark results at once.
    """
    if from_results:
        _fit_from([*from_results, *(data_dir or [])], out or Path("stack-profile.yaml"), name, model, tp, gpu,
                  (max_num_batched_tokens, max_num_seqs, max_model_len), window_s)
        return
    for flag, v in (("--model", model), ("--max-num-batched-tokens", max_num_batched_tokens),
                    ("--max-num-seqs", max_num_seqs), ("--max-model-len", max_model_len), ("--window-s", window_s)):
        if v is not None:
            raise ConfigError(f"{flag}: applies to `calibrate fit --from` only")
    if data_dir and len(data_dir) > 1:
        raise ConfigError(f"{' '.join(map(str, data_dir))}: one harness output dir (several results: use --from)")
    if not data_dir:
        _fit_public(profiles, write)
        return
    from calibration.fit import summary_lines, write_fit

    d = data_dir[0]
    if not (d / "meta.json").exists():
        raise ConfigError(f"{d}: no harness data (meta.json missing); run "
                          "`python -m calibration.run_gpu` on a GPU first")
    path, doc = write_fit(d, out)
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
