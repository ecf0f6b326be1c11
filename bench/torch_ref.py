#!/usr/bin/python3
"""PyTorch reference for `tapegrad bench`: the same five workloads, the same model shapes.

Runs under two PyTorch builds (bench/run.sh measures both):
  Debian's python3-torch 1.13, on the system OpenBLAS:  /usr/bin/python3 bench/torch_ref.py ...
  the PyPI wheel (2.x, MKL + oneDNN), in a venv:        bench/.venv/bin/python bench/torch_ref.py ...
Each training step is forward + backward + Adam step + zero_grad(set_to_none=True), as tapegrad's.
Attention is written out by default (--attention explicit: softmax(Q K^T / sqrt(d), masked) V
with separate q/k/v/o Linear layers). --attention sdpa calls F.scaled_dot_product_attention
instead (torch 2.x only; 1.13 has no public one): torch's fused path, to compare with tapegrad's
fused attention. The sgemm workload times one C = A B, 1024 x 1024 x 1024 unless --shape MxKxN
(as tapegrad bench's): the machine's GEMM peak, or a model's product, as this torch's BLAS runs it.

Threads: torch.set_num_threads(N) sizes torch's OpenMP pool. Debian's torch calls OpenBLAS (the
pthreads build), whose own pool defaults to every core, so "1 thread" would still run its GEMMs
on 2 cores. OPENBLAS_NUM_THREADS is therefore set to N too before torch loads (the same meaning
as tapegrad's --threads); --blas-threads 0 leaves OpenBLAS at its default instead. The PyPI wheel
calls MKL and oneDNN, which run on OpenMP: set_num_threads sizes their pool too
(OMP_NUM_THREADS and MKL_NUM_THREADS are set to N as well), so there --blas-threads changes
nothing and blas_threads reports torch's thread count.

Peak memory: tracemalloc does not see torch's allocations, and 1.13 has no CPU allocator stats.
peak_bytes is computed from torch.profiler's memory events of one (untimed) step: the bytes live
before the step (parameters, optimizer state, data, as tensor sizes) plus the highest running sum
of the step's allocations minus frees. It counts tensor storage only, as tapegrad's allocator does.
Where the profiler API differs, peak_bytes is null (n/a).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

WORKLOADS = ("textcls-small", "textcls-mid", "timeseries", "attn-long", "charlm", "sgemm", "generate")


def gemm_shape(text):
    """--shape MxKxN: three whole numbers from 1 to 65536 (tapegrad bench's limits)."""
    sides = text.split("x")
    if len(sides) != 3 or not all(s.isdigit() and 1 <= int(s) <= 65536 for s in sides):
        raise argparse.ArgumentTypeError(f"must be MxKxN, each in [1, 65536], got '{text}'")
    return tuple(int(s) for s in sides)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=WORKLOADS)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: all cores)")
    parser.add_argument("--blas-threads", type=int, default=-1,
                        help="OpenBLAS threads (default: as --threads; 0: OpenBLAS's own default)")
    parser.add_argument("--attention", choices=("explicit", "sdpa"), default="explicit",
                        help="attention as written out, or F.scaled_dot_product_attention (2.x)")
    parser.add_argument("--shape", type=gemm_shape, default=(1024, 1024, 1024),
                        help="sgemm: MxKxN, the product C [M, N] = A [M, K] B [K, N]")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--int8", action="store_true",
                        help="textcls-mid, charlm: eval forward, f32 vs quantize_dynamic (qint8 Linear)")
    parser.add_argument("--context", type=int, default=128,
                        help="generate: the model's max_len and window (tapegrad's rows: 128, 512, 2048)")
    return parser.parse_args()


if __name__ == "__main__":  # the BLAS libraries read their thread counts when torch loads them
    ARGS = parse_args()
    blas_threads = ARGS.threads if ARGS.blas_threads < 0 else ARGS.blas_threads
    if blas_threads > 0:
        os.environ["OPENBLAS_NUM_THREADS"] = str(blas_threads)
        os.environ["MKL_NUM_THREADS"] = str(blas_threads)
    if ARGS.threads > 0:
        os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # 2.x's profiler logs every start and stop

import torch  # noqa: E402 (after the environment is set)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def sinusoidal_table(max_len, dim):
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(max_len, dim)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)
    return table


