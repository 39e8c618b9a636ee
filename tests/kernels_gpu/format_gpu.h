/* Tests of the GPU format builder (format_gpu.c), run by test_kernels_gpu (main.c). */
#ifndef STOF_TESTS_KERNELS_GPU_FORMAT_GPU_H
#define STOF_TESTS_KERNELS_GPU_FORMAT_GPU_H

int format_gpu_setup(void **state);
int format_gpu_teardown(void **state);

void gpu_format_matches_cpu_on_suite_masks(void **state);
void gpu_format_matches_cpu_on_other_kinds_and_combinations(void **state);
void gpu_format_matches_cpu_with_unequal_lengths(void **state);
void gpu_format_matches_cpu_on_per_batch_documents(void **state);
void gpu_format_matches_cpu_at_small_sizes(void **state);
void gpu_format_build_times_against_cpu(void **state);
void gpu_format_public_entry_cache_and_refusals(void **state);
void engine_builds_long_sequence_formats_on_the_gpu(void **state);
void engine_drops_the_selectors_format_for_another_tile(void **state);
void engine_drops_the_unshifted_format(void **state);

#endif
