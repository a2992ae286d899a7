"""A cluster: instances with roles, the links between them, the router (``--cluster FILE.yaml``).

::

    router: kv-aware                      # decode / unified pool (sim/cluster/router.py specs)
    prefill_router: least-outstanding-tokens
    flow: decode-first                    # llm-d's; or prefill-first (vLLM's toy proxy)
    threshold: 0                          # llm-d pd threshold: uncached prompt tokens below it
                                          # are prefilled locally on the decode instance
    defaults: {model: llama-3.1-8b}       # simulate options every instance starts from
    instances:
      - {name: prefill, role: prefill, count: 2, config: {gpu: h100, tensor_parallel_size: 1}}
      - {name: decode,  role: decode,  count: 1, config: {gpu: h200, tensor_parallel_size: 2}}
    links:
      default: {kind: rdma-ndr}           # sim/model/data/links.yaml; bandwidth_gbps, latency_us
      pairs:
        - {between: [prefill0, decode], kind: nvlink4}

Roles: ``unified`` (prefill and decode, the default), ``prefill`` and ``decode``. ``count``
instances of an entry are named ``name0, name1, ...`` (just ``name`` when 1). Bad files get
one line naming the file and the field. Every key and its default: :mod:`sim.cluster.schema`
(``kvsim simulate --cluster-help``). An instance's simulate options are the file's ``defaults``,
then the command line's keys (``base``), then its own ``config``, whose changes are kept as
:attr:`Instance.overrides` for the output to list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.cluster import schema as S
from sim.cluster.links import link_kind
from sim.cluster.router import RouterSpec, parse_router
from sim.config.aliases import vllm_aliases
from sim.config.schema import SimConfig, make_config, read_yaml
from sim.errors import ConfigError

ROLES, FLOWS = S.ROLES, S.FLOWS
TOP_KEYS = S.keys(S.TOP)


@dataclass(frozen=True, slots=True)
class Instance:
    name: str
    role: str
    config: SimConfig
    #: (key, this instance's value, the value it replaced or None) for each key its own config sets
    overrides: tuple[tuple[str, Any, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    instances: tuple[Instance, ...]
    router: RouterSpec = field(default_factory=RouterSpec)
    prefill_router: RouterSpec = field(default_factory=RouterSpec)
    flow: str = S.default(S.TOP, "flow")
    threshold: int = S.default(S.TOP, "threshold")
    default_link: dict[str, Any] = field(default_factory=lambda: {"kind": S.default(S.LINK, "kind")})
    pairs: dict[frozenset[str], dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        roles = {i.role for i in self.instances}
        if not self.instances:
            raise ConfigError("cluster: no instances")
        if ("prefill" in roles) != ("decode" in roles):
            raise ConfigError("cluster: prefill instances need decode instances and vice versa")
        if "unified" in roles and "prefill" in roles:
            raise ConfigError("cluster: unified instances beside a prefill/decode split are not modelled")
        if self.flow not in FLOWS:
            raise ConfigError(f"cluster: flow {self.flow!r}: expected one of {', '.join(FLOWS)}")

    @property
    def disaggregated(self) -> bool:
        return any(i.role == "prefill" for i in self.instances)

    def link_spec(self, a: str, b: str) -> dict[str, Any]:
        return self.pairs.get(frozenset((a, b)), self.default_link)


def _link(where: str, spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping with kind (and bandwidth_gbps, latency_us)")
    unknown = set(spec) - S.keys(S.LINK)
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (valid: {', '.join(sorted(S.keys(S.LINK)))})")
    try:
        link_kind(str(spec.get("kind", S.default(S.LINK, "kind"))))
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    for k in ("bandwidth_gbps", "latency_us"):
        v = spec.get(k)
        if v is not None and (not isinstance(v, int | float) or v < 0 or (k == "bandwidth_gbps" and v == 0)):
            raise ConfigError(f"{where}.{k}: {v!r} must be a number > 0" + (" (or 0)" if k == "latency_us" else ""))
    return {k: v for k, v in spec.items() if k != "between"}


def _options(where: str, data: Any) -> dict[str, Any]:
    """A mapping of simulate options, dashes -> underscores, vLLM's spellings -> kvsim's."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of simulate options")
    try:
        return vllm_aliases({str(a).replace("-", "_"): v for a, v in data.items()})
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _entry(at: str, item: Any, base: dict[str, Any]) -> tuple[str, str, int, SimConfig, tuple[tuple[str, Any, Any], ...]]:
    """One ``instances[k]`` entry -> (name, role, count, config, overrides)."""
    if not isinstance(item, dict):
        raise ConfigError(f"{at}: expected a mapping with name, role, count, config")
    bad = set(item) - S.keys(S.INSTANCE)
    if bad:
        raise ConfigError(f"{at}: unknown key {sorted(bad)[0]!r} (valid: {', '.join(sorted(S.keys(S.INSTANCE)))})")
    role = item.get("role", S.default(S.INSTANCE, "role"))
    if role not in ROLES:
        raise ConfigError(f"{at}.role: unknown role {role!r} (expected one of {', '.join(ROLES)})")
    count = item.get("count", S.default(S.INSTANCE, "count"))
    if not isinstance(count, int) or count < 1:
        raise ConfigError(f"{at}.count: {count!r} must be an integer >= 1")
    own = _options(f"{at}.config", item.get("config"))
    for k in S.ARRIVAL_KEYS:
        if k in own:
            raise ConfigError(f"{at}.config.{k}: arrivals are the cluster's, not one instance's "
                              "(put it in defaults: or on the command line)")
    cfg = make_config(f"{at}.config", **{**base, **own})
    over = tuple((k, v, base.get(k)) for k, v in own.items() if k not in base or base[k] != v)
    return str(item.get("name", role)), role, count, cfg, over


