"""Render the README's Speed figures from the benches' JSON records (``bench/record.py``).

    python bench/speed_table.py bench/results/speed.jsonl              # print the section
    python bench/speed_table.py bench/results/speed.jsonl --readme README.md          # rewrite it
    python bench/speed_table.py bench/results/speed.jsonl --readme README.md --check  # exit 1 if stale

The newest record of each bench makes one row: the command as run, the cost model it ran
with, the machine and date, the figures and the issue's target beside them. The README holds
the rendered text between two markers; nothing between them is written by hand, so the
section cannot drift from the runs (``tests/test_speed_table.py`` checks it).

The one-replica ratio to Vidur is measured when the record carries Vidur's loop from the same
run (``bench_engine.py --vidur-python``, which runs ``bench/vidur_loop.py``) or from the same
session (``--vidur-s``). Otherwise it is an *estimate*: issue 19 measured Vidur's loop at 66.1 s
on its machine, where the kvsim of before that wave took 5.16 s; that same kvsim runs 1.45x
faster on the 2-core VM these records come from, so Vidur is put at 66.1 / 1.45 = 45.6 s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from record import read

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- speed-table:begin -->", "<!-- speed-table:end -->"
VIDUR_ISSUE_S, ISSUE_MACHINE_SLOWER = 66.1, 1.45  # issue 19's side-by-side run; module docstring
ORDER = ("bench_engine", "bench_fleet", "bench_day", "bench_sweep", "bench_plan", "bench_compiled (engine)")


def newest(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last record of each bench, in file order (a rerun appends, so the last is the newest);
    bench_compiled keeps one per ``what`` (the engine, a fleet router)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        out[r["bench"] + (f" ({r['what']})" if r["bench"] == "bench_compiled" else "")] = r
    return out


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def _machine(r: dict[str, Any]) -> str:
    m = r.get("machine", {})
    built = m.get("compiled_loops")
    how = "" if built is None else f", compiled loops ({len(built)})" if len(built) >= 4 else \
        ", pure Python" if not built else f", compiled: {'+'.join(built)}"  # (four loops until 2026-12-04, then five)
    return f"{m.get('cores', '?')} cores, Python {m.get('python', '?')}{how}, load {m.get('load_avg_1m', '?')}"


def _engine(r: dict[str, Any]) -> tuple[str, str]:
    fig = (f"loop {r['loop_s']:.2f} s: {r['req_per_s']:,} req/s, {r['steps_per_s']:,} steps/s "
           f"({r['steps']:,} steps, {r['ff_steps']:,} fast-forwarded; {r['finished']:,} finished, "
           f"{r['preemptions']:,} preemptions)")
    if "exact_loop_s" in r:
        fig += f"; `--exact-steps` {r['exact_loop_s']:.2f} s in the same process ({r['exact_loop_s'] / r['loop_s']:.1f}x)"
    if "vidur" in r:  # bench_engine --vidur-python: Vidur's loop just before kvsim's, in the same run
        v = r["vidur"]
        fig += (f"; Vidur {v['version']} (bench/vidur_loop.py) {v['loop_s']:.2f} s for {v['batches']:,} batches "
                f"(mean {v['mean_batch']}) in the same run")
        ratio, how = v["loop_s"] / r["loop_s"], "measured in the same run"
        if "vidur_rounds" in r:  # --rounds N: Vidur and kvsim in turn, N pairs; the median is the figure
            pairs = r["vidur_rounds"]
            fig += (f"; {len(pairs)} rounds in turn, Vidur / kvsim: "
                    + ", ".join(f"{p['vidur_s']:.1f} / {p['kvsim_s']:.2f} s" for p in pairs))
            ratio = r["vidur_ratio_median"]
            how = f"median of {len(pairs)} rounds in the same run: " + ", ".join(f"{p['ratio']:.1f}x" for p in pairs)
    elif "vidur_s_same_session" in r:
        ratio, how = r["vidur_s_same_session"] / r["loop_s"], "Vidur measured in the same session"
    else:
        ratio, how = VIDUR_ISSUE_S / ISSUE_MACHINE_SLOWER / r["loop_s"], "estimate: Vidur not run here"
    return fig, f">= 30x Vidur: about {ratio:.0f}x ({how}) -- {_met(ratio >= 30)}"


def _day(r: dict[str, Any]) -> tuple[str, str]:
    fig = (f"{r['replayed']:,} requests over {r['hours']:g} h on {r['replicas']} x {r['model']} / {r['gpu']}, "
           f"{r['router']}: {r['steps']:,} steps, {r['finished']:,} finished, {r['preemptions']:,} preemptions, "
           f"TTFT p99 {r['ttft_p99_s']:.3f} s; **{r['wall_s']:.1f} s**, peak RSS {r['peak_rss_gib']:.2f} GiB")
    if "pausing_wall_s" in r:
        fig += f"; pausing at every arrival {r['pausing_wall_s']:.1f} s"
    if not (r["hours"] >= 24 and r["replayed"] >= 1_000_000):
        return fig, "<= 120 s and <= 4 GiB -- not judged (not the full day)"
    return fig, f"<= 120 s -- {_met(r['wall_s'] <= 120)}; <= 4 GiB -- {_met(r['peak_rss_gib'] <= 4)}"


def _sweep(r: dict[str, Any]) -> tuple[str, str]:
    per_1000 = 1000 * r["wall_s"] / r["points"] / 60
    fig = (f"{r['points']:,} points, {r['jobs']} workers, {r['requests_per_point']:,} requests each: "
           f"**{r['wall_s']:.1f} s** ({r['points_per_min']:,} points/min); {r['simulated']} simulated "
           f"({r['simulated_mean_s']} s each), {r['derived']} derived, {r['failed']} failed")
    return fig, f"1,000 points <= 10 min: {per_1000:.1f} min -- {_met(per_1000 <= 10)}"


def _plan(r: dict[str, Any]) -> tuple[str, str]:
    return (f"{r['grid']}, load x{r['rate_scale']}, {r['backend']} backend, {r['workers']} workers: "
            f"**{r['wall_s']:.1f} s**"), "none (issue 19 quoted 64 s)"


def _plan_disagg(r: dict[str, Any]) -> tuple[str, str]:
    fig = (f"`plan --disagg 4` on the first 15 min of {r['trace']} ({r['requests']:,} requests), "
           f"{r['workers']} workers: **{r['wall_s']:.1f} s**")
    return fig, f"<= 180 s -- {_met(r['wall_s'] <= 180)}"


def _fleet(r: dict[str, Any]) -> tuple[str, str]:
    walls = "; ".join(f"{k} {v:.2f} s" for k, v in r["wall_s"].items())
    fig = f"{r['replicas']} replicas on {r['trace']}: {walls}"
    if "vidur" in r:  # bench_fleet --vidur-python: Vidur's loop on as many replicas, round-robin, same run
        v = r["vidur"]
        ratios = ", ".join(f"{k} {v['loop_s'] / s:.1f}x" for k, s in r["wall_s"].items())
        fig += (f"; Vidur {v['version']} {r['replicas']} replicas, round-robin, {v['loop_s']:.2f} s for "
                f"{v['batches']:,} batches in the same run ({ratios})")
    return fig, "none"


def _compiled(r: dict[str, Any]) -> tuple[str, str]:
    c, p = r["compiled_s"], r["pure_s"]
    what = "70B replica" if r["what"] == "engine" else f"8 x 70B, {r['what']}"
    return (f"{what}, {r['requests']:,} requests, {r['rounds']} rounds in one process: compiled loops "
            f"{sum(c) / len(c):.2f} s, pure Python {sum(p) / len(p):.2f} s (means): **{r['ratio']:.2f}x**", "none")


RENDER = {"bench_engine": _engine, "bench_day": _day, "bench_sweep": _sweep, "bench_plan": _plan,
          "bench_fleet": _fleet, "bench_compiled": _compiled, "bench_plan_disagg": _plan_disagg}


def render(records: list[dict[str, Any]], source: str) -> str:
    last = newest(records)
    lines = [f"Rendered by `python bench/speed_table.py {source} --readme README.md` from the newest "
             "record of each bench; each row's command reruns it (`KVSIM_DATA` names the folder holding "
             "`traces/azure_llm_2023/`). Wall times on a shared VM vary by up to 2x between hours, so "
             "compare ratios taken in one run.", "",
             "| bench | command | cost model | machine, date | figures | target |", "| --- | --- | --- | --- | --- | --- |"]
    for name in sorted(last, key=lambda b: (ORDER.index(b) if b in ORDER else len(ORDER), b)):
        r = last[name]
        try:
            fig, target = RENDER[r["bench"]](r) if r["bench"] in RENDER else (str(r), "")
        except KeyError as e:
            raise SystemExit(f"{source}: the newest {name} record has no field {e.args[0]!r}") from None
        lines.append(f"| {name} | `{r['command']}` | {r['cost_model']} | {_machine(r)}, {r['date']} | {fig} | {target} |")
    return "\n".join(lines) + "\n"


def splice(readme: str, table: str) -> str:
    """``readme`` with the text between the markers replaced by ``table``."""
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README has no {BEGIN} ... {END} block")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", type=Path)
    ap.add_argument("--readme", type=Path, default=None)
    ap.add_argument("--check", action="store_true", help="exit 1 if the README's block is not this rendering")
    a = ap.parse_args()
    src = a.records.resolve()
    for f in (a.records, a.readme):
        if f is not None and not f.is_file():
            raise SystemExit(f"{f}: no such file")
    table = render(read(a.records), (src.relative_to(ROOT) if src.is_relative_to(ROOT) else src).as_posix())
    if a.readme is None:
        print(table, end="")
        return
    old = a.readme.read_text()
    new = splice(old, table)
    if a.check:
        if new != old:
            print(f"{a.readme}: the Speed block is stale; rerun without --check", file=sys.stderr)
            sys.exit(1)
        return
    a.readme.write_text(new)


if __name__ == "__main__":
    main()
