"""PyTorch anchors for the model features (issue 13), bf16, run in the same device call as
`attention features` (benches/attention.rs). Prints CSV: impl,B,H,N,D,causal,pass,ms,tflops.

- gqa:     B=4, H=32, H_kv=8, N=4096, D=128, causal. SDPA-flash on K/V expanded beforehand
           (`torch-sdpa-flash-expanded`, the expansion not timed) and SDPA with enable_gqa.
- window:  B=4, H=16, N=8192, D=128, causal, window 1024 keys to the left. SDPA with an
           explicit bool mask (efficient and cuDNN backends: flash takes no mask) and
           FlexAttention's sliding-window block mask (compiled once, not timed).
- dropout: B=16, H=16, N=2048, D=64, p = 0.1, not causal: SDPA-flash with dropout_p.
FLOPs count the visible (query, key) pairs: 4*D per pair forward, 3.5x for forward+backward
(the convention of torch_attention.py: causal halves the full count).
"""
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from triton.testing import do_bench

torch.manual_seed(0)
dev = "cuda"
bf16 = torch.bfloat16
print("impl,B,H,N,D,causal,pass,ms,tflops", flush=True)


def visible_pairs(n, causal, left):
    i = torch.arange(n, device=dev).unsqueeze(1)
    j = torch.arange(n, device=dev).unsqueeze(0)
    keep = torch.ones(n, n, dtype=torch.bool, device=dev)
    if causal:
        keep &= j <= i
    if left is not None:
        keep &= j >= i - left
    return keep, int(keep.sum().item())


def bench(tag, shape, fn, inputs, flops):
    b, h, n, d, causal = shape
    q, k, v = inputs
    do = torch.randn(b, h, n, v.shape[-1], device=dev, dtype=bf16)
    try:
        with torch.no_grad():
            ms = do_bench(lambda: fn(q, k, v), warmup=25, rep=200, return_mode="median")
        print(f"{tag},{b},{h},{n},{d},{causal},fwd,{ms:.3f},{flops/ms/1e9:.1f}", flush=True)
        def fb():
            fn(q, k, v).backward(do)
        ms = do_bench(fb, warmup=25, rep=200, grad_to_none=[q, k, v], return_mode="median")
        print(f"{tag},{b},{h},{n},{d},{causal},fwd+bwd,{ms:.3f},{3.5*flops/ms/1e9:.1f}", flush=True)
    except Exception as e:
        print(f"{tag},{b},{h},{n},{d},{causal},ERR,{type(e).__name__}: {str(e)[:80]}", flush=True)
    torch.cuda.empty_cache()


def sdpa(backend, **kw):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, **kw)
    return run


def leaf(*shape):
    return torch.randn(*shape, device=dev, dtype=bf16, requires_grad=True)


# Grouped-query attention.
b, h, hkv, n, d = 4, 32, 8, 4096, 128
_, pairs = visible_pairs(n, True, None)
flops = 4 * b * h * pairs * d
q, k, v = leaf(b, h, n, d), leaf(b, hkv, n, d), leaf(b, hkv, n, d)
ke = k.detach().repeat_interleave(h // hkv, dim=1).requires_grad_()
ve = v.detach().repeat_interleave(h // hkv, dim=1).requires_grad_()
bench("torch-sdpa-flash-expanded-gqa8", (b, h, n, d, True), sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True), (q, ke, ve), flops)
bench("torch-sdpa-flash-gqa8", (b, h, n, d, True), sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True, enable_gqa=True), (q, k, v), flops)
bench("torch-sdpa-cudnn-expanded-gqa8", (b, h, n, d, True), sdpa(SDPBackend.CUDNN_ATTENTION, is_causal=True), (q, ke, ve), flops)
del q, k, v, ke, ve

# Sliding window, causal.
b, h, n, d, left = 4, 16, 8192, 128, 1024
keep, pairs = visible_pairs(n, True, left)
flops = 4 * b * h * pairs * d
q, k, v = leaf(b, h, n, d), leaf(b, h, n, d), leaf(b, h, n, d)
bench("torch-sdpa-efficient-mask-window1024", (b, h, n, d, True), sdpa(SDPBackend.EFFICIENT_ATTENTION, attn_mask=keep), (q, k, v), flops)
bench("torch-sdpa-cudnn-mask-window1024", (b, h, n, d, True), sdpa(SDPBackend.CUDNN_ATTENTION, attn_mask=keep), (q, k, v), flops)
try:
    from torch.nn.attention.flex_attention import flex_attention, create_block_mask
    block_mask = create_block_mask(lambda b_, h_, i, j: (j <= i) & (j >= i - left), None, None, n, n, device=dev)
    flex = torch.compile(flex_attention)
    bench("torch-flex-window1024", (b, h, n, d, True), lambda q, k, v: flex(q, k, v, block_mask=block_mask), (q, k, v), flops)
except Exception as e:
    print(f"torch-flex-window1024,{b},{h},{n},{d},True,ERR,{type(e).__name__}: {str(e)[:80]}", flush=True)
del q, k, v, keep

# Dropout on the probabilities.
b, h, n, d = 16, 16, 2048, 64
flops = 4 * b * h * n * n * d
q, k, v = leaf(b, h, n, d), leaf(b, h, n, d), leaf(b, h, n, d)
bench("torch-sdpa-flash-dropout0.1", (b, h, n, d, False), sdpa(SDPBackend.FLASH_ATTENTION, dropout_p=0.1), (q, k, v), flops)
