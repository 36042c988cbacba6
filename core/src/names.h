/*
 * Text for the capability model's values and sets, shared by selection
 * reasons and the CLI so both say the same thing the same way.
 */
#ifndef AH_NAMES_H
#define AH_NAMES_H

#include <stddef.h>

#include <attnhost/plugin.h>

/* "{64, 128, 256}", "16..256 step 16", "{512} or 16..4096 step 16", "any". */
void ah__format_int_set(const ah_int_set *s, char *buf, size_t cap);
/* "{bf16, fp16}" from an AH_BIT(ah_dtype) mask. */
void ah__format_dtype_mask(uint32_t mask, char *buf, size_t cap);
/* "{decoder, encoder}" from an AH_BIT(ah_attn_type) mask. */
void ah__format_attn_types(uint32_t mask, char *buf, size_t cap);
/* "{nhd, hnd}" from an AH_BIT(ah_kv_layout) mask. */
void ah__format_layouts(uint32_t mask, char *buf, size_t cap);
/* "mla, sinks, sliding_window" from an ah_feature mask; "none" when empty. */
void ah__format_features(uint32_t mask, char *buf, size_t cap);
/* "avx512f, amx_bf16" from an ah_cpu_isa mask; "none" when empty. */
void ah__format_isa(uint32_t mask, char *buf, size_t cap);
/* The name of one feature bit. */
const char *ah__feature_name(uint32_t bit);

#endif
