/*
 * Benchmark of the triton plugin through its ABI: paged decode (split-KV
 * path) and causal and bidirectional prefill (unified kernel) on the
 * issue's shapes, and ragged MLA prefill (qk 192 / v 128), timed
 * with the plugin's event timer (CUDA events), median of many runs after
 * warm-up, on random data; plus the device-to-device copy bandwidth as
 * the HBM ceiling. Prints one line per shape: ms, TFLOP/s, GB/s.
 *
 * The plugin gets the host's own services (tests/helpers/ath.h).
 *
 * Usage: triton_bench [--splits LIST] [--quick]
 *   --splits: comma-separated num_kv_splits values to try for decode
 *             (default "auto").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ath.h"

static ath_host P;
static const ah_plugin_ops *O;

/* Median ms of reps timed runs of forward (after warm-up). */
static float time_forward(ah_context *ctx, ah_state *st, const ah_forward_args *a, int reps)
{
    float *t = malloc(sizeof(float) * reps);
    for (int i = 0; i < 3; i++) O->forward(st, a);
    O->synchronize(ctx, a->stream);
    for (int i = 0; i < reps; i++) {
        O->timer_start(ctx, a->stream);
        if (O->forward(st, a) != AH_OK) {
            fprintf(stderr, "forward: %s\n", O->state_error(st));
            free(t);
            return -1;
        }
        O->timer_stop(ctx, a->stream, &t[i]);
    }
    ath_sort_f(t, reps);
    float m = t[reps / 2];
    free(t);
    return m;
}

static void fill_random(ah_context *ctx, ath_tensor *d, uint64_t *rng)
{
    /* Random bf16 in [-1, 1): upload in chunks to bound host memory. */
    size_t chunk = 64u << 20, done = 0;
    uint16_t *buf = malloc(chunk);
    ath_fill_uniform(buf, chunk / 2, AH_DTYPE_BF16, 1.f, 1.f, rng);
    while (done < d->bytes) {
        size_t n = d->bytes - done < chunk ? d->bytes - done : chunk;
        O->mem_copy(ctx, (char *)d->t.data + done, buf, n, AH_COPY_HOST_TO_DEVICE, NULL);
        buf[done / 2 % (chunk / 2)] ^= 0x1234; /* vary chunks a little */
        done += n;
    }
    free(buf);
}

typedef struct shape {
    const char *kind;
    uint32_t batch, q_len, seq, hq, hk, d, bs;
    int bidirectional; /* prefill: AH_ATTN_ENCODER_ONLY instead of causal */
} shape;

static void bench(ah_context *ctx, const shape *s, const char *splits, uint64_t *rng, int reps)
{
    int32_t *ql = malloc(4 * s->batch), *sl = malloc(4 * s->batch);
    for (uint32_t r = 0; r < s->batch; r++) {
        ql[r] = (int32_t)s->q_len;
        sl[r] = (int32_t)s->seq;
    }
    /* A pitched table, as engines pad them; unused entries would fault. */
    const ath_batch_spec bsp = {.num_reqs = s->batch,
                                .qlens = ql,
                                .seqlens = sl,
                                .block_size = s->bs,
                                .table_pad = 3,
                                .unused_entry = 0x3fffffff};
    ath_batch B;
    if (ath_batch_build(&P, &B, &bsp, rng)) {
        printf("%s: setup failed\n", s->kind);
        return;
    }
    DLDataType bf = ah_dtype_to_dl(AH_DTYPE_BF16);
    int64_t sq[3] = {B.num_tokens, s->hq, s->d}, sc[4] = {B.num_blocks, s->bs, s->hk, s->d};
    ath_tensor q, out, kc, vc;
    if (ath_tensor_alloc(&P, &q, bf, 3, sq) || ath_tensor_alloc(&P, &out, bf, 3, sq) ||
        ath_tensor_alloc(&P, &kc, bf, 4, sc) || ath_tensor_alloc(&P, &vc, bf, 4, sc)) {
        printf("%s: out of device memory\n", s->kind);
        return;
    }
    fill_random(ctx, &q, rng);
    fill_random(ctx, &kc, rng);
    fill_random(ctx, &vc, rng);
    const ah_layer_spec spec = ath_spec(s->bidirectional ? AH_ATTN_ENCODER_ONLY : AH_ATTN_DECODER,
                                        s->hq, s->hk, s->d, AH_DTYPE_BF16, s->bs);
    ah_limits lim = {sizeof lim, B.num_reqs, B.num_tokens, B.width, B.max_seq, B.num_blocks};
    ah_state *st = NULL;
    void *stream = NULL;
    O->stream_create(ctx, &stream);
    if (O->state_create(ctx, &spec, &lim, &st) != AH_OK ||
        O->plan(st, &B.b, AH_PLAN_EAGER, stream) != AH_OK) {
        printf("%s: %s %s\n", s->kind, O->context_error(ctx), st ? O->state_error(st) : "");
        return;
    }
    ah_forward_args a = ath_forward_args(&q.t, &kc.t, &vc.t, &out.t, NULL, stream);
    float ms = time_forward(ctx, st, &a, reps);
    double kv_bytes = 2.0 * s->batch * (double)s->seq * s->hk * s->d * 2;
    double io_bytes = 2.0 * B.num_tokens * s->hq * s->d * 2;
    double flops =
        4.0 * s->batch * s->hq * (double)s->d *
        (s->q_len == 1 ? (double)s->seq : (double)s->seq * s->seq / (s->bidirectional ? 1 : 2));
    printf("%-8s batch %3u q %5u kv %5u hq %u hk %u d %u bs %u %s %-4s: %8.4f ms  %7.1f TFLOP/s  "
           "%7.1f GB/s\n",
           s->kind, s->batch, s->q_len, s->seq, s->hq, s->hk, s->d, s->bs,
           s->q_len == 1 ? "splits" : "", splits, ms, flops / ms / 1e9,
           (kv_bytes + io_bytes) / ms / 1e6);
    fflush(stdout);
    O->state_destroy(st);
    O->stream_destroy(ctx, stream);
    ath_tensor_free(&P, &q);
    ath_tensor_free(&P, &out);
    ath_tensor_free(&P, &kc);
    ath_tensor_free(&P, &vc);
    ath_batch_free(&P, &B);
    free(ql);
    free(sl);
}