class MultiHeadAttention(nn.Module):
    def __init__(self, hidden, heads, attention="explicit"):
        super().__init__()
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.attention = attention
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.o_proj = nn.Linear(hidden, hidden)

    def split_heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, allowed=None, causal=False):
        """allowed: bool, True = may attend, broadcastable to [B, heads, S, S]. causal (sdpa
        only): the lower triangle without a mask tensor (is_causal=True)."""
        q, k, v = self.split_heads(self.q_proj(x)), self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))
        if self.attention == "sdpa":
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=causal)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            context = torch.softmax(scores, dim=-1) @ v
        b, _, s, _ = context.shape
        return self.o_proj(context.transpose(1, 2).reshape(b, s, self.hidden))


class TextClassifier(nn.Module):
    def __init__(self, vocab, classes, dim, heads, attention, max_len=512):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.register_buffer("pe", sinusoidal_table(max_len, dim), persistent=False)
        self.mha = MultiHeadAttention(dim, heads, attention)
        self.fc = nn.Linear(dim, classes)

    def forward(self, tokens, key_allowed, pool):
        h = self.embedding(tokens) + self.pe[: tokens.shape[1]]
        h = self.mha(h, key_allowed)
        return self.fc((h * pool).sum(1))  # mean over the real positions


class TimeSeriesModel(nn.Module):
    def __init__(self, inputs, horizon, dim, heads, attention, max_len=512):
        super().__init__()
        self.input_proj = nn.Linear(inputs, dim)
        self.register_buffer("pe", sinusoidal_table(max_len, dim), persistent=False)
        self.mha = MultiHeadAttention(dim, heads, attention)
        self.output = nn.Linear(dim, horizon)

    def forward(self, x):
        h = self.input_proj(x) + self.pe[: x.shape[1]]
        h = self.mha(h)
        return self.output(h[:, -1])


class EncoderLayer(nn.Module):
    """tapegrad's pre-norm TransformerEncoderLayer (nn/transformer.cpp), dropout 0:
    x = x + attn(LN1(x)); x = x + MLP(LN2(x)), MLP = Linear(dim, 4 dim) -> exact GELU -> Linear."""

    def __init__(self, dim, heads, attention):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = MultiHeadAttention(dim, heads, attention)
        self.norm2 = nn.LayerNorm(dim, eps=1e-5)
        self.linear1 = nn.Linear(dim, 4 * dim)
        self.linear2 = nn.Linear(4 * dim, dim)

    def forward(self, x, allowed, causal):
        x = x + self.attn(self.norm1(x), allowed, causal)
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class CharLM(nn.Module):
    """tapegrad's nn::CharLM: embedding + sinusoidal table -> causal layers -> LayerNorm -> head."""

    def __init__(self, vocab, dim, heads, layers, attention, max_len):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.register_buffer("pe", sinusoidal_table(max_len, dim), persistent=False)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, attention) for _ in range(layers))
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, allowed, causal):
        h = self.embedding(tokens) + self.pe[: tokens.shape[1]]
        for layer in self.layers:
            h = layer(h, allowed, causal)
        return self.head(self.norm(h))


def linear_flops(rows, n_in, n_out):
    return 2 * rows * n_in * n_out


def mha_flops(batch, seq, hidden, causal):  # the same count as cli/bench.cpp
    return 4 * linear_flops(batch * seq, hidden, hidden) + 4 * batch * seq * seq * hidden * (0.5 if causal else 1.0)


