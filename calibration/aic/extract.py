"""Extract NVIDIA's vLLM operator tables from aiconfigurator-core into calibration/data/aic/.

    pip install 'kvsim[aic]'
    python -m calibration.aic.extract [--aic-root DIR] [--out DIR]

``--aic-root`` is the ``aiconfigurator_core`` package folder (an install or an unpacked wheel);
without it the installed package is used. For each kvsim GPU it takes, per table, the newest
vLLM version the package holds (NCCL: the newest NCCL version), reduces it (calibration/aic/
tables.py) and writes ``<out>/<gpu>/<table>.parquet`` plus ``manifest.json``, README.md, NOTICE
and LICENSE. The output is deterministic: the same package and pyarrow give the same bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from calibration.aic.readme import notice_text, readme_text
from calibration.aic.tables import SPECS, TableSpec

PACKAGE = "aiconfigurator-core"
# aiconfigurator's system name -> kvsim GPU key (sim/model/data/gpus.yaml)
GPUS = {"h100_sxm": "h100", "h200_sxm": "h200", "a100_sxm": "a100-80gb", "l40s": "l40s",
        "b200_sxm": "b200"}
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "data" / "aic"
LICENSE_FALLBACK = DEFAULT_OUT / "LICENSE"


def find_root(arg: Path | None) -> Path:
    """The ``aiconfigurator_core`` folder: given, or the installed package (not imported)."""
    if arg is None:
        spec = importlib.util.find_spec("aiconfigurator_core")
        if spec is None or spec.origin is None:
            sys.exit("aiconfigurator_core is not installed: pip install 'kvsim[aic]', or pass --aic-root")
        return Path(spec.origin).parent
    for cand in (arg, arg / "aiconfigurator_core"):
        if (cand / "systems" / "data").is_dir():
            return cand
    sys.exit(f"--aic-root {arg}: no systems/data folder (want the aiconfigurator_core package folder)")


def dist_info(root: Path) -> Path | None:
    found = sorted(root.parent.glob("aiconfigurator_core-*.dist-info"))
    return found[-1] if found else None


def package_version(root: Path) -> str:
    info = dist_info(root)
    if info is not None:
        m = re.search(r"^Version: (\S+)$", (info / "METADATA").read_text(), re.M)
        if m:
            return m.group(1)
    sys.exit(f"{root}: no {PACKAGE} dist-info beside it; cannot name the package version")


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def newest(gpu_dir: Path, spec: TableSpec) -> tuple[str, Path] | None:
    """The newest version folder holding this table (older ones stay unread)."""
    base = gpu_dir / spec.op_dir / spec.framework
    dirs = [d for d in base.glob("*") if (d / spec.file).is_file()] if base.is_dir() else []
    if not dirs:
        return None
    best = max(dirs, key=lambda d: _version_key(d.name))
    return best.name, best / spec.file


def round4(x: float) -> float:
    """4 significant digits, as the shortest decimal (so CSV/JSON views read cleanly)."""
    return float(f"{x:.4g}")


def split_runtimes(raw: pd.DataFrame, folder: str) -> tuple[str, dict[str, int]]:
    """The runtime most rows were measured under, and the row counts of any other.

    A folder can hold reused rows (L40S comm/vllm/0.22.0 is all vLLM 0.14.0 rows) or a few
    appended from another runtime (B200 MoE 0.24.0: 972 Kimi-K3 rows of a vLLM preview build).
    """
    if "version" not in raw:
        return folder, {}
    counts = raw["version"].astype(str).value_counts()
    main = str(counts.index[0])
    return main, {str(k): int(v) for k, v in sorted(counts.items()) if k != main}


def reduce_table(raw: pd.DataFrame, spec: TableSpec, where: str) -> pd.DataFrame:
    for col in spec.constant:
        if col in raw and raw[col].nunique(dropna=False) > 1:
            sys.exit(f"{where}: column {col} is not constant ({sorted(map(str, raw[col].unique()))[:5]}); "
                     "the reduction would lose it: update calibration/aic/tables.py")
    df = spec.reduce(raw)
    keys = [c for c in df.columns if c != "us"]
    # repeated measurements of one shape (A100 context attention) -> their mean
    df = df.groupby(keys, as_index=False, sort=False)["us"].mean()
    df["us"] = [round4(v) for v in df["us"]]
    order = [c for c in keys if c != "kernel"] + (["kernel"] if "kernel" in keys else [])
    return df.sort_values(order, kind="mergesort").reset_index(drop=True)


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    table = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
    pq.write_table(table, path, compression="zstd", compression_level=19)


def extract_gpu(root: Path, system: str, out: Path) -> dict[str, Any]:
    gpu_dir = root / "systems" / "data" / system
    out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, Any] = {}
    device = ""
    for spec in SPECS:
        hit = newest(gpu_dir, spec)
        if hit is None:
            continue
        version, path = hit
        raw = pd.read_parquet(path)
        device = device or str(raw["device"].iloc[0])
        runtime, dropped = split_runtimes(raw, version) if spec.framework == "vllm" else (version, {})
        if dropped:  # a table keeps only the rows of the one runtime it is labelled with
            raw = raw[raw["version"].astype(str) == runtime]
        df = reduce_table(raw, spec, str(path))
        write_parquet(df, out / f"{spec.name}.parquet")
        tables[spec.name] = {"framework": spec.framework, "version": runtime, "rows": len(df),
                             "source": str(path.relative_to(root))}
        if runtime != version:
            tables[spec.name]["folder"] = version
        if dropped:
            tables[spec.name]["dropped_other_runtime_rows"] = dropped
    return {"system": system, "device": device, "tables": tables}


def license_text(root: Path) -> str:
    """The wheel's own licence file when it ships one, else the standard Apache-2.0 text."""
    info = dist_info(root)
    for cand in sorted(info.glob("licenses/*")) if info else []:
        if "Apache License" in cand.read_text(errors="replace"):
            return cand.read_text()
    return LICENSE_FALLBACK.read_text()


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--aic-root", type=Path, default=None, help="aiconfigurator_core package folder")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    args = ap.parse_args(argv)
    root = find_root(args.aic_root)
    version = package_version(root)
    gpus = {gpu: extract_gpu(root, system, args.out / gpu) for system, gpu in GPUS.items()}
    manifest = {"package": PACKAGE, "package_version": version, "time_unit": "us", "gpus": gpus}
    lic = license_text(root)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    (args.out / "README.md").write_text(readme_text(manifest))
    (args.out / "NOTICE").write_text(notice_text(version))
    (args.out / "LICENSE").write_text(lic)
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"{PACKAGE} {version} -> {args.out} ({size / 1e6:.2f} MB)")
    return args.out


if __name__ == "__main__":
    main()
