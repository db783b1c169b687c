"""The same GPT-2, batch and optimizer as `gradbox train`, as a plain Python PyTorch loop.

Used only by scripts/bench/train_vs_python.sh as the baseline. Prints one JSON line:
{"tokens_per_s": median over timed steps, "peak_rss_mb": ..., "step_seconds": [...]}.
"""
import argparse, json, math, resource, statistics, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--data", required=True); p.add_argument("--layers", type=int); p.add_argument("--heads", type=int)
p.add_argument("--embd", type=int); p.add_argument("--vocab", type=int); p.add_argument("--block", type=int)
p.add_argument("--batch", type=int); p.add_argument("--steps", type=int); p.add_argument("--warmup", type=int)
p.add_argument("--threads", type=int); p.add_argument("--fused", action="store_true")
a = p.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(0)
torch.set_flush_denormal(True)  # as gradbox does on CPU: both sides skip the slow denormal path

class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__(); s.h = h
        s.ln_1, s.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.c_attn, s.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.c_fc, s.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + s.c_proj(y)
        return x + s.mlp_proj(F.gelu(s.c_fc(s.ln_2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(a.vocab, a.embd), nn.Embedding(a.block, a.embd)
        s.h = nn.ModuleList(Block(a.embd, a.heads) for _ in range(a.layers)); s.ln_f = nn.LayerNorm(a.embd)
    def forward(s, idx, targets):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
        for b in s.h: x = b(x)
        logits = F.linear(s.ln_f(x), s.wte.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

model = GPT()
for n, p in model.named_parameters():  # gradbox's (nanoGPT's) init, so both run the same numbers
    if n.endswith("bias"): nn.init.zeros_(p)
    elif "ln_" in n: nn.init.ones_(p)
    else: nn.init.normal_(p, 0.0, 0.02 / (math.sqrt(2 * a.layers) if n.endswith("proj.weight") else 1.0))
decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "wte" not in n and "wpe" not in n]
no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "wte" not in n and "wpe" not in n)]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=a.fused or None)
tokens = np.memmap(f"{a.data}/train.bin", dtype=np.uint16, mode="r")
rng = np.random.default_rng(0)
times = []
for step in range(a.warmup + a.steps):
    t0 = time.perf_counter()
    ix = rng.integers(0, len(tokens) - a.block - 1, a.batch)
    rows = torch.from_numpy(np.stack([tokens[i:i + a.block + 1].astype(np.int64) for i in ix]))
    loss = model(rows[:, :-1], rows[:, 1:])
    opt.zero_grad(set_to_none=True); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(); loss.item()
    if step >= a.warmup: times.append(time.perf_counter() - t0)
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"tokens_per_s": a.batch * a.block / statistics.median(times), "peak_rss_mb": rss_mb,
                  "step_seconds": times, "params": sum(p.numel() for p in model.parameters())}))
