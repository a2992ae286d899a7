"""KV write (reshape-and-cache) kernel under TRITON_INTERPRET=1."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # must precede the first triton import
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from calibration.kernels import write_kv  # noqa: E402

pytestmark = pytest.mark.kernel
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("block_size", [8, 128])
def test_write_kv_scatters_by_slot(dtype, block_size: int) -> None:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(1)
    n, hkv, d, blocks = 5, 2, 32, 4
    key = torch.randn((n, hkv, d), generator=g).to(dtype).to(DEVICE)
    value = torch.randn((n, hkv, d), generator=g).to(dtype).to(DEVICE)
    k_cache = torch.full((blocks, block_size, hkv, d), float("nan"), dtype=dtype, device=DEVICE)
    v_cache = k_cache.clone()
    slots = [3 * block_size + 1, 0, -1, 2 * block_size + block_size - 1, block_size + 2]
    write_kv(key, value, k_cache, v_cache, torch.tensor(slots, dtype=torch.int64, device=DEVICE))
    for i, s in enumerate(slots):
        if s < 0:
            continue
        assert torch.equal(k_cache[s // block_size, s % block_size], key[i])
        assert torch.equal(v_cache[s // block_size, s % block_size], value[i])
    written = sum(1 for s in slots if s >= 0)
    assert int(torch.isfinite(k_cache).all(dim=(2, 3)).sum()) == written  # nothing else touched


def test_write_kv_asserts() -> None:
    key = torch.zeros((2, 2, 32), dtype=torch.float16)
    cache = torch.zeros((2, 16, 2, 32), dtype=torch.float16)
    with pytest.raises(AssertionError):
        write_kv(key, key, cache, cache, torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(AssertionError):
        write_kv(key.float(), key.float(), cache, cache, torch.tensor([0, 1]))
