/*
 * attnhost run: the main job. Bind every layer of a model (the built-in
 * demo model by default) and drive it the way its engine would, with
 * random data through the bound plugins, every layer of every pass checked
 * against the double-precision oracle:
 *
 *   encoder-only (BERT): one cacheless pass over the requests' sequences
 *     (ragged, packed by query_start_loc, bidirectional); no decode steps.
 *   encoder-decoder (Whisper): the encoder layers run once (cacheless);
 *     the cross layers' caches get each request's encoder K/V once
 *     (ah_binding_write_kv on an encoder-pass batch); then a prefill of the
 *     decoder prompts and decode steps run the self layers (paged, causal)
 *     and the cross layers (reading encoder_seq_lens[r] keys) in one plan
 *     per step.
 *   decoder-only: a prefill, then decode steps. With sliding windows one
 *     request's prompt is longer than the largest window, so the windows
 *     apply: its first tokens are already in the cache (earlier chunks of a
 *     chunked prefill), its last chunk is computed.
 *   ragged prefill forms (DeepSeek's MLA, ABI 2.3): where every form is
 *     bound, the prefill is a ragged step as vLLM's MLA prefill runs it:
 *     the new tokens' latent into the paged cache, the form over their own
 *     K/V, then over the cached context (half the prompt of every other
 *     request) in context steps merged by LSE; the decode steps stay
 *     absorbed. Where a form is unbound (no plugin serves it), run says so
 *     and prefills through the paged form.
 *
 * Non-attention layers (layer kinds) are skipped and listed. The memory a
 * run needs is computed before anything is allocated, and a run over the
 * budget is refused with the figure; the default size shrinks for models
 * whose oracle check would take long, and says so. On a terminal a
 * progress line shows the pass, the layer and the step.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "workload.h"

/* The oracle work (multiply-adds) a default-sized run aims below: about
 * half a minute of checking on two cores. */
#define WORK_BUDGET 6e9
/* The fraction of MemAvailable a run may use unless --max-memory says. */
#define MEM_FRACTION 0.5

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- progress on a terminal ------------------------------------------- */

static int g_tty;
static double g_last;
static int g_shown;

static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...)
{
    if (!g_tty) return;
    double t = now_ms();
    if (g_shown && t - g_last < 100) return;
    g_last = t;
    char line[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    g_shown = 1;
}

static void progress_clear(void)
{
    if (!g_shown) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    g_shown = 0;
}

/* ---- sizes --------------------------------------------------------------- */

static void fmt_bytes(uint64_t b, char *buf, size_t cap)
{
    if (b >= (1ull << 30)) snprintf(buf, cap, "%.1f GiB", b / 1073741824.0);
    else if (b >= (1ull << 20)) snprintf(buf, cap, "%.1f MiB", b / 1048576.0);
    else snprintf(buf, cap, "%.1f KiB", b / 1024.0);
}

/* "512M", "2G", "1.5GiB", "100000" (bytes). 0 on error. */
static uint64_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0)) return 0;
    while (*end == ' ') end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'M':
        mul = 1048576.0;
        end++;
        break;
    case 'G':
        mul = 1073741824.0;
        end++;
        break;
    case 'T':
        mul = 1099511627776.0;
        end++;
        break;
    default: break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (mul > 1 && (*end == 'b' || *end == 'B')) end++;
    else if (mul == 1 && (*end == 'b' || *end == 'B') && !end[1]) end++;
    if (*end) return 0;
    double b = v * mul;
    return b < 1 ? 1 : b > 1.8e19 ? UINT64_MAX : (uint64_t)b;
}

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

static int parse_u32(const char *opt, const char *v, uint32_t lo, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || *end || end == v || *v == '-' || n < lo || n > 1000000) {
        fprintf(stderr, "attnhost run: %s: '%s' is not a whole number in %u..1000000\n", opt, v,
                lo);
        return -1;
    }
    *out = (uint32_t)n;
    return 0;
}

