"""Alibaba ServeGen per-client data (``data/<category>/<model>/chunk-<c>-{trace.csv,dataset.json}``).

Not a request trace: per client, 600-s windows of (rate, CV, fitted inter-arrival pattern) and
6-h windows of length PMFs. :func:`build_trace` turns a window of it into requests: rates are
relative shares of a user-chosen aggregate rate (the published scale is undocumented), each
client's arrivals follow its fitted Gamma/Weibull gaps rescaled to that share, and lengths are
drawn from the client's PMF for the 6-h window (falling back to the client's, then the whole
archive's, request-weighted mixture).
"""

from __future__ import annotations

import ast
import io
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import gamma as gamma_fn

from sim.errors import ConfigError, TraceError
from workloads.readers.base import ReadOptions
from workloads.schema import Trace, validate

RATE_WINDOW_S = 600
PMF_WINDOW_S = 21600
_MEMBER = re.compile(r"chunk-(\d+)-(trace\.csv|dataset\.json)$")
Pmf = tuple[np.ndarray, np.ndarray]  # values, probabilities


@dataclass(frozen=True, slots=True)
class Client:
    cid: int
    windows: pd.DataFrame  # window_start_s, rate, cv, pattern, shape, scale
    pmfs: dict[int, dict[str, Pmf]] = field(default_factory=dict)  # 6-h window -> field -> pmf


@dataclass(frozen=True, slots=True)
class ServeGenData:
    path: str
    model: str
    clients: dict[int, Client]

    @property
    def has_lengths(self) -> bool:
        return any(c.pmfs for c in self.clients.values())


def _parse_trace_csv(where: str, data: bytes) -> pd.DataFrame:
    names = ["window_start_s", "rate", "cv", "pattern", "shape", "scale"]
    df = pd.read_csv(io.BytesIO(data), header=None, names=names, dtype=str, keep_default_na=False)
    for col in ("window_start_s", "rate", "cv", "shape", "scale"):
        num = pd.to_numeric(df[col], errors="coerce")
        if num.isna().any():
            i = int(np.flatnonzero(num.isna().to_numpy())[0])
            raise TraceError(where, i + 1, col, f"not a number: {df[col].iloc[i]!r}")
        df[col] = num.astype("float64")
    return df


def _parse_dataset(where: str, data: bytes) -> dict[int, dict[str, Pmf]]:
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as e:
        raise TraceError(where, e.lineno, None, f"invalid JSON ({e.msg})") from None
    out: dict[int, dict[str, Pmf]] = {}
    for win, fields in obj.items():
        pmfs: dict[str, Pmf] = {}
        for name, text in fields.items():
            try:
                d = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise TraceError(where, None, f"{win}.{name}", "not a Python dict literal") from None
            if d:
                v = np.fromiter(d.keys(), dtype="float64", count=len(d))
                p = np.fromiter(d.values(), dtype="float64", count=len(d))
                order = np.argsort(v)
                pmfs[name] = (v[order], p[order] / p.sum())
        if pmfs:
            out[int(win)] = pmfs
    return out


def read_archive(path: str | Path) -> ServeGenData:
    """Read every client of a ServeGen ``.tar.xz`` archive."""
    p = Path(path)
    try:
        tar = tarfile.open(p, "r:xz")  # noqa: SIM115  (closed by the with-block below)
    except (tarfile.TarError, OSError) as e:
        raise TraceError(str(p), None, None, f"not a ServeGen tar.xz archive ({e})") from None
    traces: dict[int, pd.DataFrame] = {}
    pmfs: dict[int, dict[int, dict[str, Pmf]]] = {}
    model = ""
    with tar:
        for m in tar.getmembers():
            hit = _MEMBER.search(m.name)
            if not hit or not m.isfile():
                continue
            model = model or "/".join(m.name.split("/")[1:3])
            f = tar.extractfile(m)
            assert f is not None
            where = f"{p}!{m.name}"
            if hit[2] == "trace.csv":
                traces[int(hit[1])] = _parse_trace_csv(where, f.read())
            else:
                pmfs[int(hit[1])] = _parse_dataset(where, f.read())
    if not traces:
        raise TraceError(str(p), None, None, "no chunk-<client>-trace.csv members")
    clients = {c: Client(c, w, pmfs.get(c, {})) for c, w in sorted(traces.items())}
    return ServeGenData(str(p), model, clients)


