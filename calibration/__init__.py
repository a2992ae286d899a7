"""Step-cost calibration: our Triton paged-attention kernel, the GPU timing harness, the fit.

Layout:
    kernels/         Triton kernels (unified varlen paged attention, KV write) + torch reference
    features.py      the cost model's feature vectors (numpy only; shared by fit and simulator)
    run_gpu.py       timing harness (one command; CUDA events; resumable; --allow-cpu for tests)
    fit.py           non-negative least squares on relative error, held-out MAPE / p95, YAML out
    vidur_profiles.py reader + fit for Vidur's published A100/H100 operator timings

Only ``features.py``, ``fit.py`` and ``vidur_profiles.py`` are imported by the simulator; they need
numpy/pandas/scipy, never torch or triton.
"""
