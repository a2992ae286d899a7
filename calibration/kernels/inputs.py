"""Random test/benchmark batches: a NaN-poisoned paged pool plus the same data as contiguous slabs.

Every cache slot that no sequence owns (spare pages, the tail of each last page, the gaps
between slabs, the padded block-table entries) holds NaN, so any read the masks should have
excluded turns the output non-finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SLAB_GAP = 16  # NaN rows between consecutive slabs


@dataclass(frozen=True)
class PagedBatch:
    q: torch.Tensor  # [num_tokens, Hq, D]
    k_cache: torch.Tensor  # [num_blocks, block_size, Hkv, D]
    v_cache: torch.Tensor
    block_table: torch.Tensor  # int32 [num_seqs, max_blocks]
    k_slab: torch.Tensor  # [rows, Hkv, D]: the same keys, one contiguous slab per sequence
    v_slab: torch.Tensor
    seq_base: torch.Tensor  # int32 [num_seqs]: first slab row of each sequence
    q_lens: list[int]
    seq_lens: list[int]

    @property
    def pages_touched(self) -> int:
        bs = self.k_cache.shape[1]
        return sum(-(-s // bs) for s in self.seq_lens)


def make_batch(
    q_lens: list[int],
    seq_lens: list[int],
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    *,
    seed: int = 0,
    spare_pages: int = 2,
    page_order: str = "random",
) -> PagedBatch:
    """Sequence i has seq_lens[i] cached keys; its last q_lens[i] tokens are the queries."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    pages_per_seq = [-(-s // block_size) for s in seq_lens]
    used = sum(pages_per_seq)
    num_blocks = used + spare_pages
    order = torch.randperm(num_blocks, generator=g) if page_order == "random" else torch.arange(num_blocks)
    poison_page = int(order[-1]) if spare_pages else 0
    max_blocks = max(pages_per_seq) + 1  # one padded entry per row, pointing at a NaN page
    table = torch.full((len(seq_lens), max_blocks), poison_page, dtype=torch.int32)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    slab_rows = sum(seq_lens) + SLAB_GAP * (len(seq_lens) + 1)
    k_slab = torch.full((slab_rows, num_kv_heads, head_dim), float("nan"), dtype=dtype)
    v_slab = torch.full_like(k_slab, float("nan"))
    bases: list[int] = []
    nxt, row = 0, SLAB_GAP
    for i, s in enumerate(seq_lens):
        k = torch.randn((s, num_kv_heads, head_dim), generator=g).to(dtype)
        v = torch.randn((s, num_kv_heads, head_dim), generator=g).to(dtype)
        pages = order[nxt:nxt + pages_per_seq[i]]
        nxt += pages_per_seq[i]
        table[i, : len(pages)] = pages.to(torch.int32)
        pos = torch.arange(s)
        k_cache[pages[pos // block_size], pos % block_size] = k
        v_cache[pages[pos // block_size], pos % block_size] = v
        k_slab[row:row + s], v_slab[row:row + s] = k, v
        bases.append(row)
        row += s + SLAB_GAP
    q = torch.randn((sum(q_lens), num_q_heads, head_dim), generator=g).to(dtype)
    dev = torch.device(device)
    return PagedBatch(
        q=q.to(dev), k_cache=k_cache.to(dev), v_cache=v_cache.to(dev),
        block_table=table.to(dev), k_slab=k_slab.to(dev), v_slab=v_slab.to(dev),
        seq_base=torch.tensor(bases, dtype=torch.int32, device=dev),
        q_lens=list(q_lens), seq_lens=list(seq_lens),
    )