def aggregate_rate(data: ServeGenData, clients: list[int] | None = None) -> pd.Series:
    """Sum of the chosen clients' published rates per 600-s window (index: window start)."""
    chosen = [data.clients[c] for c in (clients if clients is not None else data.clients)]
    frames = [c.windows.set_index("window_start_s")["rate"] for c in chosen]
    return pd.concat(frames, axis=1).fillna(0.0).sum(axis=1).sort_index()


def _client_weight(c: Client, win: int) -> float:
    w = c.windows
    sel = (w["window_start_s"] >= win) & (w["window_start_s"] < win + PMF_WINDOW_S)
    return float(w.loc[sel, "rate"].sum() * RATE_WINDOW_S)


def mixture(data: ServeGenData, name: str, clients: list[int] | None = None) -> Pmf | None:
    """Request-weighted mixture of field ``name``: each client's 6-h PMF weighted by its requests."""
    vals, probs = [], []
    for c in (data.clients[i] for i in (clients if clients is not None else data.clients)):
        for win, pm in c.pmfs.items():
            if name in pm:
                wt = _client_weight(c, win)
                if wt > 0:
                    vals.append(pm[name][0])
                    probs.append(pm[name][1] * wt)
    if not vals:
        return None
    v, p = np.concatenate(vals), np.concatenate(probs)
    uv, inv = np.unique(v, return_inverse=True)
    return uv, np.bincount(inv, weights=p) / p.sum()


def pmf_stats(pmf: Pmf) -> dict[str, float]:
    """Mean and p50/p90/p99 (smallest value whose CDF reaches q) and max of a PMF."""
    v, p = pmf
    cdf = np.cumsum(p)
    q = {f"p{k}": float(v[min(int(np.searchsorted(cdf, k / 100 - 1e-12)), len(v) - 1)]) for k in (50, 90, 99)}
    return {"mean": float((v * p).sum()), **q, "max": float(v[p > 0].max())}


def _unit_gaps(rng: np.random.Generator, pattern: str, shape: float, n: int) -> np.ndarray:
    """Gaps with mean 1 and the fitted distribution's shape (Poisson if unfitted)."""
    if pattern == "Gamma" and shape > 0:
        return rng.gamma(shape, 1.0 / shape, n)
    if pattern == "Weibull" and shape > 0:
        return rng.weibull(shape, n) / float(gamma_fn(1 + 1 / shape))
    return rng.exponential(1.0, n)


def _sample(rng: np.random.Generator, pmf: Pmf, n: int) -> np.ndarray:
    return rng.choice(pmf[0], size=n, p=pmf[1])


def _prompt_fields(data: ServeGenData) -> tuple[str, ...]:
    if data.model.startswith("multimodal"):
        return ("text_tokens", "image_tokens", "audio_tokens", "video_tokens")
    return ("input_tokens",)