/* --layers: "N" is the first N layers; "0-3,32,40-41" those layers. */
static int parse_layers(const char *v, uint32_t n, uint8_t *keep)
{
    if (!strchr(v, '-') && !strchr(v, ',')) {
        uint32_t k;
        if (parse_u32("--layers", v, 1, &k)) return -1;
        for (uint32_t l = 0; l < n; l++) keep[l] = l < k;
        return 0;
    }
    memset(keep, 0, n);
    const char *p = v;
    while (*p) {
        char *end;
        unsigned long a = strtoul(p, &end, 10), b = a;
        if (end == p) goto bad;
        p = end;
        if (*p == '-') {
            b = strtoul(++p, &end, 10);
            if (end == p) goto bad;
            p = end;
        }
        if (a > b || b >= n) {
            fprintf(stderr, "attnhost run: --layers: %lu-%lu is outside the model's layers 0-%u\n",
                    a, b, n - 1);
            return -1;
        }
        for (unsigned long l = a; l <= b; l++) keep[l] = 1;
        if (*p == ',') p++;
        else if (*p) goto bad;
    }
    return 0;
bad:
    fprintf(stderr,
            "attnhost run: --layers: '%s' is not a count (N) or a list of layers (0-3,32)\n", v);
    return -1;
}

/* Prompt lengths of a batch: fractions of the longest, 96/250, 160/250,
 * 33/250, 250/250, ... (the default is 96, 160, 33, 250). */
static uint32_t prompt_of(uint32_t longest, uint32_t r)
{
    static const uint32_t frac[4] = {96, 160, 33, 250};
    uint32_t n = (uint32_t)(((uint64_t)longest * frac[r % 4] + 125) / 250);
    return n ? n : 1;
}

/* The shape of a run. */
typedef struct run_size {
    uint32_t nreq, steps, longest, long_chunk;
    int ragged;       /* a ragged prefill: every other request has cached context */
    uint32_t window;  /* the largest sliding window of the run's self layers */
    uint32_t *enc;    /* encoder tokens per request */
    uint32_t *prompt; /* decoder prompt per request */
    uint32_t *chunk;  /* of it, computed in the prefill step (the rest is cached) */
} run_size;

static void size_fill(run_size *z)
{
    for (uint32_t r = 0; r < z->nreq; r++) {
        z->enc[r] = prompt_of(z->longest, r);
        z->prompt[r] = z->chunk[r] = prompt_of(z->longest, r);
        /* its first half cached: earlier chunks of a chunked prefill */
        if (z->ragged && r % 2) z->chunk[r] = z->prompt[r] - z->prompt[r] / 2;
    }
    if (z->window) { /* the last request goes past the largest window */
        uint32_t r = z->nreq - 1, len = z->window + 32;
        if (z->prompt[r] < len) {
            z->prompt[r] = len;
            z->chunk[r] = z->long_chunk < len ? z->long_chunk : len;
        }
    }
}

/* Sum over query positions p in [a, b) of min(p + 1, w) (w 0: no window). */
static double causal_keys(double a, double b, double w)
{
#define F(n) (w <= 0 || (n) <= w ? (n) * ((n) + 1) / 2 : w * (w + 1) / 2 + ((n)-w) * w)
    return F(b) - F(a);
#undef F
}

/* The oracle's multiply-adds for the run (the plugins do as many). */
static double work_of(const ah_selection *sel, const uint8_t *keep, const run_size *z)
{
    double total = 0;
    for (uint32_t l = 0; l < ah_selection_num_layers(sel); l++) {
        int role = wl_role(sel, l);
        if (role == WL_NONE || !keep[l]) continue;
        const ah_layer_spec *s = &ah_selection_decision(sel, l, AH_PHASE_PREFILL)->spec;
        /* a ragged prefill attends with the form's head sizes */
        const ah_layer_spec *p = z->ragged && ah_selection_ragged_decision(sel, l)
                                     ? &ah_selection_ragged_decision(sel, l)->spec
                                     : s;
        double per = (double)s->num_q_heads * (s->qk_head_size + s->v_head_size);
        double per_p = (double)p->num_q_heads * (p->qk_head_size + p->v_head_size);
        for (uint32_t r = 0; r < z->nreq; r++) {
            double e = z->enc[r], L = z->prompt[r], c = z->chunk[r], st = z->steps;
            if (role == WL_CACHELESS) total += per * e * e;
            else if (role == WL_CROSS) total += per * (c + st) * e;
            else if (ah_spec_causal(s))
                total += per_p * causal_keys(L - c, L, s->sliding_window) +
                         per * causal_keys(L, L + st, s->sliding_window);
            else total += per_p * c * L + per * st * (L + st);
        }
    }
    return total;
}

