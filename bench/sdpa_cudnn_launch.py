"""Three SDPA launches on the cuDNN backend at one shape (layout [B, H, S, D], float16,
seeded random inputs), for Nsight Compute to profile the third (two warm-ups):

  python3 bench/sdpa_cudnn_launch.py B H S D
"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, S, D = (int(x) for x in sys.argv[1:5])
torch.manual_seed(0)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
