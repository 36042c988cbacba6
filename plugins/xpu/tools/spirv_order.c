/*
 * spirv_order IN OUT: writes the SPIR-V module IN to OUT with each
 * function's blocks in reverse post-order from its entry block.
 *
 * SPIR-V wants a function's blocks in an order where a block comes after
 * every block that dominates it. llvm-spirv-14 keeps LLVM's block order,
 * which after -O2 (rotated loops) can place a loop's exit block before the
 * loop, so spirv-val rejects the module. Reverse post-order satisfies the
 * rule; blocks unreachable from the entry go last, in their first order.
 * SPIR-V also wants a function's OpVariables first in its entry block,
 * where LLVM may leave a bitcast between two allocas: they move up.
 * A build-time tool: run on every module before spirv-val and embedding.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OP_FUNCTION_END = 56,
    OP_VARIABLE = 59,
    OP_LABEL = 248,
    OP_BRANCH = 249,
    OP_BRANCH_CONDITIONAL = 250,
    OP_SWITCH = 251
};

typedef struct block {
    size_t start, end; /* words [start, end) from its OpLabel */
    uint32_t id;
    int done;
} block;

static int fail(const char *what, const char *file)
{
    fprintf(stderr, "spirv_order: %s: %s\n", file, what);
    return 1;
}

static int find_block(const block *b, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (b[i].id == id) return (int)i;
    return -1;
}

/* The successors of block b: its terminator's label operands. */
static size_t successors(const uint32_t *w, const block *b, uint32_t *out)
{
    size_t at = b->start, last = at;
    while (at < b->end) last = at, at += w[at] >> 16;
    const uint32_t op = w[last] & 0xffff, wc = w[last] >> 16;
    size_t n = 0;
    if (op == OP_BRANCH) out[n++] = w[last + 1];
    if (op == OP_BRANCH_CONDITIONAL) out[n++] = w[last + 2], out[n++] = w[last + 3];
    if (op == OP_SWITCH) {
        /* default, then (literal, label) pairs: literals of one word for a
         * 32-bit selector, two for a 64-bit one */
        const uint32_t pair = (wc - 3) % 2 == 0 ? 2 : 3;
        out[n++] = w[last + 2];
        for (uint32_t i = 3 + pair - 1; i < wc && n < 64; i += pair) out[n++] = w[last + i];
    }
    return n;
}

/* Post-order of the blocks reachable from block 0, by an explicit stack. */
static size_t post_order(const uint32_t *w, block *b, size_t nb, int *order)
{
    int *stack = malloc(nb * sizeof *stack), *next = calloc(nb, sizeof *next);
    uint32_t succ[64];
    size_t sp = 0, n = 0;
    stack[sp++] = 0;
    b[0].done = 1;
    while (sp) {
        const int top = stack[sp - 1];
        const size_t ns = successors(w, &b[top], succ);
        int pushed = 0;
        while ((size_t)next[top] < ns && !pushed) {
            const int s = find_block(b, nb, succ[next[top]++]);
            if (s >= 0 && !b[s].done) b[s].done = 1, stack[sp++] = s, pushed = 1;
        }
        if (!pushed) order[n++] = stack[--sp];
    }
    free(stack);
    free(next);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 3) return fail("usage: spirv_order IN OUT", "-");
    FILE *f = fopen(argv[1], "rb");
    if (!f) return fail("cannot open", argv[1]);
    fseek(f, 0, SEEK_END);
    const long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    const size_t nw = bytes > 0 ? (size_t)bytes / 4 : 0;
    uint32_t *w = malloc(nw * 4 + 4), *o = malloc(nw * 4 + 4);
    if (nw < 5 || fread(w, 4, nw, f) != nw || w[0] != 0x07230203u) {
        fclose(f);
        return fail("not a SPIR-V module", argv[1]);
    }
    fclose(f);
    block *b = malloc(nw * sizeof *b);
    int *order = malloc(nw * sizeof *order);
    size_t at = 5, out = 5;
    memcpy(o, w, 5 * 4);
    while (at < nw) {
        const uint32_t wc = w[at] >> 16, op = w[at] & 0xffff;
        if (!wc || at + wc > nw) return fail("truncated instruction", argv[1]);
        if (op != OP_LABEL) {
            memcpy(o + out, w + at, wc * 4);
            out += wc, at += wc;
            continue;
        }
        /* a function's blocks: from this label to OpFunctionEnd */
        size_t nb = 0;
        while (at < nw && (w[at] & 0xffff) != OP_FUNCTION_END) {
            if ((w[at] & 0xffff) == OP_LABEL) {
                if (nb) b[nb - 1].end = at;
                b[nb++] = (block){at, 0, w[at + 1], 0};
            }
            at += w[at] >> 16 ? w[at] >> 16 : 1;
        }
        b[nb - 1].end = at;
        const size_t nr = post_order(w, b, nb, order);
        /* the entry block: its label, its variables, the rest */
        memcpy(o + out, w + b[0].start, 2 * 4);
        out += 2;
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = b[0].start + 2; i < b[0].end; i += w[i] >> 16)
                if (((w[i] & 0xffff) == OP_VARIABLE) == !pass) {
                    memcpy(o + out, w + i, (w[i] >> 16) * 4);
                    out += w[i] >> 16;
                }
        for (size_t i = nr - 1; i-- > 0;) {
            const block *k = &b[order[i]];
            memcpy(o + out, w + k->start, (k->end - k->start) * 4);
            out += k->end - k->start;
        }
        for (size_t i = 0; i < nb; i++)
            if (!b[i].done) {
                memcpy(o + out, w + b[i].start, (b[i].end - b[i].start) * 4);
                out += b[i].end - b[i].start;
            }
    }
    f = fopen(argv[2], "wb");
    if (!f || fwrite(o, 4, out, f) != out || fclose(f) != 0) return fail("cannot write", argv[2]);
    free(w);
    free(o);
    free(b);
    free(order);
    return 0;
}