/* A copy of the model in which only the layers keep[] marks (and whose
 * kind is attention) stay attention; the others become "other" layers, so
 * the numbering stays the model's. KV-cache groups keep their order but
 * are numbered again over the kept cache layers, so none is empty. */
static ah_model *sub_model(const ah_model *m, const uint8_t *keep, ah_error *err)
{
    uint32_t n = ah_model_num_layers(m);
    ah_layer_spec *specs = calloc(n, sizeof *specs);
    ah_layer_kind *kinds = calloc(n, sizeof *kinds);
    ah_layer_spec *ragged = calloc(n, sizeof *ragged); /* ragged prefill forms */
    ah_model *out = NULL;
    if (!specs || !kinds || !ragged) {
        snprintf(err->msg, sizeof err->msg, "out of host memory");
    } else {
        uint32_t renum[AH_MAX_KV_GROUPS], used = 0;
        for (uint32_t g = 0; g < AH_MAX_KV_GROUPS; g++) renum[g] = UINT32_MAX;
        for (uint32_t l = 0; l < n; l++) {
            specs[l] = *ah_model_layer(m, l);
            kinds[l] = keep[l] ? ah_model_layer_kind(m, l) : AH_LAYER_OTHER;
            if (ah_model_layer_ragged(m, l)) ragged[l] = *ah_model_layer_ragged(m, l);
            uint32_t g = ah_spec_kv_group(&specs[l]);
            if (kinds[l] != AH_LAYER_ATTENTION || ah_spec_cacheless(&specs[l]) ||
                g >= AH_MAX_KV_GROUPS) {
                specs[l].kv_group = 0;
                continue;
            }
            if (renum[g] == UINT32_MAX) renum[g] = used++;
            specs[l].kv_group = renum[g];
        }
        ah_model_desc d = {sizeof d, ah_model_name(m), n, specs, kinds, ragged};
        if (ah_model_create(&d, &out, err) != AH_OK) out = NULL;
    }
    free(specs);
    free(kinds);
    free(ragged);
    return out;
}

/* One pass's part of the run: a sub-model, its selection and workload. */
typedef struct part {
    ah_model *m;
    ah_selection *sel;
    workload w;
    uint32_t max_seq, max_tokens;
    wl_mem mem;
} part;