def make_workload(name, attention="explicit", shape=(1024, 1024, 1024)):
    """(step function, tokens per step, FLOPs per step, tensors live between steps)"""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    if name == "sgemm":  # C = A B, f32: one GEMM as fast as this torch's BLAS runs it
        m, k, n = shape
        a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
        c = torch.empty(m, n)
        return (lambda: torch.mm(a, b, out=c)), 0, 2 * m * k * n, [a, b, c], 0
    if name in ("textcls-small", "textcls-mid"):
        vocab, dim, heads, batch, seq, classes = (
            (1000, 64, 4, 32, 32, 4) if name == "textcls-small" else (8000, 256, 8, 16, 128, 4))
        model = TextClassifier(vocab, classes, dim, heads, attention)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        tokens = torch.randint(0, vocab, (batch, seq), generator=gen)
        targets = torch.randint(0, classes, (batch,), generator=gen)
        lengths = [seq - (7 * b) % max(seq // 2, 1) for b in range(batch)]  # as cli/bench.cpp
        key_allowed = (torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]).view(batch, 1, 1, seq)
        pool = torch.zeros(batch, seq, 1)
        for b, n in enumerate(lengths):
            pool[b, :n] = 1.0 / n
        loss_fn = lambda: F.cross_entropy(model(tokens, key_allowed, pool), targets)
        flops = 3 * (mha_flops(batch, seq, dim, False) + linear_flops(batch, dim, classes))
        data = [tokens, targets, key_allowed, pool]
        tokens_per_step = batch * seq
    elif name == "timeseries":
        inputs, dim, heads, batch, window, horizon = 8, 128, 8, 64, 64, 16
        model = TimeSeriesModel(inputs, horizon, dim, heads, attention)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(batch, window, inputs, generator=gen)
        y = torch.randn(batch, horizon, generator=gen)
        loss_fn = lambda: F.mse_loss(model(x), y)
        flops = 3 * (linear_flops(batch * window, inputs, dim) + mha_flops(batch, window, dim, False)
                     + linear_flops(batch, dim, horizon))
        data = [x, y]
        tokens_per_step = batch * window
    elif name == "attn-long":
        batch, seq, dim, heads = 1, 2048, 256, 8
        model = MultiHeadAttention(dim, heads, attention)
        x = torch.randn(batch, seq, dim, generator=gen, requires_grad=True)
        grad_out = torch.randn(batch, seq, dim, generator=gen)
        if attention == "sdpa":  # is_causal: no mask tensor
            forward, data = (lambda: model(x, causal=True)), [x, grad_out]
        else:
            causal = torch.ones(seq, seq, dtype=torch.bool).tril()
            forward, data = (lambda: model(x, causal)), [x, grad_out, causal]

        def step():  # forward + backward only, no optimizer
            forward().backward(grad_out)
            x.grad = None
            for p in model.parameters():
                p.grad = None

        return (step, batch * seq, 3 * mha_flops(batch, seq, dim, True), list(model.parameters()) + data,
                parameter_count(model))
    elif name == "charlm":  # as cli/bench.cpp's char_lm: docs/cli.md's character LM, one step
        vocab, dim, heads, layers, batch, context = 100, 128, 4, 2, 32, 128
        model = CharLM(vocab, dim, heads, layers, attention, max_len=context)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        tokens = torch.randint(0, vocab, (batch, context), generator=gen)
        targets = torch.randint(0, vocab, (batch, context), generator=gen)
        # sdpa: is_causal, no mask tensor; explicit: the lower triangle as a mask
        allowed = None if attention == "sdpa" else torch.ones(context, context, dtype=torch.bool).tril()
        loss_fn = lambda: F.cross_entropy(model(tokens, allowed, True).reshape(-1, vocab), targets.reshape(-1))
        rows = batch * context
        layer_flops = (mha_flops(batch, context, dim, True) + linear_flops(rows, dim, 4 * dim)
                       + linear_flops(rows, 4 * dim, dim))
        flops = 3 * (layers * layer_flops + linear_flops(rows, dim, vocab))
        data = [tokens, targets] + ([] if allowed is None else [allowed])
        tokens_per_step = batch * context
    else:
        raise ValueError(name)

    def step():
        loss_fn().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def live():  # parameters, optimizer state and data: what stays between steps
        state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
        return list(model.parameters()) + list(model.buffers()) + state + data

    return step, tokens_per_step, flops, live, parameter_count(model)


def parameter_count(model):  # elements, as tapegrad bench's "parameters"
    return sum(p.numel() for p in model.parameters())


def tensor_bytes(tensors):
    seen, total = set(), 0
    for t in tensors:  # untyped_storage: 2.x (storage() warns there), storage(): 1.13
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def step_peak_bytes(step, live):
    """Bytes live before the step + the highest net allocation during it (profiler memory events)."""
    before = tensor_bytes(live() if callable(live) else live)
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
        events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
        events.sort(key=lambda e: e.start_ns() if hasattr(e, "start_ns") else e.start_us())
        running = highest = 0
        for e in events:
            running += e.nbytes()
            highest = max(highest, running)
        return before + highest
    except Exception as error:  # an API this torch does not have: say so, report nothing
        print(f"torch_ref: peak memory not measured ({error})", file=sys.stderr)
        return None


# ---- generate: greedy decoding with a KV cache, the eager loop generation libraries run ----

def attend_cached(attn, x, cache, position, sdpa):
    """One MultiHeadAttention on new positions x [B, n, dim] at `position`: their keys and
    values written into the preallocated cache (k, v [B, heads, window, head_dim]), their
    queries over every cached position (causal within a prompt)."""
    q, k, v = attn.split_heads(attn.q_proj(x)), attn.split_heads(attn.k_proj(x)), attn.split_heads(attn.v_proj(x))
    n = x.shape[1]
    cache_k, cache_v = cache
    cache_k[:, :, position:position + n] = k
    cache_v[:, :, position:position + n] = v
    keys, values = cache_k[:, :, :position + n], cache_v[:, :, :position + n]
    if sdpa:
        context = F.scaled_dot_product_attention(q, keys, values, is_causal=n > 1)
    else:
        scores = q @ keys.transpose(-1, -2) / math.sqrt(attn.head_dim)
        if n > 1:
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        context = torch.softmax(scores, dim=-1) @ values
    b = x.shape[0]
    return attn.o_proj(context.transpose(1, 2).reshape(b, n, attn.hidden))


def forward_cached(model, tokens, caches, position, sdpa):
    h = model.embedding(tokens) + model.pe[position:position + tokens.shape[1]]
    for layer, cache in zip(model.layers, caches):
        h = h + attend_cached(layer.attn, layer.norm1(h), cache, position, sdpa)
        h = h + layer.linear2(F.gelu(layer.linear1(layer.norm2(h))))
    return model.head(model.norm(h[:, -1]))


def generate_greedy(model, prompt, new_tokens, window, sdpa):
    """tapegrad's nn::generate, greedy: the same window policy (past the window, the context
    restarts from its newer half, the cache refilled from it)."""
    caches = [(torch.empty(1, model.layers[0].attn.heads, window, model.layers[0].attn.head_dim),
               torch.empty(1, model.layers[0].attn.heads, window, model.layers[0].attn.head_dim))
              for _ in model.layers]
    history, start, cached, fed = list(prompt), 0, 0, list(prompt)
    for _ in range(new_tokens):
        total = len(history)
        if total - start > window:
            start = total - max((window + 1) // 2, min(len(fed), window))
            cached = 0
        if cached == 0:
            logits = forward_cached(model, torch.tensor([history[start:]]), caches, 0, sdpa)
        else:
            logits = forward_cached(model, torch.tensor([fed]), caches, cached, sdpa)
        cached = total - start
        fed = [int(logits.argmax(-1))]
        history += fed
    return history[len(prompt):]


def generate_main(args):
    torch.manual_seed(0)
    sdpa = args.attention == "sdpa"
    model = CharLM(100, 128, 4, 2, args.attention, max_len=args.context).eval()
    gen = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, 100, (64,), generator=gen).tolist()
    new_tokens = max(256, args.context - 64)
    times = []
    with torch.inference_mode():
        for i in range(args.warmup + args.steps):
            start = time.perf_counter()
            generate_greedy(model, prompt, new_tokens, args.context, sdpa)
            if i >= args.warmup:
                times.append((time.perf_counter() - start) * 1e3)
    ms = statistics.median(times)
    report = {"workload": "generate", "attention": args.attention, "threads": torch.get_num_threads(),
              "context": args.context, "prompt_tokens": 64, "new_tokens": new_tokens, "ms": ms,
              "tokens_per_s": new_tokens / (ms / 1e3), "torch": torch.__version__,
              "parameters": parameter_count(model)}
    print(json.dumps(report) if args.json else "\n".join(f"{k:14s} {v}" for k, v in report.items()))


def int8_case(name, attention):
    """--int8: (f32 model in eval(), forward(model) -> logits, loss(logits)), as tapegrad bench --int8"""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    if name == "textcls-mid":
        vocab, dim, heads, batch, seq, classes = 8000, 256, 8, 16, 128, 4
        model = TextClassifier(vocab, classes, dim, heads, attention)
        tokens = torch.randint(0, vocab, (batch, seq), generator=gen)
        labels = torch.randint(0, classes, (batch,), generator=gen)
        lengths = [seq - (7 * b) % max(seq // 2, 1) for b in range(batch)]  # as cli/bench.cpp
        key_allowed = (torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]).view(batch, 1, 1, seq)
        pool = torch.zeros(batch, seq, 1)
        for b, n in enumerate(lengths):
            pool[b, :n] = 1.0 / n
        return (model.eval(), lambda m: m(tokens, key_allowed, pool),
                lambda logits: F.cross_entropy(logits, labels).item())
    if name == "charlm":
        vocab, dim, heads, layers, batch, context = 100, 128, 4, 2, 32, 128
        model = CharLM(vocab, dim, heads, layers, attention, max_len=context)
        tokens = torch.randint(0, vocab, (batch, context), generator=gen)
        targets = torch.randint(0, vocab, (batch, context), generator=gen)
        allowed = None if attention == "sdpa" else torch.ones(context, context, dtype=torch.bool).tril()
        return (model.eval(), lambda m: m(tokens, allowed, True),
                lambda logits: F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)).item())
    sys.exit(f"torch_ref: --int8 times textcls-mid and charlm, not {name}")


