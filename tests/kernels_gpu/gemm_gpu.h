/* Tests of the vendor GEMM (gemm_gpu.c), run by test_kernels_gpu (main.c). */
#ifndef STOF_TESTS_KERNELS_GPU_GEMM_GPU_H
#define STOF_TESTS_KERNELS_GPU_GEMM_GPU_H

int gemm_gpu_setup(void **state);
int gemm_gpu_teardown(void **state);

void gemm_f16_every_epilogue_matches_cpu(void **state);
void gemm_bf16_every_epilogue_matches_cpu(void **state);
void gemm_f32_every_epilogue_matches_cpu(void **state);
void gemm_batched_transposed_in_place_matches_cpu(void **state);
void gemm_plan_replays_in_a_cuda_graph(void **state);
void gemm_plan_and_run_errors(void **state);
void gemm_f16_large_throughput(void **state);

#endif
