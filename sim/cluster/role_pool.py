"""One role's instances behind one routing policy, with its view of their caches (a cluster's
unified or decode pool, its prefill pool: :mod:`sim.cluster.disagg`)."""

from __future__ import annotations

from sim.cluster.policies import Policy, RouterState
from sim.cluster.router import RouterSpec
from sim.cluster.view import make_view
from sim.engine.replica import Replica
from sim.kv.hashing import BlockHasher
from sim.request import Request


class RolePool:
    """Instances ``idx`` of a cluster (``reps``, in that order), routed by ``spec``."""

    def __init__(self, idx: list[int], reps: list[Replica], spec: RouterSpec, hasher: BlockHasher) -> None:
        self.idx, self.reps = idx, reps
        self.choose: Policy = spec.make()
        self.state = RouterState([1.0] * len(reps), hasher.block_size)
        if spec.uses_view:
            self.state.view = make_view(spec.view, reps, hasher.block_size, spec.delay_s, hasher)

    def pick(self, r: Request, now: float) -> int:
        """The position in ``reps`` of the instance ``r`` goes to at ``now``."""
        st = self.state
        st.now = now
        k = self.choose(r, self.reps, st) if len(self.reps) > 1 else 0
        if st.view is not None:
            st.view.routed(r, self.reps[k], now)
        return k
