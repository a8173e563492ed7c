"""tilegym_edu.reference.llama, llama_kernels and llama_profile: the PyTorch model, its swap onto
kernels and its profile by operation (lesson 06)."""
import math

import pytest
import torch

from tilegym_edu import check, grading
from tilegym_edu.reference import llama, llama_kernels, llama_profile
from tilegym_edu.reference.llama import CPU_CONFIG, GPU_CONFIG, TORCH_OPS, Llama, Ops

pytestmark = pytest.mark.beside


def tokens(batch, seq, seed=0, cfg=CPU_CONFIG):
    return llama.random_tokens(cfg, batch, seq, torch.Generator().manual_seed(seed))


def test_configs_are_llama_shaped():
    for cfg in (GPU_CONFIG, CPU_CONFIG):
        assert cfg.dim % cfg.n_heads == 0 and cfg.n_heads % cfg.n_kv_heads == 0
        assert cfg.head_dim in (16, 32, 64, 128)       # what flash_attention takes
        assert cfg.group > 1                            # grouped-query attention, not plain MHA
    assert CPU_CONFIG.hidden % 16 and CPU_CONFIG.vocab % 16    # odd widths at the CPU size
    # the GPU model fits any GPU the course runs on: under 1.5 GB of float16 weights
    params = (GPU_CONFIG.vocab * GPU_CONFIG.dim * 2 + GPU_CONFIG.n_layers * (
        GPU_CONFIG.dim * (GPU_CONFIG.n_heads + 2 * GPU_CONFIG.n_kv_heads) * GPU_CONFIG.head_dim
        + GPU_CONFIG.n_heads * GPU_CONFIG.head_dim * GPU_CONFIG.dim
        + 3 * GPU_CONFIG.dim * GPU_CONFIG.hidden))
    assert params * 2 < 1.5e9


def test_model_shapes_dtypes_and_seeded_weights():
    model = Llama(CPU_CONFIG, torch.float32)
    logits = model(tokens(2, 9))
    assert logits.shape == (2, 9, CPU_CONFIG.vocab) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all() and 0.3 < logits.std().item() < 3   # activations stay O(1)
    again = Llama(CPU_CONFIG, torch.float32)
    assert torch.equal(again(tokens(2, 9)), logits)
    other = Llama(CPU_CONFIG, torch.float32, seed=1)
    assert not torch.equal(other(tokens(2, 9)), logits)
    assert model.to(torch.float16)(tokens(1, 5)).dtype == torch.float16
    with pytest.raises(ValueError, match="max_seq"):
        model(tokens(1, CPU_CONFIG.max_seq + 1))


def test_model_is_causal():
    model = Llama(CPU_CONFIG, torch.float64)
    t = tokens(1, 10)
    changed = t.clone()
    changed[0, 6] = (t[0, 6] + 1) % CPU_CONFIG.vocab
    a, b = model(t), model(changed)
    assert torch.allclose(a[0, :6], b[0, :6])
    assert not torch.allclose(a[0, 6:], b[0, 6:])


def test_batch_elements_are_independent():
    model = Llama(CPU_CONFIG, torch.float64)
    t = tokens(2, 7)
    both = model(t)
    assert torch.allclose(both[1], model(t[1:])[0])


