#!/usr/bin/env python3
"""tapegrad's MultiHeadAttention against PyTorch's, on the same weights and input.

Runs examples/mha_parity.cpp (built by CMake as build/mha_parity) to write one small
MultiHeadAttention's weights, an input and tapegrad's outputs for three mask kinds (none, causal,
padding) from both of its attention paths (the fused kernel and the explicit softmax). Then loads
the weights into

  - torch.nn.MultiheadAttention: q/k/v packed into in_proj_weight / in_proj_bias, o_proj into
    out_proj (its bool masks mean true = masked out, so tapegrad's masks are negated), and
  - the tutorial's MultiHeadAttention (defined below: four Linears, split heads, scaled dot
    product, softmax, merge), with load_state_dict as tapegrad's names are,

and prints the parameter counts and the largest |difference| of the outputs for each mask kind.

    pip install safetensors torch
    cmake --build build --target mha_parity
    python bench/compare_torch_mha.py [--exe build/mha_parity]

docs/attention.md ("Parity with PyTorch's MultiheadAttention") quotes its output.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
from safetensors.torch import load_file


class MultiHeadAttention(nn.Module):
    """The tutorial's multi-head attention: four projections, heads split and merged by hand."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        assert d_model % num_heads == 0
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def split_heads(self, x):  # [B, S, D] -> [B, H, S, d_k]
        b, s, _ = x.shape
        return x.view(b, s, self.num_heads, self.d_k).transpose(1, 2)

    def merge_heads(self, x):  # [B, H, S, d_k] -> [B, S, D]
        b, _, s, _ = x.shape
        return x.transpose(1, 2).contiguous().view(b, s, self.d_model)

    def forward(self, q, k, v, mask=None):  # mask: bool, true = may attend
        q, k, v = self.split_heads(self.q_proj(q)), self.split_heads(self.k_proj(k)), self.split_heads(self.v_proj(v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return self.o_proj(self.merge_heads(torch.softmax(scores, dim=-1) @ v))


def torch_mha(state, dim, heads):
    """nn.MultiheadAttention holding tapegrad's weights."""
    mha = nn.MultiheadAttention(dim, heads, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([state[f"{p}_proj.weight"] for p in "qkv"]))
        mha.in_proj_bias.copy_(torch.cat([state[f"{p}_proj.bias"] for p in "qkv"]))
        mha.out_proj.weight.copy_(state["o_proj.weight"])
        mha.out_proj.bias.copy_(state["o_proj.bias"])
    return mha.eval()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", default="build/mha_parity", help="the mha_parity example (default: build/mha_parity)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mha_parity.safetensors")
        subprocess.run([args.exe, path], check=True, stdout=subprocess.DEVNULL)
        f = load_file(path)
    names = ("q_proj", "k_proj", "v_proj", "o_proj")
    state = {k: v for k, v in f.items() if k.split(".")[0] in names}
    x, padding = f["x"], f["padding_mask"]  # padding: [B, 1, 1, S], true = may attend
    batch, seq, dim = x.shape
    heads = 4

    tutorial = MultiHeadAttention(dim, heads).eval()
    tutorial.load_state_dict(state)  # strict: the same names and shapes
    reference = torch_mha(state, dim, heads)
    count = lambda m: sum(p.numel() for p in m.parameters())
    print(f"torch {torch.__version__}; MultiHeadAttention(dim {dim}, {heads} heads), input [{batch}, {seq}, {dim}], "
          f"lengths {f['lengths'].tolist()}")
    print(f"parameters: tapegrad {sum(t.numel() for t in state.values())}, "
          f"nn.MultiheadAttention {count(reference)}, tutorial MultiHeadAttention {count(tutorial)}")

    causal = torch.ones(seq, seq, dtype=torch.bool).tril()  # true = may attend
    masks = {  # kind -> (tapegrad-convention mask for the tutorial's class, nn.MultiheadAttention's kwargs)
        "none": (None, {}),
        "causal": (causal, {"attn_mask": ~causal}),  # nn.MultiheadAttention: true = masked out
        "padding": (padding, {"key_padding_mask": ~padding.view(batch, seq)}),
    }
    print(f"{'mask':8} {'tapegrad path':14} {'max |diff| vs nn.MultiheadAttention':>36} {'vs the tutorial class':>22}")
    worst = 0.0
    with torch.no_grad():
        for kind, (mask, kwargs) in masks.items():
            theirs = reference(x, x, x, need_weights=False, **kwargs)[0]
            tutorials = tutorial(x, x, x, mask)
            for path in ("fused", "explicit"):
                ours = f[f"out.{kind}.{path}"]
                d_ref, d_tut = (ours - theirs).abs().max().item(), (ours - tutorials).abs().max().item()
                worst = max(worst, d_ref, d_tut)
                print(f"{kind:8} {path:14} {d_ref:>36.2e} {d_tut:>22.2e}")
    print(f"largest difference {worst:.2e} (f32)")
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
