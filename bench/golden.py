"""Golden outputs: run a fixed set of configurations and save (or compare) every output.

A refactor that claims "no behaviour change" runs this before and after and compares the
requests frame, the steps frame and the summary column by column::

    python bench/golden.py save  OUT_BEFORE     # on the base commit
    python bench/golden.py save  OUT_AFTER      # on the change
    python bench/golden.py diff  OUT_BEFORE OUT_AFTER
    python bench/golden.py frames                # the 70B replay's frames, hashed (KVSIM_DATA)

Only the public API is used (``sim.simulate``, ``sim.make_config``, ``workloads.loader.load_trace``;
before the layout move ``sim.run`` and ``sim.config``), so the script runs unchanged on both sides of a move.
The Mooncake configuration needs the optional trace (``KVSIM_DATA`` or ``--data``); it is
skipped, and said so, when the file is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
AZURE = REPO / "workloads" / "data" / "azure_conv_slice.csv"

#: name -> (trace, config keys). Small model/memory so the runs preempt and evict.
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "paged": ("azure", {}),
    "paged-exact": ("azure", {"exact_steps": True}),
    "paged-sync": ("azure", {"async_scheduling": False}),
    "slab-pow2-buddy": ("azure", {"allocator": "slab", "reservation": "pow2", "slab_placement": "buddy"}),
    "slab-oracle-firstfit": ("azure", {"allocator": "slab", "reservation": "oracle",
                                       "slab_placement": "first-fit"}),
    "swap": ("azure", {"preemption": "swap"}),
    "priority": ("azure", {"policy": "priority"}),
    "legacy": ("azure", {"preset": "vllm-v1-legacy"}),
    "paper-v0": ("azure", {"preset": "paper-v0"}),
    "hybrid-gemma3": ("azure", {"model": "gemma-3-27b", "kv_memory": "3GiB", "max_model_len": 4096}),
    "offload": ("azure", {"kv_offloading_size": 0.5}),
    "spec-eagle": ("azure", {"num_speculative_tokens": 3, "async_scheduling": False}),
    "threshold-fewest": ("azure", {"long_prefill_token_threshold": 256, "victim": "fewest-tokens"}),
    "mooncake": ("mooncake", {"kv_memory": "8GiB", "max_model_len": 32768}),
    "mooncake-sync": ("mooncake", {"kv_memory": "8GiB", "max_model_len": 32768,
                                  "async_scheduling": False}),
}
BASE = {"model": "llama-3.1-8b", "gpu": "a100-80gb", "kv_memory": "2GiB", "max_num_seqs": 64,
        "max_model_len": 8192, "seed": 7}


def _trace(kind: str, data: Path | None) -> Any:
    import dataclasses

    from workloads.loader import load_trace

    if kind == "azure":
        return load_trace(AZURE)
    if data is None:
        return None
    path = data / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
    if not path.exists():
        path = data / "mooncake_fast25" / "conversation_trace.jsonl"
    if not path.exists():
        return None
    t = load_trace(path)
    return dataclasses.replace(t, df=t.df.head(600).reset_index(drop=True))


def save(out: Path, data: Path | None) -> None:
    try:  # the public API since the layout move (sim.run is a package now)
        from sim import make_config, simulate
    except ImportError:
        from sim.config import make_config
        from sim.run import simulate

    out.mkdir(parents=True, exist_ok=True)
    traces: dict[str, Any] = {}
    for name, (kind, keys) in CONFIGS.items():
        if kind not in traces:
            traces[kind] = _trace(kind, data)
        trace = traces[kind]
        if trace is None:
            print(f"{name}: skipped (no {kind} trace; set KVSIM_DATA or --data)")
            continue
        cfg = make_config(**{**BASE, **keys})
        res = simulate(cfg, trace)
        res.requests.to_parquet(out / f"{name}.requests.parquet", index=False)
        res.steps.to_parquet(out / f"{name}.steps.parquet", index=False)
        doc = res.summary.to_json()
        doc.pop("timings", None)
        (out / f"{name}.summary.json").write_text(json.dumps(doc, indent=1, sort_keys=True, default=str))
        print(f"{name}: {len(res.requests)} requests, {len(res.steps)} steps")


def diff(a: Path, b: Path) -> int:
    bad = 0
    names = sorted({p.name.split(".")[0] for p in a.glob("*.summary.json")})
    for name in names:
        msgs = []
        for part in ("requests", "steps"):
            x = pd.read_parquet(a / f"{name}.{part}.parquet")
            y = pd.read_parquet(b / f"{name}.{part}.parquet")
            if list(x.columns) != list(y.columns) or len(x) != len(y):
                msgs.append(f"{part}: shape/columns differ")
                continue
            for col in x.columns:
                if not x[col].equals(y[col]):
                    msgs.append(f"{part}.{col}")
        sa = json.loads((a / f"{name}.summary.json").read_text())
        sb = json.loads((b / f"{name}.summary.json").read_text())
        msgs += [f"summary.{k}" for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)]
        print(f"{name}: {'identical' if not msgs else 'DIFFERS ' + ', '.join(msgs)}")
        bad += bool(msgs)
    print(f"{len(names) - bad}/{len(names)} configurations identical")
    return 1 if bad else 0


def frames(data: Path | None) -> int:
    """The 70B replay of ``bench_engine.py`` (the whole Azure conversation trace): one hash of
    its requests and steps frames, every value, to compare two builds of a refactor."""
    import hashlib
    import time

    from bench_engine import CONFIG, TRACE_IN_DATA  # issue 19's 70B replica
    from pandas.util import hash_pandas_object

    from sim import make_config, simulate
    from workloads.loader import load_trace

    path = data.joinpath(*TRACE_IN_DATA) if data else None
    if path is None or not path.is_file():
        print(f"golden.py frames: skipped (no trace: {path or 'set KVSIM_DATA or pass --data'})")
        return 0
    cfg = make_config(**CONFIG)
    trace = load_trace(path)
    t0 = time.perf_counter()
    res = simulate(cfg, trace)
    wall = time.perf_counter() - t0
    h = hashlib.sha256()
    for df in (res.requests, res.steps):
        h.update(hash_pandas_object(df, index=False).to_numpy().tobytes())
    print(f"frames {h.hexdigest()[:12]} steps {res.summary.num_steps} wall {wall:.3f}s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("out", type=Path)
    s.add_argument("--data", type=Path, default=os.environ.get("KVSIM_DATA"))
    d = sub.add_parser("diff")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    f = sub.add_parser("frames", help="hash the 70B replay's frames (needs the Azure trace)")
    f.add_argument("--data", type=Path, default=os.environ.get("KVSIM_DATA"))
    args = ap.parse_args()
    if args.cmd == "save":
        save(args.out, Path(args.data) if args.data else None)
        return 0
    if args.cmd == "frames":
        return frames(Path(args.data) if args.data else None)
    return diff(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
