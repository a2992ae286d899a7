"""Chained content keys for full blocks (vLLM's block hashes, as small integers).

A block's key is ``(parent key, content)`` interned to an int, so equal prefixes get equal
keys and a key identifies the whole prefix up to its block. Content comes from the request's
prompt (``Request.content``: token ids, Mooncake hash ids, or a shared prompt id for fanned-out
samples); every other block -- generated tokens, or a prompt with no content -- is unique to
the request and gets an arithmetic key that needs no hashing and can never collide::

    key(uid, j) = -(uid * UNIQUE_BASE + j + 1)      < 0;  interned content keys are > 0
"""

from __future__ import annotations

from sim.kv.block_table import BlockTable
from sim.request import Request

UNIQUE_BASE = 1 << 24  # blocks per request addressable by the unique-content keys


def unique_key(uid: int, j: int) -> int:
    return -(uid * UNIQUE_BASE + j + 1)


def content_tokens(req: Request) -> int:
    """Tokens whose content the request names: its prompt, or more where its token ids go on
    past it (a session turn's output, which the next turn's prompt repeats: sim/run/clients.py)."""
    c = req.content
    return max(req.prompt_tokens, len(c[1])) if c is not None and c[0] == "ids" else req.prompt_tokens  # type: ignore[index]  # (content: a tagged tuple)


def shared_prefix_blocks(req: Request, block_size: int) -> int:
    """Leading blocks whose content comes from the request's content (shareable)."""
    return 0 if req.content is None else content_tokens(req) // block_size


class BlockHasher:
    """Interns ``(parent, content)`` pairs; one per pool, so keys are comparable within it."""

    __slots__ = ("_intern", "block_size")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._intern: dict[tuple[object, ...], int] = {}

    def key(self, req: Request, table: BlockTable, j: int) -> int:
        """Content key of logical block ``j``, computing the chain up to it if needed."""
        hashes = table.hashes
        while len(hashes) <= j:
            hashes.append(self._key(req, hashes, len(hashes)))
        return hashes[j]

    def _key(self, req: Request, hashes: list[int], j: int) -> int:
        B = self.block_size
        c = req.content
        if c is None or (j + 1) * B > content_tokens(req):
            return unique_key(req.uid, j)
        kind = c[0]  # type: ignore[index]
        if kind == "ids":
            content: object = c[1][j * B:(j + 1) * B]  # type: ignore[index]
        elif kind == "hash":
            tph = c[2]  # type: ignore[index]
            h0, h1 = j * B // tph, ((j + 1) * B - 1) // tph
            content = (c[1][h0:h1 + 1], j * B - h0 * tph)  # type: ignore[index]
        else:  # ("shared", key): fanned-out samples share their prompt
            content = (c[1], j)  # type: ignore[index]
        parent = hashes[j - 1] if j else 0
        key = (parent, content)
        v = self._intern.get(key)
        if v is None:
            v = self._intern[key] = len(self._intern) + 1
        return v