static int part_select(cli_common *c, ah_host *h, const ah_model *m, const uint8_t *keep, part *p)
{
    ah_error err;
    p->m = sub_model(m, keep, &err);
    ah_status st = p->m ? (c->plugin ? ah_host_select_forced(h, p->m, c->plugin, &p->sel, &err)
                                     : ah_host_select(h, p->m, &p->sel, &err))
                        : AH_ERR_CONFIG;
    if (st != AH_OK) {
        fprintf(stderr, "attnhost run: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void part_free(part *p)
{
    wl_destroy(&p->w);
    ah_selection_destroy(p->sel);
    ah_model_destroy(p->m);
    memset(p, 0, sizeof *p);
}

/* Results of one pass over the layers. */
typedef struct tally {
    double worst;
    int ok;
    uint32_t bad_layer, n_bad;
} tally;

static void tally_add(tally *t, uint32_t l, double e, const ah_layer_spec *s)
{
    if (e > t->worst) t->worst = e;
    if (!(e <= wl_tolerance(s))) {
        if (!t->n_bad++) t->bad_layer = l;
        t->ok = 0;
    }
}

/* Every layer of the planned batch: fresh data, forward (timed), check. */
static int run_layers(workload *w, const char *pass, int store_kv, double *ms, tally *t)
{
    uint32_t n = 0, i = 0;
    for (uint32_t l = 0; l < w->num_layers; l++) n += w->layers[l].dev != NULL;
    *ms = 0;
    for (uint32_t l = 0; l < w->num_layers; l++) {
        wl_layer *L = &w->layers[l];
        if (!L->dev) continue;
        progress("attnhost run: %s, layer %u (%u of %u)", pass, l, ++i, n);
        if (wl_fill(w, l)) return -1;
        double t0 = now_ms();
        if (wl_forward(w, l, store_kv)) return -1;
        if (wl_sync(w)) return -1;
        *ms += now_ms() - t0;
        progress("attnhost run: %s, layer %u (%u of %u), checking", pass, l, i, n);
        double e;
        if (wl_check_layer(w, l, store_kv, &e)) return -1;
        tally_add(t, l, e, &L->spec);
    }
    return 0;
}

/* The KV-cache groups of a decoder workload, one line each. */
static void print_groups(const workload *w)
{
    printf("kv groups: %u, each with its own block table, slots and cache\n", w->n_groups);
    for (uint32_t g = 0; g < w->n_groups; g++) {
        const wl_group *G = &w->groups[g];
        uint32_t n = 0, first = UINT32_MAX;
        for (uint32_t l = 0; l < w->num_layers; l++)
            if (w->layers[l].dev && w->layers[l].role != WL_CACHELESS &&
                ah_spec_kv_group(&w->layers[l].spec) == g) {
                n++;
                if (first == UINT32_MAX) first = l;
            }
        printf("  group %u: %u layer%s (the first %u), block size %u, %u blocks", g, n,
               n == 1 ? "" : "s", first, G->block_size, G->num_blocks);
        if (G->window)
            printf(", window %u: %s", G->window,
                   G->release ? "releases the blocks it passes"
                              : "keeps every block (a plugin does not claim released_blocks)");
        printf("\n");
    }
}

static void print_pass(const char *what, const tally *t)
{
    if (!t->ok)
        printf("  %s: %u layer(s) outside tolerance, the first layer %u\n", what, t->n_bad,
               t->bad_layer);
}

int cmd_run(cli_common *c)
{
    uint32_t steps = 8, nreq = 4, longest = 250;
    int p_set = 0, s_set = 0; /* the user chose the prompts, the steps */
    uint64_t seed = 42, max_mem = 0;
    const char *layers = NULL;
    for (int i = 0; i < c->argc; i++) {
        const char *a = c->argv[i], *v = i + 1 < c->argc ? c->argv[i + 1] : NULL;
        int takes = !strcmp(a, "--steps") || !strcmp(a, "--seed") || !strcmp(a, "--batch") ||
                    !strcmp(a, "--prompt-len") || !strcmp(a, "--layers") ||
                    !strcmp(a, "--max-memory");
        if (takes && !v) {
            fprintf(stderr, "attnhost run: %s needs a value\n", a);
            return 2;
        }
        if (!takes) {
            fprintf(stderr,
                    "attnhost run: unknown option '%s' (options: --steps N, --batch N, "
                    "--prompt-len N, --layers N|LIST, --max-memory SIZE, --seed S)\n",
                    a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--steps")) {
            if (parse_u32(a, v, 0, &steps)) return 2;
            s_set = 1;
        } else if (!strcmp(a, "--batch")) {
            if (parse_u32(a, v, 1, &nreq)) return 2;
        } else if (!strcmp(a, "--prompt-len")) {
            if (parse_u32(a, v, 1, &longest)) return 2;
            p_set = 1;
        } else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--layers")) layers = v;
        else if (!(max_mem = parse_size(v))) {
            fprintf(stderr,
                    "attnhost run: --max-memory: '%s' is not a size (512M, 2G, 1.5GiB, bytes)\n",
                    v);
            return 2;
        }
    }
    g_tty = isatty(2);
    ah_host *h = cli_host(c);
    ah_model *m = h ? cli_model(c) : NULL;
    ah_selection *sel = NULL;
    ah_error err;
    int rc = 1;
    part enc = {0}, dec = {0};
    uint8_t *keep = NULL, *keep_enc = NULL, *keep_dec = NULL;
    uint32_t *req_max = NULL;
    run_size z = {0};
    if (!m) goto out;
    uint32_t n = ah_model_num_layers(m);
    keep = calloc(n ? n : 1, 1);
    if (!keep) goto out;
    if (layers && parse_layers(layers, n, keep)) {
        rc = 2;
        goto out;
    }
    /* --plugin forces that backend on every layer, as check and bench do */
    ah_status st = c->plugin ? ah_host_select_forced(h, m, c->plugin, &sel, &err)
                             : ah_host_select(h, m, &sel, &err);
    if (st != AH_OK) {
        fprintf(stderr, "attnhost run: %s\n", err.msg);
        goto out;
    }
    if (*ah_selection_warnings(sel))
        fprintf(stderr, "attnhost: warning: %s", ah_selection_warnings(sel));
    cli_print_binding(h, m, sel);

    keep_enc = calloc(n, 1);
    keep_dec = calloc(n, 1);
    z.enc = calloc(nreq, sizeof *z.enc);
    z.prompt = calloc(nreq, sizeof *z.prompt);
    z.chunk = calloc(nreq, sizeof *z.chunk);
    req_max = calloc(nreq, sizeof *req_max);
    if (!keep || !keep_enc || !keep_dec || !z.enc || !z.prompt || !z.chunk || !req_max) {
        fprintf(stderr, "attnhost run: out of host memory\n");
        goto out;
    }
    if (!layers) memset(keep, 1, n);

    /* what runs: the layers' roles; what is skipped and why */
    uint32_t n_run = 0, n_cl = 0, n_self = 0, n_cross = 0, n_other = 0, n_unsel = 0;
    char other[512] = "";
    size_t olen = 0;
    for (uint32_t l = 0; l < n; l++) {
        int role = wl_role(sel, l);
        if (role == WL_NONE) {
            n_other++;
            if (olen < sizeof other - 40)
                olen += (size_t)snprintf(other + olen, sizeof other - olen, "%s%u (%s)",
                                         olen ? ", " : "", l,
                                         ah_layer_kind_str(ah_selection_layer_kind(sel, l)));
            keep[l] = 0;
            continue;
        }
        if (!keep[l]) {
            n_unsel++;
            continue;
        }
        n_run++;
        if (role == WL_CACHELESS) keep_enc[l] = 1, n_cl++;
        else {
            keep_dec[l] = 1;
            if (role == WL_CROSS) n_cross++;
            else {
                n_self++;
                uint32_t wdw = ah_selection_decision(sel, l, AH_PHASE_PREFILL)->spec.sliding_window;
                if (wdw > z.window) z.window = wdw;
            }
        }
    }
    printf("\n");
    if (n_other)
        printf("skipped, not attention: %u layer%s: %s%s\n", n_other, n_other > 1 ? "s" : "", other,
               olen >= sizeof other - 40 ? ", ..." : "");
    if (n_unsel)
        printf("skipped, not in --layers %s: %u layer%s\n", layers, n_unsel,
               n_unsel > 1 ? "s" : "");
    if (!n_run) {
        fprintf(stderr, "attnhost run: no attention layer to run%s\n",
                layers ? " in --layers" : "");
        goto out;
    }
    int has_dec = n_self + n_cross > 0;
    if (!has_dec) steps = 0; /* an encoder-only model has no decode steps */

    /* ragged prefill forms (ABI 2.3): a ragged prefill where all are bound */
    int64_t r_unbound = -1;
    char r_why[320] = "";
    const uint32_t n_forms =
        has_dec ? wl_ragged_forms(sel, keep_dec, &r_unbound, r_why, sizeof r_why) : 0;
    const ah_layer_spec *rform = NULL; /* the first form, for the output line */
    int positional = 0; /* a form whose window or ALiBi needs the context in one step */
    for (uint32_t l = 0; l < n && n_forms; l++) {
        const ah_decision *d = ah_selection_ragged_decision(sel, l);
        if (!d || !keep_dec[l] || wl_role(sel, l) != WL_SELF) continue;
        if (!rform) rform = &d->spec;
        positional |= d->spec.sliding_window > 0 || d->spec.use_alibi;
    }
    z.ragged = n_forms && r_unbound < 0;

    /* the size: the default shrinks until the oracle's work fits its budget */
    z.nreq = nreq;
    z.steps = steps;
    z.longest = longest;
    z.long_chunk = 32;
    size_fill(&z);
    double work = work_of(sel, keep, &z);
    int shrunk = 0;
    /* what the user did not choose shrinks: prompts, the long prompt's
     * computed chunk, decode steps */
    while (work > WORK_BUDGET) {
        if (!p_set && z.longest > 16) z.longest = z.longest * 3 / 4 > 16 ? z.longest * 3 / 4 : 16;
        else if (!p_set && z.window && z.long_chunk > 4) z.long_chunk /= 2;
        else if (!s_set && z.steps > 2) z.steps /= 2;
        else break;
        shrunk = 1;
        size_fill(&z);
        work = work_of(sel, keep, &z);
    }
    steps = z.steps;

    /* the parts and the memory they need, before anything is allocated */
    uint32_t max_e = 0, sum_e = 0, max_l = 0, sum_c = 0;
    for (uint32_t r = 0; r < nreq; r++) {
        max_e = z.enc[r] > max_e ? z.enc[r] : max_e;
        sum_e += z.enc[r];
        max_l = z.prompt[r] + steps > max_l ? z.prompt[r] + steps : max_l;
        sum_c += z.chunk[r];
    }
    if (n_cl) {
        if (part_select(c, h, m, keep_enc, &enc)) goto out;
        enc.max_seq = max_e;
        enc.max_tokens = sum_e;
        wl_estimate(h, enc.sel, nreq, enc.max_seq, enc.max_tokens, NULL, 0, &enc.mem);
    }
    if (has_dec) {
        if (part_select(c, h, m, keep_dec, &dec)) goto out;
        dec.max_seq = n_cross && max_e > max_l ? max_e : max_l;
        dec.max_tokens = n_cross && sum_e > sum_c ? sum_e : sum_c;
        if (dec.max_tokens < nreq) dec.max_tokens = nreq;
        for (uint32_t r = 0; r < nreq; r++) {
            req_max[r] = z.prompt[r] + steps;
            if (n_cross && z.enc[r] > req_max[r]) req_max[r] = z.enc[r];
        }
        wl_estimate(h, dec.sel, nreq, dec.max_seq, dec.max_tokens, req_max, z.ragged, &dec.mem);
    }
    /* the encoder's part is gone before the decoder's is made */
    uint64_t need_enc = enc.mem.kv + enc.mem.act + enc.mem.oracle + enc.mem.other;
    uint64_t need_dec = dec.mem.kv + dec.mem.act + dec.mem.oracle + dec.mem.other;
    const wl_mem *big = need_enc > need_dec ? &enc.mem : &dec.mem;
    uint64_t need = need_enc > need_dec ? need_enc : need_dec;
    uint64_t avail = mem_available(), budget = max_mem ? max_mem : (uint64_t)(avail * MEM_FRACTION);
    char b_need[32], b_budget[32], b_kv[32], b_act[32], b_or[32];
    fmt_bytes(need, b_need, sizeof b_need);
    fmt_bytes(budget, b_budget, sizeof b_budget);
    fmt_bytes(big->kv, b_kv, sizeof b_kv);
    fmt_bytes(big->act, b_act, sizeof b_act);
    fmt_bytes(big->oracle + big->other, b_or, sizeof b_or);
    char shape[256];
    uint32_t min_e = UINT32_MAX, min_p = UINT32_MAX, max_p = 0;
    for (uint32_t r = 0; r < nreq; r++) {
        min_e = z.enc[r] < min_e ? z.enc[r] : min_e;
        if (z.window && r == nreq - 1 && z.prompt[r] > prompt_of(z.longest, r)) continue;
        min_p = z.prompt[r] < min_p ? z.prompt[r] : min_p;
        max_p = z.prompt[r] > max_p ? z.prompt[r] : max_p;
    }
    int sl = snprintf(shape, sizeof shape, "%u request%s", nreq, nreq > 1 ? "s" : "");
    if (n_cl || n_cross)
        sl += snprintf(shape + sl, sizeof shape - sl, ", %u..%u encoder tokens", min_e, max_e);
    if (has_dec) {
        if (max_p)
            sl += snprintf(shape + sl, sizeof shape - sl, ", prompts %u..%u tokens", min_p, max_p);
        uint32_t r = nreq - 1;
        if (z.window && z.prompt[r] > z.chunk[r])
            sl +=
                snprintf(shape + sl, sizeof shape - sl,
                         " (request %u: %u tokens, past the %u-token window; the first %u already "
                         "cached, %u computed)",
                         r, z.prompt[r], z.window, z.prompt[r] - z.chunk[r], z.chunk[r]);
        if (z.ragged && nreq > 1)
            sl += snprintf(shape + sl, sizeof shape - sl,
                           " (requests 1, 3, ...: the first half already cached, attended in "
                           "context steps)");
        snprintf(shape + sl, sizeof shape - sl, ", %u decode step%s", steps, steps == 1 ? "" : "s");
    }
    printf("size: %s\n", shape);
    printf("memory: %s (KV caches %s, activations %s, oracle and batch %s) of a %s budget (%s)\n",
           b_need, b_kv, b_act, b_or, b_budget, max_mem ? "--max-memory" : "half of MemAvailable");
    if (shrunk)
        printf("note: the default size was shrunk so that checking every layer against the oracle "
               "stays near half a minute (%.1e multiply-adds); --prompt-len N, --batch N and "
               "--steps N choose the size, --layers N runs a subset\n",
               work);
    else if (work > 4 * WORK_BUDGET)
        printf("note: checking every layer against the oracle takes %.1e multiply-adds: expect "
               "minutes; --layers N runs a subset\n",
               work);
    if (need > budget) {
        fprintf(
            stderr,
            "attnhost run: this run needs %s (KV caches %s, activations %s, oracle and batch %s), "
            "more than its memory budget of %s (%s); run a subset of the layers (--layers N), "
            "shorter prompts (--prompt-len N) or fewer requests (--batch N)%s\n",
            b_need, b_kv, b_act, b_or, b_budget,
            max_mem ? "--max-memory" : "half of MemAvailable; --max-memory sets it",
            z.window ? " (one prompt covers the model's largest sliding window, so the KV caches "
                       "grow with --layers)"
                     : "");
        goto out;
    }
    fflush(stdout);

    tally all = {0, 1, 0, 0};
    double ms;
    if (n_cl) {
        /* the encoder: one cacheless pass over every request's sequence */
        progress("attnhost run: binding the encoder layers");
        if (wl_create(&enc.w, h, enc.m, enc.sel, nreq, enc.max_seq, enc.max_tokens, seed) ||
            wl_plan(&enc.w, z.enc, 0)) {
            progress_clear();
            fprintf(stderr, "attnhost run: encoder: %s\n", enc.w.err);
            goto out;
        }
        tally t = {0, 1, 0, 0};
        if (run_layers(&enc.w, "encoder", 0, &ms, &t)) {
            progress_clear();
            fprintf(stderr, "attnhost run: encoder: %s\n", enc.w.err);
            goto out;
        }
        progress_clear();
        printf(
            "encoder: %u sequences, %u tokens, %u layers, %.2f ms, %.0f tokens/s, max rel error %.2e %s\n",
            nreq, sum_e, n_cl, ms, sum_e / (ms / 1e3), t.worst, t.ok ? "ok" : "FAIL");
        print_pass("encoder", &t);
        all.ok &= t.ok;
        all.worst = t.worst > all.worst ? t.worst : all.worst;
        fflush(stdout);
        wl_destroy(&enc.w);
    }
    if (has_dec) {
        workload *w = &dec.w;
        progress("attnhost run: binding the decoder layers");
        if (wl_create_sized(w, h, dec.m, dec.sel, nreq, dec.max_seq, dec.max_tokens, req_max,
                            z.ragged ? WL_RAGGED : 0, AH_MIXED_STEPS_CONFIG, seed + 1)) {
            progress_clear();
            fprintf(stderr, "attnhost run: %s\n", w->err);
            goto out;
        }
        if (w->n_groups > 1) print_groups(w);
        if (n_cross) {
            /* each request's encoder K/V, once, into every cross layer's cache */
            memcpy(w->enc_lens, z.enc, nreq * sizeof *z.enc);
            if (wl_plan(w, z.enc, 1)) {
                progress_clear();
                fprintf(stderr, "attnhost run: encoder K/V: %s\n", w->err);
                goto out;
            }
            double t0 = now_ms();
            uint32_t i = 0;
            for (uint32_t l = 0; l < w->num_layers; l++) {
                if (w->layers[l].role != WL_CROSS) continue;
                progress("attnhost run: encoder K/V into cross layer %u (%u of %u)", l, ++i,
                         n_cross);
                if (wl_fill(w, l) || wl_write_cross(w, l) || wl_sync(w)) {
                    progress_clear();
                    fprintf(stderr, "attnhost run: encoder K/V: %s\n", w->err);
                    goto out;
                }
            }
            progress_clear();
            printf(
                "cross K/V: %u encoder tokens written once into %u cross layers' caches, %.2f ms\n",
                sum_e, n_cross, now_ms() - t0);
        }
        uint32_t max_ctx = 0;
        for (uint32_t r = 0; r < nreq; r++) {
            w->context[r] = z.prompt[r] - z.chunk[r];
            if (w->context[r] > max_ctx) max_ctx = w->context[r];
        }
        /* the context in two steps, as a bounded workspace would cut it,
         * unless a window or ALiBi needs it in one (see ah_ragged_keys) */
        w->ragged_step = z.ragged;
        w->ctx_chunk = positional ? 0 : (max_ctx + 1) / 2;
        char form[200] = "";
        if (z.ragged)
            snprintf(form, sizeof form, ", ragged form (qk %u / v %u over packed K/V)",
                     rform->qk_head_size, rform->v_head_size);
        else if (n_forms) {
            const ah_layer_spec *pf =
                &ah_selection_decision(sel, (uint32_t)r_unbound, AH_PHASE_PREFILL)->spec;
            snprintf(form, sizeof form, ", %s form (paged)", pf->use_mla ? "absorbed" : "paged");
            printf("note: layer %lld's ragged prefill form is not bound: %s; the prefill runs "
                   "through the %s form\n",
                   (long long)r_unbound, r_why, pf->use_mla ? "absorbed" : "paged");
        }
        if (wl_plan(w, z.chunk, 0)) {
            progress_clear();
            fprintf(stderr, "attnhost run: prefill: %s\n", w->err);
            goto out;
        }
        tally t = {0, 1, 0, 0};
        double prefill_ms;
        if (run_layers(w, "prefill", 1, &prefill_ms, &t)) {
            progress_clear();
            fprintf(stderr, "attnhost run: prefill: %s\n", w->err);
            goto out;
        }
        wl_advance(w);
        w->ragged_step = 0; /* decode steps run the paged (absorbed) form */
        progress_clear();
        if (z.ragged && w->n_ctx) {
            size_t fl = strlen(form) - 1; /* before the closing parenthesis */
            snprintf(form + fl, sizeof form - fl, ", %u context step%s merged by LSE)", w->n_ctx,
                     w->n_ctx > 1 ? "s" : "");
        }
        printf("prefill: %u requests, %u tokens, %u layers%s, %.2f ms, %.0f tokens/s, max rel "
               "error %.2e %s\n",
               nreq, sum_c, n_self + n_cross, form, prefill_ms, sum_c / (prefill_ms / 1e3), t.worst,
               t.ok ? "ok" : "FAIL");
        print_pass("prefill", &t);
        all.ok &= t.ok;
        all.worst = t.worst > all.worst ? t.worst : all.worst;
        fflush(stdout);
        double *times = calloc(steps ? steps : 1, sizeof *times);
        uint32_t *ones = calloc(nreq, sizeof *ones);
        if (!times || !ones) {
            free(times);
            free(ones);
            fprintf(stderr, "attnhost run: out of host memory\n");
            goto out;
        }
        for (uint32_t r = 0; r < nreq; r++) ones[r] = 1;
        tally d = {0, 1, 0, 0};
        for (uint32_t s = 0; s < steps; s++) {
            char pass[48];
            snprintf(pass, sizeof pass, "decode step %u of %u", s + 1, steps);
            if (wl_plan(w, ones, 0) || run_layers(w, pass, 1, &times[s], &d)) {
                progress_clear();
                fprintf(stderr, "attnhost run: decode step %u: %s\n", s, w->err);
                free(times);
                free(ones);
                goto out;
            }
            wl_advance(w);
        }
        progress_clear();
        if (steps) {
            qsort(times, steps, sizeof *times, cmp_double);
            double med = times[steps / 2];
            printf(
                "decode:  %u steps x %u requests, median %.3f ms/step, %.0f tokens/s, max rel error %.2e %s\n",
                steps, nreq, med, nreq / (med / 1e3), d.worst, d.ok ? "ok" : "FAIL");
            print_pass("decode", &d);
        }
        all.ok &= d.ok;
        all.worst = d.worst > all.worst ? d.worst : all.worst;
        free(times);
        free(ones);
    }
    if (has_dec && dec.w.n_groups > 1)
        for (uint32_t g = 0; g < dec.w.n_groups; g++)
            if (dec.w.groups[g].release)
                printf("kv group %u: %llu block-table entries released as the window passed them\n",
                       g, (unsigned long long)dec.w.groups[g].released);
    printf("%s: every layer's output %s the double-precision oracle (%u layer%s checked)\n",
           all.ok ? "PASS" : "FAIL", all.ok ? "matches" : "does NOT match", n_run,
           n_run > 1 ? "s" : "");
    rc = all.ok ? 0 : 1;
out:
    progress_clear();
    part_free(&enc);
    part_free(&dec);
    free(keep);
    free(keep_enc);
    free(keep_dec);
    free(z.enc);
    free(z.prompt);
    free(z.chunk);
    free(req_max);
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
    return rc;
}