def int8_main(args):
    """f32 vs torch.ao.quantization.quantize_dynamic({nn.Linear}, qint8) on the same weights: the
    eval forward under torch.inference_mode(), timed interleaved; the loss of each."""
    import copy
    import warnings
    model, forward, loss = int8_case(args.workload, args.attention)
    with warnings.catch_warnings():  # 2.x: torch.ao.quantization is deprecated (for torchao)
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear},
                                                           dtype=torch.qint8)
    models = {"f32": model, "int8 dynamic": quantized}
    times = {name: [] for name in models}
    with torch.inference_mode():
        for _ in range(args.warmup):
            for m in models.values():
                forward(m)
        for _ in range(args.steps):
            for name, m in models.items():
                start = time.perf_counter()
                forward(m)
                times[name].append((time.perf_counter() - start) * 1e3)
        losses = {name: loss(forward(m)) for name, m in models.items()}
    base = statistics.median(times["f32"])
    for name in models:
        ms = statistics.median(times[name])
        report = {"workload": args.workload, "model": name, "attention": args.attention,
                  "threads": torch.get_num_threads(), "ms_per_batch": ms, "min_ms": min(times[name]),
                  "speedup": base / ms, "loss": losses[name],
                  "loss_change": (losses[name] - losses["f32"]) / losses["f32"],
                  "engine": torch.backends.quantized.engine, "torch": torch.__version__}
        if args.json:
            print(json.dumps(report))
        else:
            print(f"{name:14s} {ms:10.3f} ms (min {min(times[name]):.3f})  {base / ms:5.2f}x  "
                  f"loss {losses[name]:.5f} ({100 * report['loss_change']:+.3f}%)  {report['engine']}")


