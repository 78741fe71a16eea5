"""A few PyTorch SDPA-flash forward calls at one shape, bf16, for Nsight Compute to profile one
launch of FlashAttention-2's forward kernel beside ours (scripts/device/run.sh ncu-forward).

    python3 sdpa_forward_once.py B,H,N,D true|false
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CALLS = 5  # ncu skips the first two launches and profiles the third


def main():
    b, h, n, d = (int(x) for x in sys.argv[1].split(","))
    causal = sys.argv[2] == "true"
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(CALLS):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
