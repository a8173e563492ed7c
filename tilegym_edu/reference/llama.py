"""Lesson 06: a Llama-style decoder in plain PyTorch, and the kernels that run it.

The model (:class:`Llama`) has the Llama architecture: token embedding, then ``n_layers`` blocks
of ``x += attention(rmsnorm(x))`` and ``x += mlp(rmsnorm(x))``, a final RMSNorm and the output
projection to vocabulary logits. Attention uses rotary position embedding (RoPE) on q and k and
grouped-query attention (``n_kv_heads`` key/value heads shared by ``n_heads`` query heads); the
MLP is SwiGLU. Weights are random, drawn from a seeded generator: nothing is downloaded.

Every operation that does arithmetic goes through an :class:`Ops` object, PyTorch by default
(:data:`TORCH_OPS`), so the same model runs on other kernels: :func:`kernel_ops` builds one from
a matmul and a flash attention (lessons 03 and 04) and the fused kernels of this lesson
(:func:`rmsnorm`, :func:`rope_`, :func:`swiglu`). The only other PyTorch arithmetic in the
forward pass is the embedding lookup and the residual additions.

Shapes: tokens are (batch, seq) int64; activations (batch * seq, dim) rows; q is
(batch, seq, n_heads, head_dim), k and v (batch, seq, n_kv_heads, head_dim); logits
(batch, seq, vocab) in the model's dtype.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable

import torch
import triton
import triton.language as tl

from tilegym_edu import device
from tilegym_edu.grading import forbidden_in_graded_calls


# ----------------------------------------------------------------------------------------------
# The operations in PyTorch: the definitions the kernels are checked against
# ----------------------------------------------------------------------------------------------

def rmsnorm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Root-mean-square norm of each row of x (rows, dim), times weight (dim,); statistics in
    float32 or wider, result in x's dtype. eps keeps a row of zeros from dividing by zero."""
    wide = torch.promote_types(x.dtype, torch.float32)
    xw = x.to(wide)
    rms = torch.rsqrt(xw.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xw * rms * weight.to(wide)).to(x.dtype)


def rope_tables(seq: int, head_dim: int, theta: float = 10000.0,
                dtype: torch.dtype = torch.float32, device_: str | torch.device = "cpu"
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, each (seq, head_dim // 2): position p turns the pair
    (i, i + head_dim/2) by p * theta^(-2i/head_dim) radians."""
    inv_freq = theta ** (-torch.arange(0, head_dim // 2, dtype=torch.float64) * 2 / head_dim)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().to(device_, dtype), angles.sin().to(device_, dtype)


def rope_torch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, out of place: x is (batch, seq, heads, head_dim), cos and sin
    (seq, head_dim // 2). The first half of each head is rotated against the second half
    (the "rotate half" layout of Llama in Hugging Face transformers)."""
    half = x.shape[-1] // 2
    wide = torch.promote_types(x.dtype, torch.float32)
    x1, x2 = x[..., :half].to(wide), x[..., half:].to(wide)
    c, s = cos[None, :, None, :].to(wide), sin[None, :, None, :].to(wide)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def rope_torch_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """rope_torch written back into x (in place); returns x."""
    x.copy_(rope_torch(x, cos, sin))
    return x


def swiglu_torch(h: torch.Tensor) -> torch.Tensor:
    """SwiGLU: h is (rows, 2 * hidden), the gate projection then the up projection side by
    side; returns silu(gate) * up, (rows, hidden), computed in float32 or wider."""
    hidden = h.shape[-1] // 2
    wide = torch.promote_types(h.dtype, torch.float32)
    gate, up = h[..., :hidden].to(wide), h[..., hidden:].to(wide)
    return (torch.nn.functional.silu(gate) * up).to(h.dtype)


def attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    causal: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) v on (batch, heads, seq, head_dim), causal if asked:
    PyTorch's scaled_dot_product_attention, which picks its fastest backend (FlashAttention,
    cuDNN or memory-efficient on a GPU; the math backend, in any dtype, on the CPU). k and v
    expanded over the heads with stride 0 (grouped-query views) go to it with one head and
    ``enable_gqa``, PyTorch's own grouped-query path, so that it copies nothing either."""
    if k.shape[1] > 1 and k.stride(1) == 0 and v.stride(1) == 0:
        return torch.nn.functional.scaled_dot_product_attention(
            q, k[:, :1], v[:, :1], is_causal=causal, enable_gqa=True)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


