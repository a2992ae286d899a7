"""The headline numbers of a device run, from its CSVs: ``summary.json`` next to them.

    python -m calibration.device_summary DIR [--stage harness=RC:SECONDS ...] [--budget-s S]

- Paging overhead: t(PAGED=True, block 16, random pages) / t(PAGED=False) - 1 on the same batch
  (the harness times both layouts through the same kernel body), per kind (decode, prefill,
  mixed) and per decode point.
- Achieved bandwidth of the paged kernel at block 16 on decode points: the bytes it must read (K
  and V of every context token, the queries and outputs, the block-table entries) over the median
  time; beside it the contiguous variant's and the measured device-to-device copy bandwidth.
- The layer suite: the best decode step's (weights + KV) bytes per second and the best prefill
  step's FLOP/s, as a first check against the datasheet.

Standard library only (the GPU machine has no pandas). ``--stage`` records each stage's exit code
and wall time in ``meta.json`` under ``device_run`` (124 = killed by the wall-clock limit).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

BLOCK = 16


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def _key(point_id: str) -> tuple[str, ...]:
    """The batch a point timed, without its layout: kind, heads, order, sums, count, crc."""
    kind, tag, *rest = point_id.split(":")
    shape, _bs, _layout, order = tag.split("-")
    return (kind, shape, order, *rest)


def _nbytes(dtype: str) -> int:
    return 4 if "32" in dtype else 2


def read_bytes(r: dict[str, str]) -> float:
    """Bytes an attention step must move at least once: KV read, q read, out written, table."""
    e, d = _nbytes(r["dtype"]), int(r["head_dim"])
    kv = 2 * int(r["sum_ctx"]) * int(r["kv_heads"]) * d * e
    return kv + 2 * int(r["sum_q"]) * int(r["q_heads"]) * d * e + 4 * int(r["pages_touched"] or 0)


def _sig(x: float) -> float:
    """Four significant figures: GB/s on a GPU, fractions of one on a CPU test run."""
    return float(f"{x:.4g}")


def _stats(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "median": round(statistics.median(xs), 4), "min": round(min(xs), 4),
            "max": round(max(xs), 4)}


def paging(rows: list[dict[str, str]]) -> dict[str, Any]:
    slab = {_key(r["point_id"]): r for r in rows if r["paged"] == "False"}
    pairs = [(r, slab[_key(r["point_id"])]) for r in rows
             if r["paged"] == "True" and int(r["block_size"]) == BLOCK
             and r["page_order"] == "random" and _key(r["point_id"]) in slab]
    by_kind: dict[str, list[float]] = {}
    decode = []
    for p, s in pairs:
        over = float(p["t_us_median"]) / float(s["t_us_median"]) - 1
        by_kind.setdefault(p["kind"], []).append(over)
        if p["kind"] == "decode":
            gb = read_bytes(p) / 1e9
            decode.append({"n_seqs": int(p["n_seqs"]), "ctx": int(p["max_ctx"]),
                           "t_paged_us": round(float(p["t_us_median"]), 2),
                           "t_contiguous_us": round(float(s["t_us_median"]), 2),
                           "overhead": round(over, 4),
                           "paged_gbps": _sig(gb / (float(p["t_us_median"]) * 1e-6)),
                           "contiguous_gbps": _sig(gb / (float(s["t_us_median"]) * 1e-6))})
    return {"definition": f"t(PAGED, block {BLOCK}, random pages) / t(contiguous) - 1, same batch",
            "by_kind": {k: _stats(v) for k, v in sorted(by_kind.items())},
            "decode_points": sorted(decode, key=lambda x: (x["n_seqs"], x["ctx"]))}


def bandwidth(decode: list[dict[str, Any]], copy: list[dict[str, str]]) -> dict[str, Any]:
    d2d = [r for r in copy if r["kind"] == "d2d"]
    copy_gbps = float(max(d2d, key=lambda r: int(r["bytes"]))["gbps"]) if d2d else None
    out: dict[str, Any] = {"definition": "decode, block 16: (K+V of every context token + q + out"
                           " + block-table entries) / median time", "d2d_copy_gbps": copy_gbps}
    if decode:
        best = max(decode, key=lambda x: x["paged_gbps"])
        out.update(paged_peak_gbps=best["paged_gbps"], at={"n_seqs": best["n_seqs"], "ctx": best["ctx"]},
                   contiguous_peak_gbps=max(x["contiguous_gbps"] for x in decode))
        if copy_gbps:
            out["paged_peak_of_copy"] = round(best["paged_gbps"] / copy_gbps, 3)
    return out


def layer(rows: list[dict[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {"points": len(rows)}
    for kind, num, unit in (("decode", ("weight_bytes", "kv_read_bytes"), "gbps"),
                            ("prefill", ("flops",), "tflops")):
        rs = [r for r in rows if r["kind"] == kind]
        if not rs:
            continue
        scale = 1e9 if unit == "gbps" else 1e12

        def rate(r: dict[str, str], num: tuple[str, ...] = num, scale: float = scale) -> float:
            return sum(float(r[c]) for c in num) / (float(r["t_us_median"]) * 1e-6) / scale

        best = max(rs, key=rate)
        out[f"{kind}_peak_{unit}"] = {"value": _sig(rate(best)), "point": best["point_id"]}
    return out


def summarize(out: Path) -> dict[str, Any]:
    meta = json.loads((out / "meta.json").read_text())
    pg = paging(read_csv(out / "attention.csv"))
    cpu = meta.get("gpu") == "cpu"
    return {"gpu": meta.get("gpu"), "device_name": meta.get("device_name"), "not_gpu_data": cpu,
            "label": "cpu test run: NOT GPU DATA" if cpu else f"{meta.get('gpu')}, measured",
            "git_commit": meta.get("git_commit"), "date": meta.get("date"),
            "paging_overhead_block16": pg,
            "paged_bandwidth_block16": bandwidth(pg["decode_points"], read_csv(out / "copy.csv")),
            "layer": layer(read_csv(out / "layer.csv")),
            "complete": {k: not meta.get(k, {}).get("not_run", 1) for k in ("harness", "layer_suite")}}


def lines(doc: dict[str, Any]) -> list[str]:
    bw, pg = doc["paged_bandwidth_block16"], doc["paging_overhead_block16"]["by_kind"]
    out = [doc["label"]]
    out += [f"paging overhead at block 16, {k}: median {v['median']:+.1%} ({v['min']:+.1%}.."
            f"{v['max']:+.1%}, n={v['n']})" for k, v in pg.items()]
    if "paged_peak_gbps" in bw:
        out.append(f"paged decode bandwidth: peak {bw['paged_peak_gbps']:g} GB/s at {bw['at']}; "
                   f"contiguous {bw['contiguous_peak_gbps']:g}; d2d copy {bw['d2d_copy_gbps']}")
    out += [f"layer {k}: {v['value']:g} ({v['point']})" for k, v in doc["layer"].items()
            if isinstance(v, dict)]
    out.append(f"complete: {doc['complete']}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibration.device_summary", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the device run's folder (has meta.json)")
    ap.add_argument("--stage", action="append", default=[], metavar="NAME=RC:SECONDS")
    ap.add_argument("--budget-s", type=float, help="the run's wall-clock budget, for meta.json")
    args = ap.parse_args(argv)
    meta_path = args.out / "meta.json"
    if not meta_path.exists():
        print(f"{meta_path}: no such file (did the harness start?)", file=sys.stderr)
        return 2
    if args.stage or args.budget_s is not None:
        meta = json.loads(meta_path.read_text())
        stages = {}
        for st in args.stage:
            name, _, val = st.partition("=")
            rc, _, secs = val.partition(":")
            stages[name] = {"exit_code": int(rc), "wall_s": int(secs or 0),
                            "killed_at_limit": int(rc) in (124, 137)}
        meta["device_run"] = {"budget_s": args.budget_s, "stages": stages}
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    doc = summarize(args.out)
    (args.out / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    print("\n".join(lines(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