def naive_model(model, t):
    """The model written out with no Ops, no views, repeat_interleave for GQA and the complex-number
    form of RoPE: an independent check of Llama.forward."""
    cfg = model.cfg
    B, S = t.shape
    hd, nh, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    x = model.embedding[t]

    def norm(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.eps) * w

    pos = torch.arange(S, dtype=torch.float64)[:, None]
    freq = cfg.theta ** (-torch.arange(hd // 2, dtype=torch.float64) * 2 / hd)
    rot = torch.polar(torch.ones(S, hd // 2, dtype=torch.float64), pos * freq)

    def rope(z):   # (B, S, H, hd), rotate-half pairing
        c = torch.complex(z[..., :hd // 2], z[..., hd // 2:]) * rot[None, :, None]
        return torch.cat([c.real, c.imag], -1)

    for layer in model.layers:
        h = norm(x, layer["attn_norm"])
        qkv = h @ layer["wqkv"]
        q = rope(qkv[..., :nh * hd].reshape(B, S, nh, hd)).transpose(1, 2)
        k = rope(qkv[..., nh * hd:(nh + nkv) * hd].reshape(B, S, nkv, hd)).transpose(1, 2)
        v = qkv[..., (nh + nkv) * hd:].reshape(B, S, nkv, hd).transpose(1, 2)
        k, v = k.repeat_interleave(cfg.group, 1), v.repeat_interleave(cfg.group, 1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), -math.inf)
        o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, nh * hd)
        x = x + o @ layer["wo"]
        g, u = (norm(x, layer["mlp_norm"]) @ layer["w13"]).chunk(2, -1)
        x = x + (torch.nn.functional.silu(g) * u) @ layer["w2"]
    return norm(x, model.norm) @ model.output


def test_forward_matches_an_independent_implementation():
    model = Llama(CPU_CONFIG, torch.float64)
    t = tokens(2, 11)
    assert check.relative_error(model(t), naive_model(model, t)) < 1e-12


def test_swap_with_the_reference_kernels_matches_pytorch():
    for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 5e-3)):
        model = Llama(CPU_CONFIG, dtype)
        t = tokens(2, 9, seed=3)
        ref = model.to(torch.float64, "cpu")(t.cpu())
        out = model(t, llama_kernels.reference_ops())
        assert out.dtype == dtype
        assert check.relative_error(out, ref) < tol


def test_swap_goes_through_every_op():
    calls = {}

    def counting(name, fn):
        def wrapped(*args):
            calls[name] = calls.get(name, 0) + 1
            return fn(*args)
        return wrapped

    ops = Ops(**{name: counting(name, getattr(TORCH_OPS, name))
                 for name in ("matmul", "attention", "rmsnorm", "rope_", "swiglu")})
    model = Llama(CPU_CONFIG)
    model(tokens(2, 4), ops)
    L = CPU_CONFIG.n_layers
    assert calls == {"matmul": 4 * L + 1, "attention": 2 * L, "rmsnorm": 2 * L + 1,
                     "rope_": L, "swiglu": L}      # one rope_ rotates q and k together


def test_swapped_model_needs_only_index_and_add_from_pytorch():
    """Graded as lesson 06 grades it: the embedding lookup and residual adds are the only PyTorch
    arithmetic left; the reference kernels themselves are refused inside the guard."""
    model = Llama(CPU_CONFIG)
    with pytest.raises(grading.LibraryShortcut):
        grading.guarded_call(model, (tokens(1, 4),), allow=("index", "add"))   # torch ops
    with pytest.raises(grading.LibraryShortcut, match="reference"):
        grading.guarded_call(lambda t: model(t, llama_kernels.reference_ops()), (tokens(1, 4),),
                             allow=("index", "add"))


def test_rope_is_in_place_on_views():
    qkv = torch.randn(2, 5, 7, 16)
    before = qkv.clone()
    cos, sin = llama.rope_tables(8, 16)
    q = qkv[:, :, 1:4]
    out = llama_kernels.rope_(q, cos, sin)
    assert out is q
    assert torch.allclose(qkv[:, :, 1:4], llama.rope_torch(before[:, :, 1:4], cos[:5], sin[:5]),
                          atol=1e-6)
    assert torch.equal(qkv[:, :, :1], before[:, :, :1])
    assert torch.equal(qkv[:, :, 4:], before[:, :, 4:])
    # the PyTorch version is in place too
    x = before[:, :, 1:4].clone()
    assert llama.rope_torch_(x, cos[:5], sin[:5]) is x
    assert torch.allclose(x, qkv[:, :, 1:4], atol=1e-6)


def test_rope_is_a_rotation_by_relative_position():
    cos, sin = llama.rope_tables(12, 16, dtype=torch.float64)
    q = torch.randn(1, 1, 1, 16, dtype=torch.float64).expand(1, 12, 1, 16)
    k = torch.randn(1, 1, 1, 16, dtype=torch.float64).expand(1, 12, 1, 16)
    rq, rk = llama.rope_torch(q, cos, sin), llama.rope_torch(k, cos, sin)
    dots = (rq[0, :, 0] @ rk[0, :, 0].T)
    assert torch.allclose(dots[3, 1], dots[9, 7])
    assert torch.allclose(dots[5, 5], q[0, 0, 0] @ k[0, 0, 0])
    assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1))


def test_rmsnorm_epsilon_matters():
    x = torch.zeros(3, 40)
    x[1] = 1e-4 * torch.randn(40)
    w = torch.ones(40)
    y = llama_kernels.rmsnorm(x, w, 1e-5)
    assert torch.equal(y[0], torch.zeros(40))
    assert torch.allclose(y, llama.rmsnorm_torch(x, w, 1e-5), rtol=1e-4, atol=1e-7)
    no_eps = llama.rmsnorm_torch(x, w, 0.0)
    assert torch.isnan(no_eps[0]).all()                                     # 0 / 0
    assert check.relative_error(no_eps[1:2], y[1:2]) > 0.1                 # tiny rows: eps shows


def test_swiglu_is_silu_of_gate_times_up():
    h = torch.randn(4, 2 * 37)
    g, u = h[:, :37], h[:, 37:]
    assert torch.allclose(llama_kernels.swiglu(h), torch.nn.functional.silu(g) * u, atol=1e-6)