@dataclass(frozen=True)
class Ops:
    """The operations the model runs on. Each takes and returns tensors as documented:

    * ``matmul(a, b)``: a (M, K) @ b (K, N) -> (M, N)
    * ``attention(q, k, v, causal)``: (batch, heads, seq, head_dim) each -> same shape; q, k, v
      may be strided views (last dimension contiguous; k and v may have stride 0 on heads)
    * ``rmsnorm(x, weight, eps)``: x (rows, dim), weight (dim,) -> (rows, dim)
    * ``rope_(x, cos, sin)``: rotates x (batch, seq, heads, head_dim) in place, returns x
    * ``swiglu(h)``: h (rows, 2 * hidden) -> (rows, hidden)
    """

    matmul: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = torch.matmul
    attention: Callable[..., torch.Tensor] = attention_torch
    rmsnorm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] = rmsnorm_torch
    rope_: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] = rope_torch_
    swiglu: Callable[[torch.Tensor], torch.Tensor] = swiglu_torch


TORCH_OPS = Ops()


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LlamaConfig:
    """Sizes of the decoder. ``head_dim = dim // n_heads``; ``n_heads`` must be a multiple of
    ``n_kv_heads`` (each key/value head serves ``n_heads // n_kv_heads`` query heads)."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden: int            # SwiGLU's inner width
    vocab: int
    max_seq: int
    eps: float = 1e-5
    theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def group(self) -> int:
        return self.n_heads // self.n_kv_heads


#: a decoder of about 0.5 billion parameters (1 GB in float16): fits any GPU the course runs on
GPU_CONFIG = LlamaConfig(dim=2048, n_layers=8, n_heads=16, n_kv_heads=4, hidden=5632,
                         vocab=32000, max_seq=2048)
#: small enough for the interpreter: odd widths (hidden 72, vocab 101) so no block size fits
CPU_CONFIG = LlamaConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden=72,
                         vocab=101, max_seq=32)


def config() -> LlamaConfig:
    """The lesson's model size: GPU_CONFIG on a GPU, CPU_CONFIG in the interpreter."""
    return device.size(GPU_CONFIG, CPU_CONFIG)


