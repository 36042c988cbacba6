"""Helpers shared by the attention kernels of the triton plugin.

Everything here is a @triton.jit function inlined into the kernels that call
it, so the generated artifacts carry no separate device functions. Scores are
kept in log2 units (multiplied by log2(e)) so the online softmax uses exp2.
"""
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@triton.jit
def tanh_f32(x):
    # tanh through exp: portable across the NVIDIA and AMD backends, and
    # saturates correctly (exp overflow gives 1, underflow gives -1).
    e = tl.exp(2.0 * x)
    return 1.0 - 2.0 / (e + 1.0)


@triton.jit
def score_transform(qk, scale, softcap, slope2, key_pos, q_pos, SOFTCAP: tl.constexpr):
    """Raw dot products -> log2-unit logits: scale, soft-cap, then ALiBi.

    slope2 is the per-row ALiBi slope times log2(e) (0 when ALiBi is off),
    key_pos [N] and q_pos [M] the positions entering slope * (j - p).
    SOFTCAP is a compile-time switch: callers branch on the runtime flag
    outside their key loops, because a branch inside a loop defeats Triton's
    software pipelining."""
    if SOFTCAP:
        s = tanh_f32(qk * (scale / softcap)) * (softcap * 1.4426950408889634)
    else:
        s = qk * (scale * 1.4426950408889634)
    s = s + slope2[:, None] * (key_pos[None, :] - q_pos[:, None]).to(tl.float32)
    return s


@triton.jit
def online_softmax_step(acc, l_i, m_i, s, v):
    """Fold one tile of log2-unit logits s [M, N] and values v [N, D] into the
    running max m_i, denominator l_i and numerator acc. Rows whose logits are
    all -inf so far keep m_i = -inf without producing NaN."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(s - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def online_softmax_step_scaled(acc, l_i, m_i, x, c, v):
    """online_softmax_step for logits c * x with c > 0 (x raw dot products,
    c the log2-unit scale): max(c * x) = c * max(x), and c * x - m is one
    FMA inside the exponent instead of a multiply and a subtract."""
    m_new = tl.maximum(m_i, tl.max(x, 1) * c)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(x * c - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def visible(key_pos, q_pos, seq_len, window, causal):
    """[M, N] mask of the keys each query row may see (reference.h rules):
    inside the sequence; causal: j <= p and j > p - window; otherwise
    |j - p| < window when a window is set."""
    dist = key_pos[None, :] - q_pos[:, None]
    ok = (key_pos < seq_len)[None, :] & ((dist <= 0) | (causal == 0))
    ok = ok & ((window == 0) | ((dist > -window) & ((dist < window) | (causal != 0))))
    return ok


@triton.jit
def key_range(min_pos, max_pos, n_keys, window, causal):
    """Keys a program's rows see, its rows at positions min_pos..max_pos over
    n_keys keys: [lo_k, hi_k) by some row, from full_lo (and below full_hi)
    by every row."""
    lo_k = min_pos * 0
    full_lo = min_pos * 0
    if window > 0:
        lo_k = tl.maximum(min_pos - window + 1, 0)
        full_lo = tl.maximum(max_pos - window + 1, 0)
    if causal != 0:
        hi_k = max_pos + 1
        full_hi = min_pos + 1
    else:
        hi_k = n_keys
        full_hi = n_keys
        if window > 0:
            hi_k = tl.minimum(n_keys, max_pos + window)
            full_hi = tl.minimum(n_keys, min_pos + window)
    return lo_k, full_lo, tl.minimum(hi_k, n_keys), tl.minimum(full_hi, n_keys)


@triton.jit
def find_q_block(pid, query_start_loc, num_reqs, block_q):
    """The request of q block pid, whose blocks are numbered request by
    request (request r's first is qsl[r] // block_q + r): the request, its
    first query token and query count, and the block's first query."""
    lo = pid * 0
    hi = num_reqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        first = tl.load(query_start_loc + mid) // block_q + mid
        if first <= pid:
            lo = mid
        else:
            hi = mid - 1
    req = lo
    q_begin = tl.load(query_start_loc + req)
    q_len = tl.load(query_start_loc + req + 1) - q_begin
    return req, q_begin, q_len, (pid - (q_begin // block_q + req)) * block_q

