#!/usr/bin/python3
"""PyTorch's attention backward on the CPU, on the shapes of
shoal-kernel-bench's BM_Attention / BM_AttentionGrad (batch 4 x 12 heads,
T = 512, d = 64, an additive causal mask, scale 1/8).

    OMP_NUM_THREADS=N TORCH-PYTHON bench/attention_vs_torch.py N

Prints the median of 7 backward passes (y.backward(dy), the gradients of
q, k and v) of torch.nn.functional.scaled_dot_product_attention and of the
eager chain softmax(q k^T * scale + mask) v, for comparison with
`SHOAL_NUM_THREADS=N build/bin/shoal-kernel-bench
--benchmark_filter=AttentionGrad` (or bench/kernel_roofline.py).
"""

import sys
import time

import torch


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(threads)
    b, h, t, d = 4, 12, 512, 64
    q, k, v = (torch.rand(b, h, t, d) * 2 - 1 for _ in range(3))
    mask = torch.triu(torch.full((t, t), -1e9), 1)
    for x in (q, k, v):
        x.requires_grad_(True)
    dy = torch.rand(b, h, t, d)

    def backward_ms(sdpa):
        if sdpa:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                 scale=0.125)
        else:
            y = torch.softmax(q @ k.transpose(-1, -2) * 0.125 + mask, -1) @ v
        t0 = time.perf_counter()
        y.backward(dy)
        return (time.perf_counter() - t0) * 1e3

    print("PyTorch %s, %d thread(s), attention backward [4, 12, 512, 64]" % (torch.__version__,
                                                                              threads))
    for sdpa in (True, False):
        ms = sorted(backward_ms(sdpa) for _ in range(7))[3]
        print("  %-34s %8.1f ms" % ("scaled_dot_product_attention" if sdpa else "eager chain", ms))


if __name__ == "__main__":
    main()