def test_attention_torch_takes_grouped_query_views():
    qkv = torch.randn(6, 4 + 2 + 2, 16, dtype=torch.float64)
    q = qkv[:, :4].view(6, 2, 2, 16).permute(1, 2, 0, 3)
    k = qkv[:, 4:6].permute(1, 0, 2)[:, None].expand(2, 2, 6, 16)
    v = qkv[:, 6:].permute(1, 0, 2)[:, None].expand(2, 2, 6, 16)
    assert k.stride(1) == 0
    from tilegym_edu.reference.attention import naive_attention
    assert check.relative_error(llama.attention_torch(q, k, v, True),
                                naive_attention(q, k.contiguous(), v.contiguous(), True)) < 1e-12


def test_profiled_ops_give_the_same_logits_inside_named_ranges():
    from torch.profiler import ProfilerActivity, profile
    model, t = Llama(CPU_CONFIG, torch.float32), tokens(1, 5)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        logits = model(t, llama_profile.profiled(TORCH_OPS))
    assert torch.equal(logits, model(t))
    counts = {name: sum(e.name == f"ops.{name}" for e in prof.events())
              for name in ("matmul", "attention", "rmsnorm", "rope_", "swiglu")}
    layers = CPU_CONFIG.n_layers
    assert counts == {"matmul": 4 * layers + 1, "attention": layers, "rmsnorm": 2 * layers + 1,
                      "rope_": layers, "swiglu": layers}


def test_decoding_with_the_kv_cache_gives_the_full_passes_logits():
    """A prompt, then a chunk of three, then one token at a time through the cache: each
    position's logits are those of one pass over the whole sequence."""
    model = Llama(CPU_CONFIG, torch.float64)
    t = tokens(2, 11, seed=4)
    full = model(t)
    cache = llama.KVCache(model, batch=2)
    pieces = [model(t[:, :5], cache=cache), model(t[:, 5:8], cache=cache)]
    pieces += [model(t[:, i:i + 1], cache=cache) for i in range(8, 11)]
    assert cache.length == 11
    assert check.relative_error(torch.cat(pieces, dim=1), full) < 1e-12


def test_generate_is_greedy_decoding():
    """generate (prefill, then one cached token at a time) picks what a full pass over the
    sequence so far would pick, token after token."""
    model = Llama(CPU_CONFIG, torch.float64)
    prompt = tokens(2, 5, seed=5)
    out = model.generate(prompt, new_tokens=6)
    assert out.shape == (2, 11) and torch.equal(out[:, :5], prompt)
    for n in range(5, 11):
        assert torch.equal(out[:, n], model(out[:, :n])[:, -1].argmax(dim=-1))


def test_decoding_on_the_reference_kernels_matches_pytorch():
    """The cached passes on the course's kernels (the general FlashAttention over the cache)."""
    model = Llama(CPU_CONFIG, torch.float32)
    t = tokens(1, 9, seed=6)
    ref = model.to(torch.float64, "cpu")(t.cpu())
    ops = llama_kernels.reference_ops()
    cache = llama.KVCache(model, batch=1)
    out = torch.cat([model(t[:, :6], ops, cache)]
                    + [model(t[:, i:i + 1], ops, cache) for i in range(6, 9)], dim=1)
    assert check.relative_error(out, ref) < 1e-4


def test_decoding_past_max_seq_or_with_another_batch_is_refused():
    model = Llama(CPU_CONFIG)
    with pytest.raises(ValueError, match="max_seq 32: ask for fewer"):
        model.generate(tokens(1, 30), new_tokens=3)
    cache = llama.KVCache(model, batch=2)
    with pytest.raises(ValueError, match="holds a batch of 2"):
        model(tokens(1, 3), cache=cache)


def test_a_repeatable_decode_step_does_the_same_step_each_call():
    model = Llama(CPU_CONFIG, torch.float64)
    t = tokens(2, 8, seed=7)
    step = llama.repeatable_decode_step(model, TORCH_OPS, t, context=6)
    first, again = step(), step()
    assert torch.equal(first, again)
    assert check.relative_error(first, model(t[:, :7])[:, -1:]) < 1e-12


def test_the_fused_residual_add_and_norm_matches_an_add_then_rmsnorm():
    generator = torch.Generator().manual_seed(8)
    for dtype, tolerance in ((torch.float32, 1e-6), (torch.float16, 2e-3)):
        x, delta = (torch.randn(5, 72, generator=generator).to(dtype) for _ in range(2))
        weight = torch.randn(72, generator=generator).to(dtype)
        total, y = llama_kernels.add_rmsnorm(x, delta, weight, 1e-5)
        assert torch.equal(total, x + delta)
        torch.testing.assert_close(y, llama.rmsnorm_torch(x + delta, weight, 1e-5),
                                   rtol=tolerance, atol=tolerance)
        assert llama.add_and_norm(TORCH_OPS, x, delta, weight, 1e-5)[0].equal(x + delta)
