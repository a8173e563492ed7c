"""Lesson 06's model: a Llama-style decoder in plain PyTorch, and the operations it runs on.

The model (:class:`Llama`) has the Llama architecture: token embedding, then ``n_layers`` blocks
of ``x += attention(rmsnorm(x))`` and ``x += mlp(rmsnorm(x))``, a final RMSNorm and the output
projection to vocabulary logits. Attention uses rotary position embedding (RoPE) on q and k and
grouped-query attention (``n_kv_heads`` key/value heads shared by ``n_heads`` query heads); the
MLP is SwiGLU. Weights are random, drawn from a seeded generator: nothing is downloaded.

Every operation that does arithmetic goes through an :class:`Ops` object, PyTorch by default
(:data:`TORCH_OPS`, whose operations are the definitions the kernels are checked against), so
the same model runs on other kernels: the learner's in lesson 06, the course's in
:func:`tilegym_edu.reference.llama_kernels.reference_ops`. The only other PyTorch arithmetic in
the forward pass is the embedding lookup and the residual additions.

Shapes: tokens are (batch, seq) int64; activations (batch * seq, dim) rows; q is
(batch, seq, n_heads, head_dim), k and v (batch, seq, n_kv_heads, head_dim); logits
(batch, seq, vocab) in the model's dtype.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from tilegym_edu import device


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


def cached_attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention of new queries over a KV cache: q (batch, heads, seq_q, head_dim), k and v
    (batch, kv_heads, seq_k, head_dim) with seq_k >= seq_q, the queries the last seq_q
    positions (query i sees keys j <= i + seq_k - seq_q). PyTorch's SDPA with its grouped-query
    path; its is_causal aligns the mask to the start, so a chunk of several new queries gets the
    end-aligned mask explicitly, and one new query needs none."""
    seq_q, seq_k = q.shape[2], k.shape[2]
    mask = None
    if seq_q > 1:
        mask = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device).tril(seq_k - seq_q)
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


@dataclass(frozen=True)
class Ops:
    """The operations the model runs on. Each takes and returns tensors as documented:

    * ``matmul(a, b)``: a (M, K) @ b (K, N) -> (M, N)
    * ``attention(q, k, v, causal)``: (batch, heads, seq, head_dim) each -> same shape; q, k, v
      may be strided views (last dimension contiguous; k and v may have stride 0 on heads)
    * ``rmsnorm(x, weight, eps)``: x (rows, dim), weight (dim,) -> (rows, dim)
    * ``rope_(x, cos, sin)``: rotates x (batch, seq, heads, head_dim) in place, returns x
    * ``swiglu(h)``: h (rows, 2 * hidden) -> (rows, hidden)
    * ``cached_attention(q, k, v)``: decoding over a KV cache, q (batch, heads, seq_q,
      head_dim), k and v (batch, kv_heads, seq_k, head_dim), causal aligned to the end ->
      q's shape (:func:`cached_attention_torch`); used only by :class:`KVCache` passes
    * ``add_rmsnorm(x, delta, weight, eps)``: the residual add and the norm after it, (x +
      delta, rmsnorm(x + delta, weight, eps)) for x and delta (rows, dim), in one pass if the
      Ops has one; None (the default): an add, then ``rmsnorm`` (:func:`add_and_norm`)
    * ``matmul_swiglu(h, w13)``: the MLP's up-projection and SwiGLU in one kernel, swiglu(h @
      w13) for h (rows, dim) and w13 (dim, 2 hidden) -> (rows, hidden), if the Ops has one;
      None (the default): ``matmul``, then ``swiglu`` (:func:`up_and_swiglu`)
    """

    matmul: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = torch.matmul
    attention: Callable[..., torch.Tensor] = attention_torch
    rmsnorm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] = rmsnorm_torch
    rope_: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] = rope_torch_
    swiglu: Callable[[torch.Tensor], torch.Tensor] = swiglu_torch
    cached_attention: Callable[..., torch.Tensor] = cached_attention_torch
    add_rmsnorm: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    matmul_swiglu: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None


