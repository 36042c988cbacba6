/*
 * A small, complete engine step for the reliability tests (fault
 * injection, thread stress, bad batches, hostile file systems, leaks): a
 * host over the ABI test plugins, a two-layer fp32 model the test backend
 * serves, a mixed prefill/decode batch with its KV cache, and the tensors
 * of one forward call. Everything is plain host memory, so any CPU plugin
 * can run it and a test can checksum every byte a call may have written.
 */
#ifndef AH_RELIABILITY_FIXTURE_H
#define AH_RELIABILITY_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>

/* Two decoder layers, 4 query heads over 2 KV heads of 64 channels, fp32,
 * 16-token blocks: the ABI test backend serves it, and so does cpu_amx. */
static const char rel_model_text[] = "[model]\n"
                                     "name = rel-tiny\n"
                                     "num_layers = 2\n"
                                     "num_q_heads = 4\n"
                                     "num_kv_heads = 2\n"
                                     "head_size = 64\n"
                                     "dtype = fp32\n"
                                     "kv_dtype = fp32\n"
                                     "kv_layout = nhd\n"
                                     "block_size = 16\n";

#define REL_HQ 4
#define REL_HK 2
#define REL_D 64
#define REL_BS 16
#define REL_REQS 2
#define REL_TOKENS 4 /* request 0: 3 new tokens of 20; request 1: 1 of 22 */
#define REL_BLOCKS 8 /* blocks in the cache */
#define REL_STRIDE 3 /* block-table row width */

/* Host options over dirs, in-process scan, no cache, no default dirs. */
static inline ah_host_options rel_host_options(const char *const *dirs, uint32_t n,
                                               const char *config_text)
{
    ah_host_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.config_text = config_text;
    o.plugin_dirs = dirs;
    o.n_plugin_dirs = n;
    o.no_default_dirs = 1;
    o.scan_mode = AH_SCAN_IN_PROCESS;
    o.cache_path = "";
    return o;
}

static inline ah_binding_options rel_binding_options(void)
{
    ah_binding_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.limits.struct_size = sizeof o.limits;
    o.limits.max_num_reqs = 8;
    o.limits.max_num_tokens = 64;
    o.limits.max_blocks_per_req = REL_STRIDE;
    o.limits.max_seq_len = REL_STRIDE * REL_BS;
    o.limits.num_blocks = REL_BLOCKS;
    return o;
}

/* One step's data. Arrays are 64-byte aligned; tensors point into them. */
typedef struct rel_step {
    int32_t qsl[REL_REQS + 1], seq[REL_REQS], bt[REL_REQS * REL_STRIDE];
    int64_t slots[REL_TOKENS];
    int64_t qsl_shape[1], seq_shape[1], bt_shape[2], slots_shape[1];
    DLTensor t_qsl, t_seq, t_bt, t_slots;
    ah_batch batch;
    float *q, *k, *v, *out, *kc, *vc;
    int64_t q_shape[3], kv_shape[3], out_shape[3], cache_shape[4];
    DLTensor t_q, t_k, t_v, t_out, t_kc, t_vc;
    ah_forward_args args;
} rel_step;

#define REL_Q_ELEMS (REL_TOKENS * REL_HQ * REL_D)
#define REL_KV_ELEMS (REL_TOKENS * REL_HK * REL_D)
#define REL_CACHE_ELEMS (REL_BLOCKS * REL_BS * REL_HK * REL_D)

static inline DLTensor rel_tensor(void *data, int ndim, int64_t *shape, uint8_t code, uint8_t bits)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.shape = shape;
    t.dtype.code = code;
    t.dtype.bits = bits;
    t.dtype.lanes = 1;
    return t;
}

static inline float *rel_floats(size_t n)
{
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) abort();
    return p;
}

/* Deterministic values in [-1, 1) from a seed. */
static inline void rel_fill(float *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (float)(x % 2000u) / 1000.0f - 1.0f;
    }
}