def build_trace(data: ServeGenData, rng: np.random.Generator, *, total_rate: float,
                start_s: float = 0.0, duration_s: float = 3600.0,
                clients: list[int] | None = None) -> pd.DataFrame:
    """Requests in ``[start_s, start_s + duration_s)`` at mean aggregate rate ``total_rate``.

    Multimodal prompts are the sum of independently drawn text/image/audio/video tokens.
    """
    if total_rate <= 0 or duration_s <= 0:
        raise ConfigError("servegen: total_rate and duration_s must be > 0")
    ids = list(data.clients) if clients is None else clients
    unknown = [c for c in ids if c not in data.clients]
    if unknown:
        raise ConfigError(f"servegen: no client {unknown[0]} in {data.path}")
    if not data.has_lengths:
        raise ConfigError(f"servegen: {data.path} has no length data (trace-only archive)")
    agg = aggregate_rate(data, ids)
    end = start_s + duration_s
    in_range = agg[(agg.index + RATE_WINDOW_S > start_s) & (agg.index < end)]
    if in_range.sum() <= 0:
        raise ConfigError(f"servegen: the chosen clients are idle in [{start_s:g}, {end:g}) s")
    factor = total_rate / float(in_range.mean())
    fields = _prompt_fields(data)
    pooled = {f: mixture(data, f, ids) for f in (*fields, "output_tokens")}
    times, prompts, outputs, who = [], [], [], []
    for c in (data.clients[i] for i in ids):
        w = c.windows
        rows = w[(w["window_start_s"] + RATE_WINDOW_S > start_s) & (w["window_start_s"] < end) & (w["rate"] > 0)]
        ts = []
        for ws, rate, pattern, shape in zip(rows["window_start_s"], rows["rate"], rows["pattern"], rows["shape"], strict=True):
            lo, hi, r = max(ws, start_s), min(ws + RATE_WINDOW_S, end), rate * factor
            m = int(r * (hi - lo) * 1.3 + 10 * np.sqrt(r * (hi - lo)) + 16)
            t = lo + np.cumsum(_unit_gaps(rng, pattern, shape, m)) / r
            ts.append(t[t < hi])
        if not ts:
            continue
        t = np.concatenate(ts)
        n = len(t)
        win = (t // PMF_WINDOW_S * PMF_WINDOW_S).astype(np.int64)
        p = np.zeros(n, dtype=np.int64)
        o = np.zeros(n, dtype=np.int64)
        own = {f: mixture(data, f, [c.cid]) for f in (*fields, "output_tokens")}
        for wv in np.unique(win):
            sel = win == wv
            k = int(sel.sum())
            pm = c.pmfs.get(int(wv), {})
            for f in fields:
                pmf = pm.get(f) or own[f] or pooled[f]
                if pmf is not None:
                    p[sel] += _sample(rng, pmf, k).astype(np.int64)
            pmf = pm.get("output_tokens") or own["output_tokens"] or pooled["output_tokens"]
            assert pmf is not None
            o[sel] = _sample(rng, pmf, k).astype(np.int64)
        times.append(t - start_s)
        prompts.append(p)
        outputs.append(o)
        who.append(np.full(n, c.cid, dtype=np.int64))
    df = pd.DataFrame({"arrival_s": np.concatenate(times), "prompt_tokens": np.maximum(1, np.concatenate(prompts)),
                       "output_tokens": np.maximum(1, np.concatenate(outputs)), "client_id": np.concatenate(who)})
    return df.iloc[np.argsort(df["arrival_s"].to_numpy(), kind="stable")].reset_index(drop=True)


def load_servegen_trace(path: Path, opts: ReadOptions) -> Trace:
    """``load_trace`` on an archive: ``opts.servegen`` holds :func:`build_trace`'s keywords.

    Without ``total_rate`` the published units are used as req/s.
    """
    data = read_archive(path)
    kw = dict(opts.servegen)
    start, dur = float(kw.pop("start_s", 0.0)), float(kw.pop("duration_s", 3600.0))  # type: ignore[arg-type]
    clients: list[int] | None = kw.pop("clients", None)  # type: ignore[assignment]
    rate = kw.pop("total_rate", None)
    if kw:
        raise ConfigError(f"servegen: unknown option {next(iter(kw))!r}")
    if rate is None:
        agg = aggregate_rate(data)
        rate = float(agg[(agg.index + RATE_WINDOW_S > start) & (agg.index < start + dur)].mean())
    df = build_trace(data, np.random.default_rng(opts.seed), total_rate=float(rate),  # type: ignore[arg-type]
                     start_s=start, duration_s=dur, clients=clients)
    return Trace(df=validate(df, str(path)), path=str(path), format="servegen",
                 notes=(f"built from {data.model}: {len(clients or data.clients)} clients, "
                        f"{dur:g} s from {start:g} s, mean rate {rate:g} req/s, seed {opts.seed}",))
