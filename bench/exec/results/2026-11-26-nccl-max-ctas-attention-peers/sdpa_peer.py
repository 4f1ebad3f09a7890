# torch SDPA backends on GPT-2 1.5B's attention shapes (B 8, 25 heads, T 1024, head 64, causal, bf16), CUDA events;
# the backward figure is (forward + autograd backward) - forward, so it carries autograd's slice-gradient copies.
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.manual_seed(0)
qkv = torch.randn(8, 1024, 3, 25, 64, device="cuda", dtype=torch.bfloat16)
def qkv_views():
    t = qkv.clone().requires_grad_(True)
    return t, t[:, :, 0].transpose(1, 2), t[:, :, 1].transpose(1, 2), t[:, :, 2].transpose(1, 2)
def timed(fn, reps=48):
    for _ in range(5): fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); a.record()
    for _ in range(reps): fn()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b)  # ms for reps calls (one step's 48 layers)
for be in [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]:
    try:
        with sdpa_kernel(be):
            t, q, k, v = qkv_views()
            fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            do = torch.randn_like(o)
            def fb():
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                torch.autograd.grad(o, (t,), do)
            both = timed(fb)
            print(f"{be.name}: forward {fwd:.2f} ms per 48 layers, backward {both - fwd:.2f} ms (fwd+bwd {both:.2f})")
    except Exception as e:
        print(f"{be.name}: failed: {e}")
