#!/bin/bash
# session 25 call 4 (carrying build-attn/wgmma_shapes, built here with
# nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o build-attn/wgmma_shapes bench/wgmma_shapes.cu):
# the MMA-only rate of the usual and the transposed attention step.
mkdir -p $OUT && nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader && timeout 120 build-attn/wgmma_shapes 4096 2>&1 | tee $OUT/wgmma_shapes.txt && timeout 60 build-attn/wgmma_shapes 16384 2>&1 | tail -4 | tee -a $OUT/wgmma_shapes.txt
# call 5 (after the online softmax was added to bench/wgmma_shapes.cu, "+softmax" lines):
#   build-attn/wgmma_shapes 4096 | tee $OUT/wgmma_shapes_soft.txt
# calls 6 and 7 (with "+boundmax", then "+lazymax" added): the same command, into
#   $OUT/wgmma_shapes_bound.txt and $OUT/wgmma_shapes_lazy.txt
# call 8 (with the gather of 8 KB blocks added): the same command, into $OUT/wgmma_shapes_gather.txt