TORCH_OPS = Ops()


def add_and_norm(ops: Ops, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, rmsnorm(x + delta)) for rows x and delta (rows, dim): ops.add_rmsnorm, one
    pass, where the Ops has it; else the add and then ops.rmsnorm."""
    if ops.add_rmsnorm is not None:
        return ops.add_rmsnorm(x, delta, weight, eps)
    x = x + delta
    return x, ops.rmsnorm(x, weight, eps)


def up_and_swiglu(ops: Ops, h: torch.Tensor, w13: torch.Tensor) -> torch.Tensor:
    """swiglu(h @ w13) for rows h (rows, dim) and w13 (dim, 2 hidden): ops.matmul_swiglu, one
    kernel, where the Ops has it; else ops.matmul and then ops.swiglu."""
    if ops.matmul_swiglu is not None:
        return ops.matmul_swiglu(h, w13)
    return ops.swiglu(ops.matmul(h, w13))


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


class KVCache:
    """Each layer's keys and values so far, for decoding one token at a time: ``k[i]`` and
    ``v[i]`` are (batch, n_kv_heads, max_seq, head_dim) in the model's dtype, positions
    0 .. ``length`` - 1 filled. A forward pass with the cache appends its tokens' keys and
    values and attends over everything so far."""

    def __init__(self, model: "Llama", batch: int):
        cfg = model.cfg
        shape = (batch, cfg.n_kv_heads, cfg.max_seq, cfg.head_dim)
        like = dict(dtype=model.dtype, device=model.embedding.device)
        self.k = [torch.empty(shape, **like) for _ in range(cfg.n_layers)]
        self.v = [torch.empty(shape, **like) for _ in range(cfg.n_layers)]
        self.batch, self.length = batch, 0


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
        # in place, on a view of qkv: no copies; q's and k's heads are adjacent there, so one
        # call rotates both
        ops.rope_(qkv[:, :, :nh + nkv], cos, sin)
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

    def cached_attention(self, x: torch.Tensor, layer: dict, index: int, batch: int, seq: int,
                         ops: Ops, cache: KVCache) -> torch.Tensor:
        """Causal grouped-query self-attention of rows x (batch * seq, dim), the tokens at
        positions cache.length .. cache.length + seq - 1: their keys and values are written into
        layer ``index`` of the cache, and their queries attend over the cache up to themselves."""
        cfg = self.cfg
        hd, nh, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        start, end = cache.length, cache.length + seq
        qkv = ops.matmul(x, layer["wqkv"]).view(batch, seq, nh + 2 * nkv, hd)
        q, k, v = qkv[:, :, :nh], qkv[:, :, nh:nh + nkv], qkv[:, :, nh + nkv:]
        cos, sin = self.cos[start:end], self.sin[start:end]
        ops.rope_(qkv[:, :, :nh + nkv], cos, sin)              # q and k, as in attention
        cache.k[index][:, :, start:end].copy_(k.permute(0, 2, 1, 3))
        cache.v[index][:, :, start:end].copy_(v.permute(0, 2, 1, 3))
        o = ops.cached_attention(q.permute(0, 2, 1, 3), cache.k[index][:, :, :end],
                                 cache.v[index][:, :, :end])       # (batch, nh, seq, hd)
        rows = torch.empty((batch, seq, nh, hd), device=x.device, dtype=x.dtype)
        rows.copy_(o.permute(0, 2, 1, 3))
        return ops.matmul(rows.view(batch * seq, nh * hd), layer["wo"])

    def forward(self, tokens: torch.Tensor, ops: Ops = TORCH_OPS,
                cache: KVCache | None = None) -> torch.Tensor:
        """Logits (batch, seq, vocab) for tokens (batch, seq), each position seeing only the
        tokens up to itself. Without a cache the tokens are the whole sequence (prefill); with
        one they continue what the cache holds, and their keys and values are added to it."""
        cfg = self.cfg
        batch, seq = tokens.shape
        start = cache.length if cache is not None else 0
        if start + seq > cfg.max_seq:
            raise ValueError(f"{start + seq} positions are more than the model's max_seq "
                             f"{cfg.max_seq}")
        if cache is not None and cache.batch != batch:
            raise ValueError(f"the cache holds a batch of {cache.batch}, the tokens {batch}")
        x = self.embedding[tokens.reshape(-1)]                      # (batch * seq, dim)
        h = ops.rmsnorm(x, self.layers[0]["attn_norm"], cfg.eps)
        for index, layer in enumerate(self.layers):
            if cache is None:
                delta = self.attention(h, layer, batch, seq, ops)
            else:
                delta = self.cached_attention(h, layer, index, batch, seq, ops, cache)
            x, h = add_and_norm(ops, x, delta, layer["mlp_norm"], cfg.eps)
            delta = ops.matmul(up_and_swiglu(ops, h, layer["w13"]), layer["w2"])
            # the residual add, and the norm of the next layer's attention (or the final one)
            after = (self.layers[index + 1]["attn_norm"] if index + 1 < len(self.layers)
                     else self.norm)
            x, h = add_and_norm(ops, x, delta, after, cfg.eps)
        if cache is not None:
            cache.length += seq
        return ops.matmul(h, self.output).view(batch, seq, cfg.vocab)

    def generate(self, prompt: torch.Tensor, new_tokens: int,
                 ops: Ops = TORCH_OPS) -> torch.Tensor:
        """Greedy decoding: prompt (batch, seq) token ids, then ``new_tokens`` more, each the
        most likely next token, one forward pass of one token each after a prefill of the
        prompt into a KV cache. Returns (batch, seq + new_tokens) token ids."""
        if prompt.shape[1] + new_tokens > self.cfg.max_seq:
            raise ValueError(f"a prompt of {prompt.shape[1]} and {new_tokens} new tokens are more "
                             f"than the model's max_seq {self.cfg.max_seq}: ask for fewer")
        cache = KVCache(self, prompt.shape[0])
        tokens = [prompt]
        logits = self.forward(prompt, ops, cache)
        for step in range(new_tokens):
            tokens.append(logits[:, -1].argmax(dim=-1, keepdim=True))
            if step + 1 < new_tokens:
                logits = self.forward(tokens[-1], ops, cache)
        return torch.cat(tokens, dim=1)

    __call__ = forward


def repeatable_decode_step(model: Llama, ops: Ops, tokens: torch.Tensor, context: int,
                           forward: Callable[..., torch.Tensor] | None = None
                           ) -> Callable[[], torch.Tensor]:
    """A function of no arguments that runs one decoding step, for timing: the tokens at
    position ``context`` of ``tokens`` (batch, > context) through ``forward`` (the model's own,
    or a compiled one) over a KV cache holding ``tokens[:, :context]`` (filled here, once).
    Each call first rewinds the cache to ``context``, so every call does the same work; it
    returns that step's logits (batch, 1, vocab)."""
    cache = KVCache(model, tokens.shape[0])
    model(tokens[:, :context], ops, cache)
    forward = forward or model.forward
    new = tokens[:, context:context + 1]

    def step() -> torch.Tensor:
        cache.length = context
        return forward(new, ops, cache)
    return step


def random_tokens(cfg: LlamaConfig, batch: int, seq: int,
                  generator: torch.Generator) -> torch.Tensor:
    """Token ids (batch, seq), uniform over the vocabulary, on the lesson's device."""
    return torch.randint(0, cfg.vocab, (batch, seq), generator=generator).to(device.DEVICE)


__all__ = ["rmsnorm_torch", "rope_tables", "rope_torch", "rope_torch_", "swiglu_torch",
           "attention_torch", "cached_attention_torch", "Ops", "TORCH_OPS", "add_and_norm",
           "up_and_swiglu",
           "LlamaConfig", "GPU_CONFIG", "CPU_CONFIG", "KVCache", "Llama", "repeatable_decode_step",
           "random_tokens"]