def _instances(where: str, raw: Any, base: dict[str, Any]) -> list[Instance]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}.instances: expected a list of instances")
    out: list[Instance] = []
    for k, item in enumerate(raw):
        name, role, count, cfg, over = _entry(f"{where}.instances[{k}]", item, base)
        out += [Instance(name if count == 1 else f"{name}{j}", role, cfg, over) for j in range(count)]
    names = [i.name for i in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.instances: duplicate instance name {next(n for n in names if names.count(n) > 1)!r}")
    return out


def _links(where: str, data: Any, names: list[str]) -> tuple[dict[str, Any], dict[frozenset[str], dict[str, Any]]]:
    links = data.get("links") or {}
    if not isinstance(links, dict) or set(links) - {"default", "pairs"}:
        raise ConfigError(f"{where}.links: expected a mapping with default and pairs")
    default = _link(f"{where}.links.default", links.get("default", {"kind": S.default(S.LINK, "kind")}))
    pairs: dict[frozenset[str], dict[str, Any]] = {}
    for k, p in enumerate(links.get("pairs") or []):
        at = f"{where}.links.pairs[{k}]"
        spec = _link(at, p)
        ends = p.get("between")
        if not isinstance(ends, list) or len(ends) != 2:
            raise ConfigError(f"{at}.between: expected two instance names")
        for e in ends:
            if e not in names:
                raise ConfigError(f"{at}.between: link to nowhere: no instance {e!r} (instances: {', '.join(names)})")
        pairs[frozenset(ends)] = spec
    return default, pairs


def parse_cluster(data: Any, where: str = "cluster", base: dict[str, Any] | None = None) -> ClusterSpec:
    """A cluster mapping (a parsed YAML file) -> :class:`ClusterSpec`. ``base``: the command
    line's simulate options (config keys), over the file's ``defaults`` for every instance."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with instances, links, router")
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (valid: {', '.join(sorted(TOP_KEYS))})")
    merged = {**_options(f"{where}.defaults", data.get("defaults")), **_options("the command line", base)}
    instances = _instances(where, data.get("instances"), merged)
    default, pairs = _links(where, data, [i.name for i in instances])
    threshold = data.get("threshold", S.default(S.TOP, "threshold"))
    if not isinstance(threshold, int) or threshold < 0:
        raise ConfigError(f"{where}.threshold: {threshold!r} must be an integer >= 0 (tokens)")
    try:
        router = parse_router(str(data.get("router", S.default(S.TOP, "router"))))
        prouter = parse_router(str(data.get("prefill_router", S.default(S.TOP, "prefill_router"))))
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    try:
        return ClusterSpec(tuple(instances), router, prouter, str(data.get("flow", S.default(S.TOP, "flow"))),
                           threshold, default, pairs)
    except ConfigError as e:
        raise ConfigError(f"{where}: {str(e).removeprefix('cluster: ')}") from None


def load_cluster(path: Path, base: dict[str, Any] | None = None) -> ClusterSpec:
    """Read ``--cluster FILE.yaml`` (safe_load); ``base`` as :func:`parse_cluster`'s."""
    return parse_cluster(read_yaml(path), str(path), base)