def blas_name():
    config = torch.__config__.show()
    return "MKL" if "BLAS_INFO=mkl" in config else "OpenBLAS"  # Debian's: BLAS_INFO=generic


def main(args):
    if args.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        sys.exit(f"torch_ref: --attention sdpa needs torch 2.x (this is {torch.__version__})")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.workload == "generate":
        return generate_main(args)
    if args.int8:
        return int8_main(args)
    step, tokens, flops, live, parameters = make_workload(args.workload, args.attention, args.shape)
    for _ in range(args.warmup):
        step()
    peak = step_peak_bytes(step, live)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    ms = statistics.median(times)
    blas = blas_name()
    if blas == "MKL":  # MKL runs on torch's OpenMP pool
        blas_threads = str(torch.get_num_threads())
    else:
        blas_threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    report = {"workload": args.workload, "attention": args.attention, "threads": torch.get_num_threads(),
              "ms_per_step": ms, "tokens_per_s": tokens / (ms / 1e3), "gflops": flops / (ms / 1e3) / 1e9,
              "peak_bytes": peak, "blas": blas, "blas_threads": blas_threads, "torch": torch.__version__,
              "parameters": parameters}
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:14s} {value}")
        print(f"{'min/max ms':14s} {min(times):.3f} / {max(times):.3f}")


if __name__ == "__main__":
    main(ARGS)
