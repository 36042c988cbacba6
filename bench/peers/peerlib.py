"""What every GPU peer script shares: CUDA-event medians after warm-up, one
SDPA call per backend with the GQA fallback, and the HBM ceilings measured
the same way each time. Scripts in other folders add this folder to sys.path.
"""
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def median_ms(fn, reps=20, warmup=3, batch=1):
    """Median of `reps` CUDA-event timings of fn() after `warmup` calls. Each
    timing starts on an idle GPU, so it includes the host's time to launch
    fn's kernels; with batch > 1 it spans that many calls back to back and is
    divided by them, which leaves only the device's time per call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(batch):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / batch)
    return statistics.median(ts)


def sdpa_ms(backend, q, k, v, causal, reps=20, warmup=3, batch=1):
    """Median ms of SDPA through one backend ("flash", "cudnn", "efficient").
    GQA goes through enable_gqa where the backend takes it; otherwise K/V are
    expanded to the query heads first, outside the timing. Raises when the
    backend refuses the shape."""
    hq, hk = q.shape[1], k.shape[1]
    with sdpa_kernel([BACKENDS[backend]]):
        try:
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                        enable_gqa=hq != hk)
            fn()
        except RuntimeError:
            if hq == hk:
                raise
            ke, ve = k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1)
            fn = lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)
            fn()
        return median_ms(fn, reps, warmup, batch)


def refusal(e):
    """One short line saying why a backend refused a shape."""
    return str(e).splitlines()[0][:80] if str(e) else type(e).__name__


def hbm_gbps(nbytes=2 << 30, reps=20):
    """(read-only GB/s, copy GB/s counting read + write) over nbytes of bf16:
    the read-only figure is the decode ceiling the issues name."""
    x = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    read = nbytes / median_ms(lambda: x.sum(dtype=torch.float32), reps) / 1e6
    y = torch.empty_like(x)
    copy = 2 * nbytes / median_ms(lambda: y.copy_(x), reps) / 1e6
    del x, y
    return read, copy


def tensor_tflops(n=8192, reps=20):
    """Dense bf16 matmul TFLOP/s (n x n x n, fp32 accumulate): the tensor
    ceiling a prefill's rate is a fraction of."""
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    ms = median_ms(lambda: a @ b, reps, warmup=5, batch=5)
    del a, b
    return 2 * n ** 3 / ms / 1e9
