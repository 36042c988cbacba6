/*
 * The operand orders of the FP8 MLA kernel with the keys as M
 * (decode_mla_fp8_sm90.cu), host and device, so fi_host_test checks on any
 * machine that the producer, both GEMMs and the stores agree. Both GEMMs'
 * K dimension is permuted so that a thread's operands are whole words of
 * one cache row (wgmma's register A: lane t holds columns 2t, 2t + 1 and
 * 8 + 2t, 8 + 2t + 1 of each k-step, for rows g and g + 8):
 *   - S^T = K Q^T, k-step j of 64-channel chunk c: lane t loads the
 *     16-byte unit mla8_s_unit(c, t) of its key rows, whose word j is its
 *     four columns: columns 2t + e and 8 + 2t + e are channels
 *     mla8_q_channel(c, j, 0, t) + e and mla8_q_channel(c, j, 1, t) + e,
 *     which is where Q's B operand holds them;
 *   - O^T = V^T P^T, a 16-key k-step: lane t's register pair k holds key
 *     mla8_v_key(t, k) (a word of 4 channels from each), so P's column of
 *     key 8h + r is 8h + mla8_p_col(r);
 *   - O^T's rows: lane (warp w, g) of 128-channel group grp holds channels
 *     mla8_o_channel(grp, w, g) + 2 bb + h (m64 block 2 grp + bb, row g +
 *     8h): four consecutive channels;
 *   - a raw row's 16-byte unit u sits at u ^ mla8_swizzle(row) (rows 2, 3
 *     of every 4 swap the 32-byte halves of each 64 bytes), which keeps
 *     both GEMMs' loads free of bank conflicts.
 */
#ifndef FI_MLA_FP8_ORDER_H
#define FI_MLA_FP8_ORDER_H

#include "decode_heads.h" /* FI_HD */

namespace fi {

FI_HD int mla8_s_unit(int c, int t) { return 4 * c + t; }
FI_HD int mla8_q_channel(int c, int j, int hf, int t) { return 64 * c + 16 * t + 4 * j + 2 * hf; }
FI_HD int mla8_v_key(int t, int k) { return t + 4 * k; }
FI_HD int mla8_p_col(int r) { return 2 * (r % 4) + r / 4; }
FI_HD int mla8_o_channel(int grp, int w, int g) { return 128 * grp + 32 * w + 4 * g; }
FI_HD unsigned mla8_swizzle(int row) { return (unsigned)((row >> 1) & 1) << 1; }

} // namespace fi

#endif
