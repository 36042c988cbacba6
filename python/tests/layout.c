/* Sizes and field offsets of the structures the Python package mirrors,
 * as JSON: test_layout.py compares them with its ctypes declarations; and,
 * under "ah_dtype", the element types' names in enum order, which
 * attnhost.model.DTYPES indexes by value.
 * Generated once from attnhost/_ffi.py; a field added to a header but not
 * here or there fails the comparison of sizes. */
#include <stddef.h>
#include <stdio.h>

#include <attnhost/attnhost.h>
#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

#define F(T, f) printf("%s\"%s\": %zu", first++ ? ", " : "", #f, offsetof(T, f))
#define S(T, ...) do { int first = 0; printf("%s\"%s\": {\"size\": %zu, \"fields\": {", n++ ? ", " : "", #T, sizeof(T)); __VA_ARGS__; printf("}}"); } while (0)

int main(void)
{
    int n = 0;
    printf("{");
    S(DLDevice, F(DLDevice, device_type); F(DLDevice, device_id));
    S(DLDataType, F(DLDataType, code); F(DLDataType, bits); F(DLDataType, lanes));
    S(DLTensor, F(DLTensor, data); F(DLTensor, device); F(DLTensor, ndim); F(DLTensor, dtype); F(DLTensor, shape); F(DLTensor, strides); F(DLTensor, byte_offset));
    S(DLManagedTensor, F(DLManagedTensor, dl_tensor); F(DLManagedTensor, manager_ctx); F(DLManagedTensor, deleter));
    S(ah_int_set, F(ah_int_set, struct_size); F(ah_int_set, n_values); F(ah_int_set, values); F(ah_int_set, range_min); F(ah_int_set, range_max); F(ah_int_set, range_step));
    S(ah_hw_facts, F(ah_hw_facts, struct_size); F(ah_hw_facts, cpu_isa); F(ah_hw_facts, cpu_isa_cpuid); F(ah_hw_facts, cpu_logical_cores); F(ah_hw_facts, memory_bytes); F(ah_hw_facts, cpu_vendor); F(ah_hw_facts, cpu_model); F(ah_hw_facts, amx_note));
    S(ah_probe_info, F(ah_probe_info, struct_size); F(ah_probe_info, usable); F(ah_probe_info, reason); F(ah_probe_info, device_name); F(ah_probe_info, arch); F(ah_probe_info, compute_capability); F(ah_probe_info, device_count); F(ah_probe_info, multiprocessors); F(ah_probe_info, memory_bytes); F(ah_probe_info, driver_version));
    S(ah_layer_spec, F(ah_layer_spec, struct_size); F(ah_layer_spec, attn_type); F(ah_layer_spec, num_q_heads); F(ah_layer_spec, num_kv_heads); F(ah_layer_spec, qk_head_size); F(ah_layer_spec, v_head_size); F(ah_layer_spec, q_dtype); F(ah_layer_spec, kv_dtype); F(ah_layer_spec, block_size); F(ah_layer_spec, kv_layout); F(ah_layer_spec, sliding_window); F(ah_layer_spec, softcap); F(ah_layer_spec, scale); F(ah_layer_spec, use_mla); F(ah_layer_spec, use_sinks); F(ah_layer_spec, use_alibi); F(ah_layer_spec, fp8_attention); F(ah_layer_spec, causal); F(ah_layer_spec, kv_group); F(ah_layer_spec, ragged_kv); F(ah_layer_spec, kv_scales); F(ah_layer_spec, use_q_scale));
    S(ah_config_key, F(ah_config_key, name); F(ah_config_key, type); F(ah_config_key, default_value); F(ah_config_key, int_min); F(ah_config_key, int_max); F(ah_config_key, float_min); F(ah_config_key, float_max); F(ah_config_key, choices); F(ah_config_key, doc));
    S(ah_caps, F(ah_caps, struct_size); F(ah_caps, q_dtypes); F(ah_caps, kv_dtypes); F(ah_caps, qk_head_sizes); F(ah_caps, v_head_sizes); F(ah_caps, block_sizes); F(ah_caps, preferred_block_size); F(ah_caps, features); F(ah_caps, attn_types); F(ah_caps, kv_layouts); F(ah_caps, preferred_kv_layout); F(ah_caps, min_compute_capability); F(ah_caps, max_compute_capability); F(ah_caps, gfx_targets); F(ah_caps, n_gfx_targets); F(ah_caps, cpu_isa_required); F(ah_caps, graph_level); F(ah_caps, graph_seq_len_fill); F(ah_caps, forward_writes_kv); F(ah_caps, caller_output); F(ah_caps, max_head_groups); F(ah_caps, config_keys); F(ah_caps, n_config_keys); F(ah_caps, check_combination); F(ah_caps, prefill_rank); F(ah_caps, decode_rank); F(ah_caps, mixed_batch); F(ah_caps, decode_query_len_max));
    S(ah_batch, F(ah_batch, struct_size); F(ah_batch, num_reqs); F(ah_batch, num_tokens); F(ah_batch, max_query_len); F(ah_batch, max_seq_len); F(ah_batch, num_blocks); F(ah_batch, query_start_loc); F(ah_batch, seq_lens); F(ah_batch, block_table); F(ah_batch, slot_mapping); F(ah_batch, query_start_loc_host); F(ah_batch, seq_lens_host); F(ah_batch, block_table_host); F(ah_batch, slot_mapping_host); F(ah_batch, block_table_stride); F(ah_batch, common_prefix_len); F(ah_batch, encoder_seq_lens); F(ah_batch, encoder_seq_lens_host); F(ah_batch, custom_mask); F(ah_batch, mask_indptr); F(ah_batch, custom_mask_host); F(ah_batch, mask_indptr_host); F(ah_batch, custom_mask_len); F(ah_batch, num_kv_groups); F(ah_batch, kv_groups); F(ah_batch, cp_local_seq_lens); F(ah_batch, cp_local_seq_lens_host); F(ah_batch, cu_seqlens_k); F(ah_batch, cu_seqlens_k_host); F(ah_batch, num_k_tokens); F(ah_batch, ragged_keys));
    S(ah_kv_group, F(ah_kv_group, struct_size); F(ah_kv_group, num_blocks); F(ah_kv_group, block_table); F(ah_kv_group, slot_mapping); F(ah_kv_group, block_table_host); F(ah_kv_group, slot_mapping_host); F(ah_kv_group, block_table_stride));
    S(ah_limits, F(ah_limits, struct_size); F(ah_limits, max_num_reqs); F(ah_limits, max_num_tokens); F(ah_limits, max_blocks_per_req); F(ah_limits, max_seq_len); F(ah_limits, num_blocks));
    S(ah_forward_args, F(ah_forward_args, struct_size); F(ah_forward_args, q); F(ah_forward_args, key); F(ah_forward_args, value); F(ah_forward_args, key_cache); F(ah_forward_args, value_cache); F(ah_forward_args, out); F(ah_forward_args, lse); F(ah_forward_args, sinks); F(ah_forward_args, alibi_slopes); F(ah_forward_args, k_scale); F(ah_forward_args, v_scale); F(ah_forward_args, stream); F(ah_forward_args, k_scale_tensor); F(ah_forward_args, v_scale_tensor); F(ah_forward_args, q_scale); F(ah_forward_args, q_scale_tensor));
    S(ah_error, F(ah_error, msg));
    S(ah_host_options, F(ah_host_options, struct_size); F(ah_host_options, config_path); F(ah_host_options, config_text); F(ah_host_options, plugin_dirs); F(ah_host_options, n_plugin_dirs); F(ah_host_options, no_default_dirs); F(ah_host_options, scan_mode); F(ah_host_options, cache_path); F(ah_host_options, ignore_require_checked));
    S(ah_plugin_info, F(ah_plugin_info, struct_size); F(ah_plugin_info, name); F(ah_plugin_info, path); F(ah_plugin_info, version); F(ah_plugin_info, vendor); F(ah_plugin_info, license); F(ah_plugin_info, description); F(ah_plugin_info, device_kind); F(ah_plugin_info, state); F(ah_plugin_info, reason); F(ah_plugin_info, caps); F(ah_plugin_info, probe); F(ah_plugin_info, has_check_combination); F(ah_plugin_info, from_cache); F(ah_plugin_info, scan_ms));
    S(ah_reason, F(ah_reason, code); F(ah_reason, field); F(ah_reason, value); F(ah_reason, supported));
    S(ah_candidate, F(ah_candidate, plugin); F(ah_candidate, n_reasons); F(ah_candidate, reasons); F(ah_candidate, chosen));
    S(ah_model_desc, F(ah_model_desc, struct_size); F(ah_model_desc, name); F(ah_model_desc, num_layers); F(ah_model_desc, layers); F(ah_model_desc, kinds); F(ah_model_desc, ragged_forms));
    S(ah_hf_import_options, F(ah_hf_import_options, struct_size); F(ah_hf_import_options, dtype); F(ah_hf_import_options, kv_dtype); F(ah_hf_import_options, block_size); F(ah_hf_import_options, tensor_parallel); F(ah_hf_import_options, name); F(ah_hf_import_options, chunked_virtual_batches); F(ah_hf_import_options, reserved); F(ah_hf_import_options, kv_groups));
    S(ah_decision, F(ah_decision, plugin); F(ah_decision, list_source); F(ah_decision, n_candidates); F(ah_decision, candidates); F(ah_decision, spec); F(ah_decision, fallback); F(ah_decision, kernel_block_size));
    S(ah_cp_options, F(ah_cp_options, struct_size); F(ah_cp_options, world_size); F(ah_cp_options, rank); F(ah_cp_options, interleave); F(ah_cp_options, nccl_comm); F(ah_cp_options, local_group); F(ah_cp_options, nccl_library); F(ah_cp_options, timeout_ms));
    S(ah_binding_options, F(ah_binding_options, struct_size); F(ah_binding_options, limits); F(ah_binding_options, no_validation); F(ah_binding_options, device_index); F(ah_binding_options, cp); F(ah_binding_options, mixed_steps));
    S(ah_kv_cache_desc, F(ah_kv_cache_desc, struct_size); F(ah_kv_cache_desc, ndim); F(ah_kv_cache_desc, shape); F(ah_kv_cache_desc, strides); F(ah_kv_cache_desc, kv_dtype); F(ah_kv_cache_desc, dl_dtype); F(ah_kv_cache_desc, alloc_ndim); F(ah_kv_cache_desc, alloc_shape); F(ah_kv_cache_desc, offset); F(ah_kv_cache_desc, in_key_alloc));
    S(ah_ref_inputs, F(ah_ref_inputs, struct_size); F(ah_ref_inputs, spec); F(ah_ref_inputs, batch); F(ah_ref_inputs, q); F(ah_ref_inputs, key_cache); F(ah_ref_inputs, value_cache); F(ah_ref_inputs, sinks); F(ah_ref_inputs, alibi_slopes); F(ah_ref_inputs, k_scale); F(ah_ref_inputs, v_scale); F(ah_ref_inputs, key); F(ah_ref_inputs, value); F(ah_ref_inputs, k_scales); F(ah_ref_inputs, v_scales));
    printf(", \"ah_dtype\": [");
    for (int t = 0; t < AH_DTYPE_COUNT; t++) printf("%s\"%s\"", t ? ", " : "", ah_dtype_name((ah_dtype)t));
    printf("]}\n");
    return 0;
}