/* Ragged prefill (AH_FEAT_RAGGED_KV), MLA's non-absorbed form as
 * DeepSeek-V3 runs it at TP 8: 16 heads, each its own KV head, qk 192 /
 * v 128, bf16, causal, keys = the prompt (bottom-right). FLOPs count QK^T
 * and PV over the causal half. */
static void bench_ragged(ah_context *ctx, uint32_t batch, uint32_t seq, uint32_t h, uint32_t dqk,
                         uint32_t dv, uint64_t *rng, int reps)
{
    const int64_t T = (int64_t)batch * seq, nr1[1] = {batch + 1}, nr[1] = {batch};
    const int64_t sq[3] = {T, h, dqk}, sv[3] = {T, h, dv};
    int32_t *qsl = malloc(4 * (batch + 1)), *sl = malloc(4 * batch);
    for (uint32_t r = 0; r <= batch; r++) qsl[r] = (int32_t)(r * seq);
    for (uint32_t r = 0; r < batch; r++) sl[r] = (int32_t)seq;
    ath_tensor q, k, v, out, dqsl, dsl;
    memset(&dqsl, 0, sizeof dqsl);
    memset(&dsl, 0, sizeof dsl);
    const DLDataType i32 = {kDLInt, 32, 1};
    if (ath_tensor_new(&P, &q, AH_DTYPE_BF16, 3, sq) ||
        ath_tensor_new(&P, &k, AH_DTYPE_BF16, 3, sq) ||
        ath_tensor_new(&P, &v, AH_DTYPE_BF16, 3, sv) ||
        ath_tensor_new(&P, &out, AH_DTYPE_BF16, 3, sv) ||
        ath_tensor_alloc(&P, &dqsl, i32, 1, nr1) || ath_tensor_alloc(&P, &dsl, i32, 1, nr) ||
        ath_upload(&P, &dqsl, qsl) || ath_upload(&P, &dsl, sl)) {
        printf("ragged: out of device memory\n");
        return;
    }
    fill_random(ctx, &q, rng);
    fill_random(ctx, &k, rng);
    fill_random(ctx, &v, rng);
    ah_layer_spec spec = ath_spec(AH_ATTN_DECODER, h, h, dqk, AH_DTYPE_BF16, 16);
    spec.v_head_size = dv;
    spec.ragged_kv = 1;
    ah_batch b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    b.num_reqs = batch;
    b.num_tokens = (uint32_t)T;
    b.max_query_len = b.max_seq_len = seq;
    b.query_start_loc = b.cu_seqlens_k = &dqsl.t;
    b.query_start_loc_host = b.cu_seqlens_k_host = qsl;
    b.seq_lens = &dsl.t;
    b.seq_lens_host = sl;
    b.num_k_tokens = (uint32_t)T;
    b.ragged_keys = AH_RAGGED_KEYS_BOTTOM_RIGHT;
    ah_limits lim = {sizeof lim, batch, (uint32_t)T, 1, seq, 1};
    ah_state *st = NULL;
    void *stream = NULL;
    O->stream_create(ctx, &stream);
    if (O->state_create(ctx, &spec, &lim, &st) != AH_OK ||
        O->plan(st, &b, AH_PLAN_EAGER, stream) != AH_OK) {
        printf("ragged: %s %s\n", O->context_error(ctx), st ? O->state_error(st) : "");
        return;
    }
    ah_forward_args a = ath_forward_args(&q.t, NULL, NULL, &out.t, NULL, stream);
    a.key = &k.t;
    a.value = &v.t;
    float ms = time_forward(ctx, st, &a, reps);
    double flops = 2.0 * batch * h * (double)(dqk + dv) * (double)seq * seq / 2;
    printf("ragged   batch %3u q %5u kv %5u hq %u hk %u d %u/%u causal     : %8.4f ms  %7.1f "
           "TFLOP/s\n",
           batch, seq, seq, h, h, dqk, dv, ms, flops / ms / 1e9);
    fflush(stdout);
    O->state_destroy(st);
    O->stream_destroy(ctx, stream);
    ath_tensor_free(&P, &q);
    ath_tensor_free(&P, &k);
    ath_tensor_free(&P, &v);
    ath_tensor_free(&P, &out);
    ath_tensor_free(&P, &dqsl);
    ath_tensor_free(&P, &dsl);
    free(qsl);
    free(sl);
}