class Llama:
    """A Llama-style decoder with random weights (seeded), in ``dtype`` on ``device_``.

    Weights are stored (in, out), so every projection is ``ops.matmul(x, W)``; q, k and v come
    from one fused projection ``wqkv`` (dim, (n_heads + 2 n_kv_heads) head_dim), the gate and up
    projections from one ``w13`` (dim, 2 hidden). Initialisation: normal with standard deviation
    1/sqrt(fan_in), norm weights near 1, so activations stay O(1) through the layers. The rope
    tables ``cos`` and ``sin`` are (max_seq, head_dim // 2), float32 (float64 for a float64
    model)."""

    def __init__(self, cfg: LlamaConfig, dtype: torch.dtype = torch.float32,
                 device_: str | torch.device | None = None, seed: int = 0):
        self.cfg = cfg
        device_ = device.DEVICE if device_ is None else device_
        g = torch.Generator().manual_seed(seed)

        def normal(*shape, std):
            return (torch.randn(shape, generator=g, dtype=torch.float32) * std).to(device_, dtype)

        d, hd = cfg.dim, cfg.head_dim
        qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * hd
        self.embedding = normal(cfg.vocab, d, std=1.0)
        self.layers = []
        for _ in range(cfg.n_layers):
            self.layers.append({
                "attn_norm": 1 + normal(d, std=0.1),
                "wqkv": normal(d, qkv, std=d ** -0.5),
                "wo": normal(cfg.n_heads * hd, d, std=(cfg.n_heads * hd) ** -0.5),
                "mlp_norm": 1 + normal(d, std=0.1),
                "w13": normal(d, 2 * cfg.hidden, std=d ** -0.5),
                "w2": normal(cfg.hidden, d, std=cfg.hidden ** -0.5),
            })
        self.norm = 1 + normal(d, std=0.1)
        self.output = normal(d, cfg.vocab, std=d ** -0.5)
        table = torch.float64 if dtype == torch.float64 else torch.float32
        self.cos, self.sin = rope_tables(cfg.max_seq, hd, cfg.theta, table, device_)

    @property
    def dtype(self) -> torch.dtype:
        return self.embedding.dtype

    def to(self, dtype: torch.dtype, device_: str | torch.device | None = None) -> "Llama":
        """A copy with every weight in ``dtype`` (and on ``device_``); the rope tables in
        float32 (float64 for a float64 copy)."""
        new = object.__new__(Llama)
        new.cfg = self.cfg
        dev = self.embedding.device if device_ is None else device_
        new.embedding = self.embedding.to(dev, dtype)
        new.layers = [{k: w.to(dev, dtype) for k, w in layer.items()} for layer in self.layers]
        new.norm, new.output = self.norm.to(dev, dtype), self.output.to(dev, dtype)
        table = torch.float64 if dtype == torch.float64 else torch.float32
        new.cos, new.sin = rope_tables(self.cfg.max_seq, self.cfg.head_dim, self.cfg.theta,
                                       table, dev)
        return new

    def parameters(self) -> int:
        """How many weights the model has."""
        tensors = [self.embedding, self.norm, self.output] + [w for layer in self.layers
                                                              for w in layer.values()]
        return sum(t.numel() for t in tensors)

    def attention(self, x: torch.Tensor, layer: dict, batch: int, seq: int,
                  ops: Ops) -> torch.Tensor:
        """Causal grouped-query self-attention of rows x (batch * seq, dim)."""
        cfg = self.cfg
        hd, nh, nkv, group = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads, cfg.group
        qkv = ops.matmul(x, layer["wqkv"]).view(batch, seq, nh + 2 * nkv, hd)
        q, k, v = qkv[:, :, :nh], qkv[:, :, nh:nh + nkv], qkv[:, :, nh + nkv:]
        cos, sin = self.cos[:seq], self.sin[:seq]
        ops.rope_(q, cos, sin)   # in place, on views of qkv: no copies
        ops.rope_(k, cos, sin)
        o = torch.empty((batch * seq, nh * hd), device=x.device, dtype=x.dtype)
        for b in range(batch):
            # one batch element at a time: the kv heads become the attention's "batch", the
            # query heads of one group its "heads"; k and v are repeated over the group with
            # stride 0 (a view, no copy)
            qb = q[b].view(seq, nkv, group, hd).permute(1, 2, 0, 3)
            kb = k[b].permute(1, 0, 2)[:, None].expand(nkv, group, seq, hd)
            vb = v[b].permute(1, 0, 2)[:, None].expand(nkv, group, seq, hd)
            ob = ops.attention(qb, kb, vb, True)                 # (nkv, group, seq, hd)
            o[b * seq:(b + 1) * seq].view(seq, nkv, group, hd).copy_(ob.permute(2, 0, 1, 3))
        return ops.matmul(o, layer["wo"])

    def forward(self, tokens: torch.Tensor, ops: Ops = TORCH_OPS) -> torch.Tensor:
        """Logits (batch, seq, vocab) for tokens (batch, seq), each position seeing only the
        tokens up to itself (prefill)."""
        cfg = self.cfg
        batch, seq = tokens.shape
        if seq > cfg.max_seq:
            raise ValueError(f"seq {seq} is longer than the model's max_seq {cfg.max_seq}")
        x = self.embedding[tokens.reshape(-1)]                      # (batch * seq, dim)
        for layer in self.layers:
            h = ops.rmsnorm(x, layer["attn_norm"], cfg.eps)
            x = x + self.attention(h, layer, batch, seq, ops)
            h = ops.rmsnorm(x, layer["mlp_norm"], cfg.eps)
            x = x + ops.matmul(ops.swiglu(ops.matmul(h, layer["w13"])), layer["w2"])
        x = ops.rmsnorm(x, self.norm, cfg.eps)
        return ops.matmul(x, self.output).view(batch, seq, cfg.vocab)

    __call__ = forward


