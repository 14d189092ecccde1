"""A bfloat16 GEMM with a weight stored [N, K], as nn.Linear stores it: C = A @ B^T.

N = K = 4096 is the attention output projection of an 8B model; M is the token count.
Accumulation is in float32; C is rounded to bfloat16.
"""

import torch


@torch.no_grad()
def run(A, B):
    return torch.matmul(A, B.t())
