/*
 * The plan's page listing (plan_kernels.cu) against the block table it was
 * given: in table order without sorting; with sorting, every decode
 * request's full pages in address order run by run (FI_SORT_RUN pages each),
 * the same pages as the table's run, and the last page in place, while a
 * request of several query tokens keeps table order. Requests of 0-3 pages,
 * of exactly one and of several runs, page numbers up to 2^31 - 1, in an
 * all-decode batch and in a mixed one.
 *
 *   fi_plan_test      exit 0 all pass, 1 a failure, 77 no GPU
 */
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "fi_params.h"

static int g_fail;

#define CK(x) \
    do { \
        cudaError_t e_ = (x); \
        if (e_ != cudaSuccess) { \
            fprintf(stderr, "fi_plan_test: %s: %s\n", #x, cudaGetErrorString(e_)); \
            exit(1); \
        } \
    } while (0)

static int32_t *upload(const std::vector<int32_t> &v)
{
    int32_t *d = nullptr;
    CK(cudaMalloc(&d, v.size() * 4 + 4));
    CK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    return d;
}

/* Plan one batch (qlens[r] query tokens for request r) with page size 16
 * and GQA group 4, and return kv_indptr and kv_indices. */
static void plan(const std::vector<int32_t> &qlens, const std::vector<int32_t> &lens,
                 const std::vector<int32_t> &table, int cols, int sort,
                 std::vector<int32_t> *indptr, std::vector<int32_t> *indices)
{
    const int R = (int)lens.size();
    std::vector<int32_t> qsl(R + 1, 0);
    for (int r = 0; r < R; r++) qsl[r + 1] = qsl[r] + qlens[r];
    const int T = qsl[R];
    int32_t *d_qsl = upload(qsl), *d_lens = upload(lens), *d_table = upload(table);
    const int npages = (int)table.size(), tiles = 4 * T + R + 1;
    std::vector<int32_t *> bufs;
    auto alloc = [&](int n) {
        int32_t *d = nullptr;
        CK(cudaMalloc(&d, (size_t)n * 4 + 4));
        CK(cudaMemset(d, 0xff, (size_t)n * 4 + 4));
        bufs.push_back(d);
        return d;
    };
    fi::plan_bufs pb;
    pb.qo_indptr = alloc(R + 1), pb.kv_indptr = alloc(R + 1), pb.kv_indices = alloc(npages);
    pb.kv_last_page_len = alloc(R), pb.seq_lens = alloc(R), pb.token_req = alloc(T),
    pb.token_pos = alloc(T);
    pb.tile_indptr = alloc(R + 1), pb.tile_req = alloc(tiles), pb.tile_row0 = alloc(tiles),
    pb.num_tiles = alloc(1);
    CK(fi::launch_plan(d_qsl, d_lens, d_table, cols, R, T, 4, 4, cols, sort, pb, 0));
    CK(cudaDeviceSynchronize());
    indptr->resize(R + 1);
    CK(cudaMemcpy(indptr->data(), pb.kv_indptr, (R + 1) * 4, cudaMemcpyDeviceToHost));
    indices->resize((*indptr)[R]);
    CK(cudaMemcpy(indices->data(), pb.kv_indices, indices->size() * 4, cudaMemcpyDeviceToHost));
    for (int32_t *d : bufs) cudaFree(d);
    cudaFree(d_qsl), cudaFree(d_lens), cudaFree(d_table);
}

static void check(const char *what, bool ok)
{
    printf("%s %s\n", ok ? "pass" : "FAIL", what);
    g_fail += !ok;
}

int main()
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("fi_plan_test: no CUDA device, skipped\n");
        return 77;
    }
    /* Pages per request: none, one, two (nothing to sort), three, one run
     * plus the last page, a run and a bit, several runs with a partial one. */
    const std::vector<int> pages = {
        0, 1, 2, 3, 100, FI_SORT_RUN + 1, FI_SORT_RUN + 2, 2 * FI_SORT_RUN + 500};
    const int R = (int)pages.size(), cols = *std::max_element(pages.begin(), pages.end());
    std::mt19937 rng(7);
    for (int c = 0; c < 4; c++) {
        /* A small pool, then page numbers using all 31 bits; all-decode, then
         * mixed: every other request extends by r + 2 tokens (at most its
         * length). */
        const int top = c % 2 ? 0x7fffffff : 1 << 17, mixed = c / 2;
        std::vector<int32_t> qlens(R), lens(R), table((size_t)R * cols, -1);
        std::uniform_int_distribution<int32_t> page(0, top);
        for (int r = 0; r < R; r++) {
            lens[r] = pages[r] ? (pages[r] - 1) * 16 + 1 + r % 16 : 0; /* a partial last page */
            for (int i = 0; i < pages[r]; i++) table[(size_t)r * cols + i] = page(rng);
            qlens[r] = mixed && r % 2 ? std::min(r + 2, lens[r]) : 1;
        }
        std::vector<int32_t> ip0, idx0, ip1, idx1;
        plan(qlens, lens, table, cols, 0, &ip0, &idx0);
        plan(qlens, lens, table, cols, 1, &ip1, &idx1);
        char what[160];
        for (int r = 0; r < R; r++) {
            const int32_t *row = &table[(size_t)r * cols];
            const int np = pages[r];
            const char *kind = qlens[r] == 1 ? "decode" : "extend";
            snprintf(what, sizeof what, "%s, %d pages up to %d: kv_indptr", kind, np, top);
            check(what, ip0[r + 1] - ip0[r] == np && ip1[r] == ip0[r] && ip1[r + 1] == ip0[r + 1]);
            if (ip0[r + 1] - ip0[r] != np) continue;
            const int32_t *got0 = &idx0[ip0[r]], *got1 = &idx1[ip1[r]];
            snprintf(what, sizeof what, "%s, %d pages up to %d: table order without sorting", kind,
                     np, top);
            check(what, std::equal(row, row + np, got0));
            bool ok = np == 0 || got1[np - 1] == row[np - 1];
            const int full = qlens[r] == 1 && np > 2 ? np - 1 : 0;
            if (!full) ok = ok && std::equal(row, row + np, got1);
            for (int r0 = 0; r0 < full; r0 += FI_SORT_RUN) {
                const int e = std::min(full, r0 + FI_SORT_RUN);
                std::vector<int32_t> want(row + r0, row + e);
                std::sort(want.begin(), want.end());
                ok = ok && std::equal(want.begin(), want.end(), got1 + r0);
            }
            snprintf(what, sizeof what, "%s, %d pages up to %d: %s", kind, np, top,
                     full ? "sorted run by run, last page last" : "table order with sorting");
            check(what, ok);
        }
    }
    printf("fi_plan_test: %s\n", g_fail ? "FAILED" : "all passed");
    return g_fail ? 1 : 0;
}
