"""Run 70 (H100, 2026-12-06, the tree of 7a02a8d; its log h100-2026-12-06-gpu-run-70-head-
groups.log): the persistent grid's head groups (tile_schedule.balanced with most_heads, the keys
and values the programs read at once inside half the L2) against one group (every tile dealt
at once, the schedule before), on issue 18's causal rows: the ws kernel launched with each
schedule, persistent (two q buffers where they fit) and persistent_q_once, with the one tile
a program schedule and cuDNN, interleaved, best median of three rounds, every output checked."""
import math

import tilegym_edu  # noqa: F401
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilegym_edu import bench
from tilegym_edu.reference import flash_hopper as fh, tile_schedule

ROWS = [(4, 32, 32, 4096, 128, torch.float16), (4, 32, 32, 4096, 128, torch.bfloat16),
        (4, 32, 8, 4096, 128, torch.float16), (8, 16, 16, 2048, 64, torch.float16),
        (1, 16, 16, 16384, 128, torch.float16)]


def ws_launch(q, k, v, o, lse, order, starts, programs, q_once):
    block_m = block_n = 128
    stages = 2
    batch, heads, seq_q, head_dim = q.shape
    args = (lse, o.stride(0), o.stride(1), o.stride(2), heads, heads // k.shape[1], seq_q,
            k.shape[2], fh.LOG2E / math.sqrt(head_dim))
    n_tiles = batch * heads * (seq_q // block_m)
    q_count = 1 if q_once else fh.q_buffers(programs < n_tiles, True, block_m, block_n, stages,
                                            head_dim)
    rows = fh.CONSUMER_ROWS.value
    o_desc = (fh.rows_descriptor(o, rows) if fh.o_by_tma(o, q_count, block_m, block_n, stages)
              else None)
    descs = (fh.rows_descriptor(q, rows), fh.rows_descriptor(k, block_n),
             fh.rows_descriptor(v, block_n))

    def run():
        fh.hopper_flash_ws_kernel[(programs,)](*descs, o, o_desc, *args, order, starts,
                                               PARTIAL=False, Q_BUFFERS=q_count,
                                               HEAD_DIM=head_dim, BLOCK_M=block_m,
                                               BLOCK_N=block_n, STAGES=stages, CAUSAL=True,
                                               num_warps=4)
        return o
    return run, q_count, o_desc is not None


for b, h, hkv, s, d, dtype in ROWS:
    torch.manual_seed(0)
    q = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=dtype) for _ in range(2))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n_m = s // 128
    blocks = tile_schedule.key_blocks(n_m, s, s, 128, 128, True)
    most = fh.heads_in_half_l2(k, h)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=h != hkv)
    fns, outs = {}, {}
    for label, most_heads in (("one group", None), (f"groups<={most}", most)):
        order, starts = (t.cuda() for t in tile_schedule.balanced(b * h, blocks, sms,
                                                                   most_heads=most_heads))
        for q_once in (False, True):
            o = torch.empty_like(q)
            lse = q.new_empty(q.shape[:3], dtype=torch.float32)
            run, q_count, by_tma = ws_launch(q, k, v, o, lse, order, starts, sms, q_once)
            name = f"{'q_once' if q_once else 'persistent'} {label} (q{q_count}{' tma' if by_tma else ''})"
            fns[name] = run
    o1 = torch.empty_like(q)
    lse1 = q.new_empty(q.shape[:3], dtype=torch.float32)
    fns["specialised (one tile a program)"] = (
        lambda o1=o1, lse1=lse1: (fh.launch_hopper_flash(q, k, v, o1, lse1, True,
                                                          (128, 128, 2, "specialised")), o1)[1])

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=h != hkv)
    fns["cuDNN"] = cudnn
    for name, fn in fns.items():
        err = ((fn().float() - expected.float()).norm() / expected.float().norm()).item()
        assert err < 1e-2, (name, err)
    print(f"== B{b} H{h}/KV{hkv} S{s} D{d} causal {dtype}; heads_in_half_l2 {most}, "
          f"groups {len(tile_schedule.head_groups(b * h, n_m, sms, most))}")
    results = bench.compare_best(fns, rep_ms=150)
    cudnn_ms = next(m.median_ms for m in results if m.name == "cuDNN")
    for m in sorted(results, key=lambda m: m.median_ms):
        print(f"{m.name:44s} {m.median_ms:.4f} ms  p20-p80 {m.p20_ms:.4f}-{m.p80_ms:.4f}  "
              f"runs {m.runs}  clock {m.sm_clock_mhz}  vs cuDNN {cudnn_ms / m.median_ms:.3f}x")