/* Re-point every pointer of s at its own storage (after a struct copy). */
static inline void rel_step_wire(rel_step *s)
{
    s->qsl_shape[0] = REL_REQS + 1;
    s->seq_shape[0] = REL_REQS;
    s->bt_shape[0] = REL_REQS;
    s->bt_shape[1] = REL_STRIDE;
    s->slots_shape[0] = REL_TOKENS;
    s->t_qsl = rel_tensor(s->qsl, 1, s->qsl_shape, kDLInt, 32);
    s->t_seq = rel_tensor(s->seq, 1, s->seq_shape, kDLInt, 32);
    s->t_bt = rel_tensor(s->bt, 2, s->bt_shape, kDLInt, 32);
    s->t_slots = rel_tensor(s->slots, 1, s->slots_shape, kDLInt, 64);
    s->batch.query_start_loc = &s->t_qsl;
    s->batch.seq_lens = &s->t_seq;
    s->batch.block_table = &s->t_bt;
    s->batch.slot_mapping = &s->t_slots;
    s->batch.query_start_loc_host = s->qsl;
    s->batch.seq_lens_host = s->seq;
    s->batch.block_table_host = s->bt;
    s->batch.slot_mapping_host = s->slots;
    s->q_shape[0] = s->kv_shape[0] = s->out_shape[0] = REL_TOKENS;
    s->q_shape[1] = s->out_shape[1] = REL_HQ;
    s->kv_shape[1] = REL_HK;
    s->q_shape[2] = s->kv_shape[2] = s->out_shape[2] = REL_D;
    s->cache_shape[0] = REL_BLOCKS;
    s->cache_shape[1] = REL_BS;
    s->cache_shape[2] = REL_HK;
    s->cache_shape[3] = REL_D;
    s->t_q = rel_tensor(s->q, 3, s->q_shape, kDLFloat, 32);
    s->t_k = rel_tensor(s->k, 3, s->kv_shape, kDLFloat, 32);
    s->t_v = rel_tensor(s->v, 3, s->kv_shape, kDLFloat, 32);
    s->t_out = rel_tensor(s->out, 3, s->out_shape, kDLFloat, 32);
    s->t_kc = rel_tensor(s->kc, 4, s->cache_shape, kDLFloat, 32);
    s->t_vc = rel_tensor(s->vc, 4, s->cache_shape, kDLFloat, 32);
    memset(&s->args, 0, sizeof s->args);
    s->args.struct_size = sizeof s->args;
    s->args.q = &s->t_q;
    s->args.key = &s->t_k;
    s->args.value = &s->t_v;
    s->args.key_cache = &s->t_kc;
    s->args.value_cache = &s->t_vc;
    s->args.out = &s->t_out;
}

/* A valid step: request 0 has 20 tokens (3 new) in blocks 6, 2; request 1
 * has 22 tokens (1 new) in blocks 1, 4. The cache holds the older tokens'
 * K/V already (random), the new ones' slots hold random junk that
 * forward's K/V store overwrites. */
static inline void rel_step_init(rel_step *s, uint32_t seed)
{
    memset(s, 0, sizeof *s);
    static const int32_t qsl[] = {0, 3, 4}, seq[] = {20, 22};
    static const int32_t bt[] = {6, 2, 7, 1, 4, 0};
    memcpy(s->qsl, qsl, sizeof qsl);
    memcpy(s->seq, seq, sizeof seq);
    memcpy(s->bt, bt, sizeof bt);
    /* each new token's slot: its position's block from the table */
    for (int r = 0; r < REL_REQS; r++)
        for (int32_t t = qsl[r]; t < qsl[r + 1]; t++) {
            int32_t pos = seq[r] - (qsl[r + 1] - qsl[r]) + (t - qsl[r]);
            s->slots[t] = (int64_t)bt[r * REL_STRIDE + pos / REL_BS] * REL_BS + pos % REL_BS;
        }
    s->batch.struct_size = sizeof s->batch;
    s->batch.num_reqs = REL_REQS;
    s->batch.num_tokens = REL_TOKENS;
    s->batch.max_query_len = 3;
    s->batch.max_seq_len = 22;
    s->batch.num_blocks = REL_BLOCKS;
    s->batch.block_table_stride = REL_STRIDE;
    s->q = rel_floats(REL_Q_ELEMS);
    s->k = rel_floats(REL_KV_ELEMS);
    s->v = rel_floats(REL_KV_ELEMS);
    s->out = rel_floats(REL_Q_ELEMS);
    s->kc = rel_floats(REL_CACHE_ELEMS);
    s->vc = rel_floats(REL_CACHE_ELEMS);
    rel_fill(s->q, REL_Q_ELEMS, seed + 1);
    rel_fill(s->k, REL_KV_ELEMS, seed + 2);
    rel_fill(s->v, REL_KV_ELEMS, seed + 3);
    rel_fill(s->kc, REL_CACHE_ELEMS, seed + 4);
    rel_fill(s->vc, REL_CACHE_ELEMS, seed + 5);
    memset(s->out, 0, REL_Q_ELEMS * sizeof(float));
    rel_step_wire(s);
}

static inline void rel_step_free(rel_step *s)
{
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->out);
    free(s->kc);
    free(s->vc);
}

/* FNV-1a over bytes: a checksum to prove nothing was written. */
static inline uint64_t rel_hash(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The directory of one ABI test case, e.g. rel_case_dir("good"). */
static inline const char *rel_case_dir(const char *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", ATTNHOST_TEST_PLUGIN_DIR, c);
    return buf;
}

#endif