def profiled(ops: Ops) -> Ops:
    """``ops`` with every operation run inside a torch.profiler range named ``ops.<name>``
    (``ops.matmul``, ``ops.attention``, ...), so that a profile of the model splits its GPU
    time by operation (:func:`gpu_ms_by_op`); outside a profiler the ranges cost ~1 µs each."""
    def in_range(name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with torch.profiler.record_function(f"ops.{name}"):
                return fn(*args, **kwargs)
        return run
    return Ops(**{f.name: in_range(f.name, getattr(ops, f.name)) for f in dataclasses.fields(Ops)})


def gpu_ms_by_op(run: Callable[[], object], repeats: int = 3) -> dict[str, float]:
    """GPU time of one call of ``run`` in ms (the mean of ``repeats`` profiled calls), split by
    the ``ops.<name>`` ranges of a :func:`profiled` Ops that ``run`` goes through:
    {"matmul": ..., "attention": ..., "rmsnorm": ..., "rope_": ..., "swiglu": ...,
    "other": kernels launched outside those ranges (embedding, residual additions),
    "total": every kernel}. Kernel time only: while the GPU waits for the host, nothing counts.

    A kernel belongs to the range its launch happened in, on the host's clock: the profiler
    ties PyTorch's own kernels to the operation that launched them, but not Triton's, which
    are launched through the CUDA driver from Python."""
    from torch.profiler import ProfilerActivity, profile
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            run()
        torch.cuda.synchronize()
    host = torch.autograd.DeviceType.CPU
    events = prof.events()
    ranges = [(e.time_range.start, e.time_range.end, e.name[len("ops."):]) for e in events
              if e.device_type == host and e.name.startswith("ops.")]
    launched_at = {e.id: e.time_range.start for e in events  # CUDA runtime and driver calls
                   if e.device_type == host and e.name.startswith("cu")}
    split = dict.fromkeys([f.name for f in dataclasses.fields(Ops)] + ["other"], 0.0)
    for kernel in events:
        if kernel.device_type == host or kernel.is_user_annotation or kernel.name.startswith("ops."):
            continue
        t = launched_at.get(kernel.id)
        op = next((name for start, end, name in ranges if t is not None and start <= t <= end),
                  "other")
        split[op] += kernel.time_range.elapsed_us()
    result = {name: us / repeats / 1e3 for name, us in split.items()}
    result["total"] = sum(split.values()) / repeats / 1e3
    return result


def random_tokens(cfg: LlamaConfig, batch: int, seq: int,
                  generator: torch.Generator) -> torch.Tensor:
    """Token ids (batch, seq), uniform over the vocabulary, on the lesson's device."""
    return torch.randint(0, cfg.vocab, (batch, seq), generator=generator).to(device.DEVICE)


# ----------------------------------------------------------------------------------------------
# The fused kernels of lesson 06
# ----------------------------------------------------------------------------------------------

@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                   BLOCK: tl.constexpr):
    """y[row] = x[row] / sqrt(mean(x[row]^2) + eps) * w, one row per program: the row is read
    once, its mean square computed in float32 in registers, and written once."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean_sq = tl.sum(x * x, axis=0) / n_cols
    y = x * tl.rsqrt(mean_sq + eps) * w
    tl.store(y_ptr + row * stride_y + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@forbidden_in_graded_calls
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of each row of x (rows, dim) with weight (dim,), in one pass over x."""
    rows, n_cols = x.shape
    y = torch.empty((rows, n_cols), device=x.device, dtype=x.dtype)
    BLOCK = triton.next_power_of_2(n_cols)
    rmsnorm_kernel[(rows,)](x, weight, y, n_cols, x.stride(0), y.stride(0), eps,
                            BLOCK=BLOCK, num_warps=4 if BLOCK <= 2048 else 8)
    return y


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, seq_len, heads,
                stride_xb, stride_xs, stride_xh, stride_cs,
                HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    """Rotates, in place, every head of one token: program (s, b) of x (batch, seq, heads,
    2 * HALF). Element i of a head is paired with element i + HALF and the pair turned by the
    angle whose cos and sin are cos[s, i], sin[s, i]; math in float32."""
    s = tl.program_id(0)
    b = tl.program_id(1)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HALF)
    mask = offs_h[:, None] < heads
    base = x_ptr + b * stride_xb + s * stride_xs + offs_h[:, None] * stride_xh + offs_d[None, :]
    x1 = tl.load(base, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + HALF, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + s * stride_cs + offs_d)[None, :]
    sn = tl.load(sin_ptr + s * stride_cs + offs_d)[None, :]
    tl.store(base, (x1 * c - x2 * sn).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(base + HALF, (x2 * c + x1 * sn).to(x_ptr.dtype.element_ty), mask=mask)


@forbidden_in_graded_calls
def rope_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding applied to x (batch, seq, heads, head_dim) in place; x may be a strided
    view (last dimension contiguous); cos and sin are (>= seq, head_dim // 2) float32 with
    contiguous rows. Returns x."""
    batch, seq, heads, head_dim = x.shape
    if x.stride(-1) != 1 or cos.stride(-1) != 1 or sin.stride() != cos.stride():
        raise ValueError("x, cos and sin need a contiguous last dimension (and cos, sin one layout)")
    rope_kernel[(seq, batch)](x, cos, sin, seq, heads, x.stride(0), x.stride(1), x.stride(2),
                              cos.stride(0), HALF=head_dim // 2,
                              BLOCK_H=triton.next_power_of_2(heads))
    return x


@triton.jit
def swiglu_kernel(h_ptr, y_ptr, n_cols, stride_h, stride_y, BLOCK: tl.constexpr):
    """y[row, j] = silu(h[row, j]) * h[row, n_cols + j]: the gate and up halves of one row of
    h read once each, y written once; program (row, column block)."""
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_cols
    gate = tl.load(h_ptr + row * stride_h + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(h_ptr + row * stride_h + n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(y_ptr + row * stride_y + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@forbidden_in_graded_calls
def swiglu(h: torch.Tensor, BLOCK: int = 1024) -> torch.Tensor:
    """silu(gate) * up for h (rows, 2 * hidden) = [gate | up]; returns (rows, hidden)."""
    rows, two_hidden = h.shape
    hidden = two_hidden // 2
    if h.stride(-1) != 1:
        raise ValueError("h needs a contiguous last dimension")
    y = torch.empty((rows, hidden), device=h.device, dtype=h.dtype)
    BLOCK = min(BLOCK, triton.next_power_of_2(hidden))
    swiglu_kernel[(rows, triton.cdiv(hidden, BLOCK))](h, y, hidden, h.stride(0), y.stride(0),
                                                      BLOCK=BLOCK)
    return y


def kernel_ops(matmul: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               attention: Callable[..., torch.Tensor],
               rmsnorm_: Callable[..., torch.Tensor] = rmsnorm,
               rope: Callable[..., torch.Tensor] = rope_,
               swiglu_: Callable[..., torch.Tensor] = swiglu) -> Ops:
    """An Ops running the model on kernels: the given matmul and attention (e.g. yours from
    lessons 03 and 04) and the fused kernels (this module's unless given)."""
    return Ops(matmul=matmul, attention=attention, rmsnorm=rmsnorm_, rope_=rope, swiglu=swiglu_)


def reference_ops(small_blocks: bool = not device.ON_GPU) -> Ops:
    """The model on the course's reference kernels (lessons 03, 04 and this one); in the
    interpreter with small blocks, so a forward pass takes seconds."""
    from tilegym_edu.reference import attention, pipelined
    from tilegym_edu.tune import Config
    if small_blocks:
        def matmul(a, b):
            return pipelined.pipelined_matmul(a, b, BLOCK_M=16, BLOCK_N=32, BLOCK_K=32)

        small = Config(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2)

        def attn(q, k, v, causal=False):
            return attention.flash_attention(q, k, v, causal, config=small)
    else:
        matmul = pipelined.tuned_matmul
        attn = attention.flash_attention
    return kernel_ops(matmul, attn)


__all__ = ["Ops", "TORCH_OPS", "LlamaConfig", "GPU_CONFIG", "CPU_CONFIG", "config", "Llama",
           "profiled", "gpu_ms_by_op", "random_tokens", "rmsnorm_torch", "rope_tables", "rope_torch", "rope_torch_",
           "swiglu_torch", "attention_torch", "rmsnorm_kernel", "rmsnorm", "rope_kernel", "rope_",
           "swiglu_kernel", "swiglu", "kernel_ops", "reference_ops"]


# a launch of a raw kernel inside a graded call raises too
forbidden_in_graded_calls(rmsnorm_kernel)
forbidden_in_graded_calls(rope_kernel)
forbidden_in_graded_calls(swiglu_kernel)
