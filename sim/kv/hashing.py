"""Chained content keys for full blocks (vLLM's block hashes, as small integers).

A block's key is ``(parent key, content)`` interned to an int, so equal prefixes get equal
keys and a key identifies the whole prefix up to its block. Content comes from the request's
prompt (``Request.content``: token ids, Mooncake hash ids, or a shared prompt id for fanned-out
samples); every other block -- generated tokens, or a prompt with no content -- is unique to
the request and gets an arithmetic key that needs no hashing and can never collide::

    key(uid, j) = -(uid * UNIQUE_BASE + j + 1)      < 0;  interned content keys are > 0

A prompt named by hash ids whose span is a whole number of blocks is keyed per hash id (one
intern per id) and per block arithmetically, in a range of its own (``HASH_IDS``)::

    H(h)   = intern(("h", H(h - 1), id[h], tokens_per_hash))
    key(j) = HASH_IDS + H * 2**16 + (i + SPREAD * H) % 2**16   (H = H(j // bph), i = j % bph, bph = tokens_per_hash // B)

Both are spread over their low bits on purpose. A dict indexes a key by its low bits (an int
hashes to itself), and a collision costs a probe at a random address of a large table: the
registrations, lookups and evictions of a long-context trace are bound by those probes. So
block ``i`` of an id sits at ``i + SPREAD * H`` (the golden-ratio multiplier: consecutive ids
start far apart), not at ``i`` (every id's blocks on the same ``bph`` slots) nor ``i + H`` (the
next ids' blocks on the same slots, shifted by one); and ``UNIQUE_BASE`` is odd, not a power of
two, so block ``j`` of two requests does not land on one slot. Keys are compared, never
ordered: another spread changes no output, only the time (``bench/bench_pd.py``).
"""

from __future__ import annotations

from sim.kv.block_table import BlockTable
from sim.request import Content, Request

UNIQUE_BASE = 0x9E3779B1  # > the blocks a request can have; odd (the module docstring)
HASH_IDS = 1 << 48  # keys of blocks named by hash ids (BlockHasher._hash_ids) start here, above interned ones
LOW = (1 << 16) - 1  # such a key's block part (its low bits)
SPREAD = 0x9E37  # odd, about 2**16 / golden ratio (the module docstring)


def unique_key(uid: int, j: int) -> int:
    return -(uid * UNIQUE_BASE + j + 1)


def content_tokens(req: Request) -> int:
    """Tokens whose content the request names: its prompt, or more where its token ids go on
    past it (a session turn's output, which the next turn's prompt repeats: sim/run/clients.py)."""
    c = req.content
    return max(req.prompt_tokens, len(c[1])) if c is not None and c[0] == "ids" else req.prompt_tokens


def shared_prefix_blocks(req: Request, block_size: int) -> int:
    """Leading blocks whose content comes from the request's content (shareable)."""
    return 0 if req.content is None else content_tokens(req) // block_size


class BlockHasher:
    """Interns ``(parent, content)`` pairs; one per pool, so keys are comparable within it.

    A cluster shares one among its instances and its routers' views (:mod:`sim.cluster`), with a
    ``memo`` of the last ``memo`` requests' chains by uid: a request's prompt is then hashed once,
    not on its prefill instance, its decode instance and in the router's view again (a uid
    names one request, whose prefill-side clone has the same content)."""

    __slots__ = ("_intern", "_memo", "_memo_cap", "block_size")

    def __init__(self, block_size: int, memo: int = 0) -> None:
        self.block_size = block_size
        self._intern: dict[tuple[object, ...], int] = {}
        self._memo: dict[int, list[int]] | None = {} if memo > 0 else None
        self._memo_cap = memo

    def key(self, req: Request, table: BlockTable, j: int) -> int:
        """Content key of logical block ``j``, computing the chain up to it if needed."""
        hashes = table.hashes
        if len(hashes) <= j:
            self.extend(req, hashes, j + 1)
        return hashes[j]

    def extend(self, req: Request, hashes: list[int], upto: int) -> None:
        """Append the keys of blocks ``len(hashes) .. upto - 1`` (one loop: a long prompt's
        chain is the hot path of prefix caching on content traces)."""
        B, c, j = self.block_size, req.content, len(hashes)
        memo = self._memo
        if memo is not None:
            m = memo.get(req.uid)
            if m is not None and m is not hashes and len(m) > j:
                hashes.extend(m[j:upto])  # (append-only lists: a prefix never changes)
                j = len(hashes)
                if j >= upto:
                    return
        if c is not None:
            j = self._content_keys(c, hashes, j, min(upto, content_tokens(req) // B))
        while j < upto:  # past the content: unique to the request
            hashes.append(unique_key(req.uid, j))
            j += 1
        if memo is not None and memo.get(req.uid) is not hashes:
            memo[req.uid] = hashes
            if len(memo) > self._memo_cap:
                del memo[next(iter(memo))]  # the oldest request's chain

    def _content_keys(self, c: Content, hashes: list[int], j: int, shared: int) -> int:
        """Append the content keys of blocks ``len(hashes) == j .. shared - 1``; returns the next block to key."""
        B, intern, kind = self.block_size, self._intern, c[0]
        parent = hashes[j - 1] if j else 0
        if kind == "hash" and not c[2] % B and c[2] // B < 1 << 16:
            j = self._hash_ids(c, hashes, j, shared)
        while j < shared:
            if kind == "ids":
                content: object = c[1][j * B:(j + 1) * B]
            elif kind == "hash":
                tph = c[2]
                h0, h1 = j * B // tph, ((j + 1) * B - 1) // tph
                content = (c[1][h0:h1 + 1], j * B - h0 * tph)
            else:  # ("shared", key): fanned-out samples share their prompt
                content = (c[1], j)
            key = (parent, content)
            v = intern.get(key)
            if v is None:
                v = intern[key] = len(intern) + 1
            hashes.append(v)
            parent, j = v, j + 1
        return j

    def _hash_ids(self, c: Content, hashes: list[int], j: int, upto: int) -> int:
        """Keys of a prompt named by hash ids of ``tph`` tokens each, ``tph`` a multiple of the
        block size (Mooncake: 512): one interned key ``H`` per hash id, chained over the ids,
        and each block's key ``HASH_IDS + H * 2**16 + (i + H) % 2**16`` (block ``i`` of that id) --
        arithmetic, as equal as the per-block chain (same ids, same position), one intern
        per ``tph // B`` blocks. Returns the next block to key."""
        _, ids, tph = c
        bph, intern = tph // self.block_size, self._intern
        H = (hashes[j - 1] - HASH_IDS) >> 16 if j else 0
        while j < upto:
            h, i = divmod(j, bph)
            if not i:
                key = ("h", H, ids[h], tph)
                H = intern.setdefault(key, len(intern) + 1)
            n = min(bph - i, upto - j)
            base, o = HASH_IDS + (H << 16), (i + H * SPREAD) & LOW
            if o + n <= LOW + 1:
                hashes.extend(range(base + o, base + o + n))
            else:  # wraps around in the low bits
                hashes.extend(range(base + o, base + LOW + 1))
                hashes.extend(range(base, base + o + n - LOW - 1))
            j += n
        return j