static void copy_bandwidth(ah_context *ctx)
{
    size_t bytes = 2ull << 30;
    void *a = NULL, *b = NULL;
    if (O->mem_alloc(ctx, bytes, &a) || O->mem_alloc(ctx, bytes, &b)) return;
    float t[20];
    for (int i = 0; i < 23; i++) {
        O->timer_start(ctx, NULL);
        O->mem_copy(ctx, b, a, bytes, AH_COPY_DEVICE_TO_DEVICE, NULL);
        O->timer_stop(ctx, NULL, &t[i < 3 ? 0 : i - 3]);
    }
    ath_sort_f(t, 20);
    printf("hbm      device-to-device copy of %zu MiB: %.3f ms, %.1f GB/s (read + write)\n",
           bytes >> 20, t[10], 2.0 * bytes / t[10] / 1e6);
    O->mem_free(ctx, a);
    O->mem_free(ctx, b);
}

int main(int argc, char **argv)
{
    const char *splits = "auto";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = ath_arg_value(argc, argv, &i, "--splits");
        if (v) splits = v;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else return ath_usage(argv[0], "[--splits LIST] [--quick]");
    }
    int prc = ath_start(&P, TK_PLUGIN_PATH);
    if (prc) return prc;
    O = P.ops;
    uint64_t rng = 0x243f6a8885a308d3ull;
    int reps = quick ? 10 : 30;
    const uint32_t seqs[] = {4096, 8192, 16384};
    char list[256];
    snprintf(list, sizeof list, "%s", splits);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        if (ath_set(&P, "num_kv_splits", strcmp(tok, "auto") ? tok : "0")) return 2; /* 0: auto */
        if (ath_context(&P, 0, 0)) return 1;
        if (tok == list) copy_bandwidth(P.ctx);
        for (int i = 0; i < 3; i++) {
            shape s = {"decode", 64, 1, seqs[i], 32, 8, 128, 16, 0};
            bench(P.ctx, &s, tok, &rng, reps);
        }
        O->context_destroy(P.ctx);
        P.ctx = NULL;
    }
    ath_set(&P, "num_kv_splits", "0"); /* auto */
    if (ath_context(&P, 0, 0)) return 1;
    ah_context *ctx = P.ctx;
    for (int bidir = 0; bidir < 2; bidir++)
        for (int i = 0; i < 3; i++) {
            shape s = {bidir ? "prefill-nc" : "prefill",
                       16384 / seqs[i],
                       seqs[i],
                       seqs[i],
                       32,
                       8,
                       128,
                       16,
                       bidir};
            bench(ctx, &s, "-", &rng, quick ? 5 : 10);
        }
    for (int i = 0; i < 3; i++)
        bench_ragged(ctx, 16384 / seqs[i], seqs[i], 16, 192, 128, &rng, quick ? 5 : 10);
    ath_close(&P);
    return 0;
}
