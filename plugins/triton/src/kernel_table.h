/*
 * The table of ahead-of-time compiled Triton kernels. generate.py writes
 * artifacts/kernel_table.c (one tk_entry per specialization and target) and
 * artifacts/kernels.S (the binaries, embedded with .incbin); this header is
 * the hand-written contract between them and the launcher.
 */
#ifndef AH_TRITON_KERNEL_TABLE_H
#define AH_TRITON_KERNEL_TABLE_H

#include <stdint.h>

typedef struct tk_entry {
    const char *kernel; /* "unified_attention", "decode_split_stage1", ... */
    const char *arch;   /* "sm80", "sm90", "gfx942", ... */
    uint8_t q_dtype;    /* ah_dtype of queries/outputs */
    uint8_t kv_dtype;   /* ah_dtype of the cache (q_dtype where none) */
    uint16_t head_pad;  /* HEAD_PAD: serves (query/key) head sizes up to it */
    uint16_t v_pad;     /* value head sizes up to it: head_pad, but for the
                           ragged kernel's qk 192 (128 + 64) / v 128 */
    uint16_t block_m;   /* BLOCK_M (unified), BLOCK_H (stage 1), MAX_SPLITS (reduce) */
    uint16_t tile_n;    /* keys per tile, 0 where none */
    uint16_t num_warps;
    uint32_t shared;       /* dynamic shared memory, bytes */
    const char *signature; /* one letter a parameter: p pointer, i int32, f float32 */
    const char *symbol;    /* the function's name inside the image */
    const unsigned char *image, *image_end;
} tk_entry;

extern const tk_entry ah_tk_table[];
extern const unsigned ah_tk_table_len;
extern const char ah_tk_triton_version[];
extern const char ah_tk_sources_sha256[];

#endif
