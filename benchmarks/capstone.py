"""Lesson 06's measurements on a GPU, float16:

* the three fused kernels (RMSNorm, in-place rotary, SwiGLU) on the graded cells' problems, in
  GB/s against a device-to-device copy of the same bytes, PyTorch eager and torch.compile;
* the MLP's up-projection and SwiGLU at the prefill's shape: the matmul with SwiGLU in its
  epilogue (reference/fused_matmul.py) against shape_matmul then the SwiGLU kernel, and
  cuBLAS then torch.compile's SwiGLU (what the compiled model runs);
* the Llama-style model (GPU_CONFIG) running a prefill on PyTorch eager, torch.compile, the
  lessons' kernels (the solutions' ops: lesson 03's pipelined matmul, lesson 04's attention)
  and the course's reference kernels (matmuls by shape_matmul, every path raced per shape, the
  MLP's SwiGLU in its matmul's epilogue, flash.py's forward tuned over FLASH_ORDER_SPACE, its
  programs longest first where that wins): tokens/s as plain
  calls and as CUDA-graph replays (the GPU's work alone), the logits' error against the model
  in float32, and each version's GPU time split by operation (torch.profiler);
* the same model decoding: one step of one new token per sequence over a KV cache of a given
  length, each version replayed as a CUDA graph (as serving engines run decoding, so that the
  GPU's work is timed and not Python's), in tokens/s, the logits' error against float32, and
  where a step's GPU time goes (by operation, and each version's kernels).

Prints tables; writes JSON with --out, after each part and case (a run cut short keeps what it
measured). --parts picks what runs (all four by default).

    python benchmarks/capstone.py --out capstone.json
    python benchmarks/capstone.py --parts decode
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import dataclasses
import math

import torch
from torch.profiler import ProfilerActivity, profile

from tilegym_edu import bench, device, tune
from tilegym_edu.reference import (flash_decode, fused_matmul, llama, llama_kernels, pipelined,
                                   split_k)
from tilegym_edu.reference.llama_profile import gpu_ms_by_op, profiled

from record import finish, header, options, write

ROWS, DIM = 16384, 4096              # rmsnorm's and swiglu's graded problem
ROPE_SHAPE = (1, 8192, 32, 128)      # rope_'s: q of a prefill, a view into a wider tensor
PROMPTS = [(1, 2048), (4, 2048)]     # (batch, seq) prefills; the first is the graded one
DECODES = [(1, 512), (1, 2040), (16, 2040)]   # (batch, tokens already in the cache)
MLP_ROWS = 4 * 2048                  # the up-projection's rows at the batch-4 prefill


def fused_kernels() -> dict:
    """GB/s of each fused kernel, PyTorch eager and torch.compile, and a copy of as many bytes."""
    torch.manual_seed(0)
    x = torch.randn(ROWS, DIM, device="cuda", dtype=torch.float16)
    w = (1 + 0.1 * torch.randn(DIM, device="cuda")).half()
    B, S, H, D = ROPE_SHAPE
    q = torch.randn(B, S, H + 3, D, device="cuda", dtype=torch.float16)[:, :, 1:H + 1]
    cos, sin = llama.rope_tables(S, D, device_="cuda")
    h = 3 * torch.randn(ROWS, 2 * DIM, device="cuda", dtype=torch.float16)
    compiled = {name: torch.compile(fn) for name, fn in
                (("rmsnorm", llama.rmsnorm_torch), ("rope_", llama.rope_torch_),
                 ("swiglu", llama.swiglu_torch))}
    problems = {
        "rmsnorm": (2 * x.nbytes, lambda: llama_kernels.rmsnorm(x, w, 1e-5),
                    lambda: llama.rmsnorm_torch(x, w, 1e-5),
                    lambda: compiled["rmsnorm"](x, w, 1e-5)),
        "rope_": (2 * q.numel() * q.element_size(), lambda: llama_kernels.rope_(q, cos, sin),
                  lambda: llama.rope_torch_(q, cos, sin), lambda: compiled["rope_"](q, cos, sin)),
        "swiglu": (h.nbytes + h.nbytes // 2, lambda: llama_kernels.swiglu(h),
                   lambda: llama.swiglu_torch(h), lambda: compiled["swiglu"](h)),
    }
    record = {}
    for name, (nbytes, kernel, eager, compiled_fn) in problems.items():
        results = bench.compare({"kernel": kernel, "PyTorch eager": eager,
                                 "torch.compile": compiled_fn, "copy": bench.device_copy(nbytes)},
                                bytes=nbytes, rep_ms=1000)
        print(f"== {name}: {nbytes / 1e6:.0f} MB moved")
        bench.print_table(results, baseline="copy")
        copy = next(m for m in results if m.name == "copy")
        record[name] = {"bytes": nbytes, "results": {
            m.name: {"median_ms": m.median_ms, "gbs": m.gbs, "of_copy": m.gbs / copy.gbs,
                     "runs": m.runs, "cuda_graph": m.cuda_graph} for m in results}}
    return record


def mlp_up() -> dict:
    """swiglu(h @ w13) at the prefill's shape (MLP_ROWS, GPU_CONFIG's dim and hidden), float16:
    fused, unfused on the course's kernels, and as the compiled model runs it; time, TFLOP/s of
    the matmul, error against float32."""
    cfg = llama.GPU_CONFIG
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(MLP_ROWS, cfg.dim, generator=generator).to("cuda", torch.float16)
    w13 = (torch.randn(cfg.dim, 2 * cfg.hidden, generator=generator)
           / cfg.dim ** 0.5).to("cuda", torch.float16)
    compiled_swiglu = torch.compile(llama.swiglu_torch)
    versions = {"fused (matmul_swiglu), tuned": lambda: fused_matmul.matmul_swiglu(h, w13),
                "shape_matmul, then swiglu": lambda: llama_kernels.swiglu(
                    split_k.shape_matmul(h, w13)),
                "cuBLAS, then torch.compile's swiglu": lambda: compiled_swiglu(h @ w13)}
    for config in fused_matmul.SWIGLU_SPACE.configs(1):          # each candidate on its own
        label = (f"fused {config['BLOCK_M']}x{config['BLOCK_N']}x{config['BLOCK_K']} "
                 f"{config['num_warps']}w {config['num_stages']}s split {config['EPILOGUE_SPLIT']}"
                 f"{' flat' if config['FLATTEN'] else ''}")
        versions[label] = lambda c=dict(config): fused_matmul.matmul_swiglu(h, w13, c)
    expected = llama.swiglu_torch(h.float() @ w13.float())
    errors = {name: ((run().float() - expected).norm() / expected.norm()).item()
              for name, run in versions.items()}
    results = bench.compare(versions, flops=2 * MLP_ROWS * cfg.dim * 2 * cfg.hidden, rep_ms=1000)
    print(f"== MLP up-projection and SwiGLU, {MLP_ROWS} x {cfg.dim} @ {cfg.dim} x {2 * cfg.hidden}")
    bench.print_table(results, baseline="cuBLAS, then torch.compile's swiglu")
    return {"shape": [MLP_ROWS, cfg.dim, 2 * cfg.hidden], "rel_error_vs_float32": errors,
            "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "runs": m.runs,
                                 "cuda_graph": m.cuda_graph, "sm_clock_mhz": m.sm_clock_mhz}
                        for m in results}}


def kernel_table(run, repeats: int = 3, rows: int = 8) -> str:
    """torch.profiler's table of the GPU kernels run() launches, most time first."""
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            run()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="device_time_total", row_limit=rows,
                                     max_name_column_width=60)


def lesson_ops(kernels: llama.Ops) -> llama.Ops:
    """``kernels`` with the lessons' own kernels where the reference has others, as the lessons'
    solutions run the model: lesson 03's tuned pipelined matmul (the reference races every
    matmul path per shape) and the MLP's matmul then SwiGLU (the reference fuses them)."""
    return dataclasses.replace(kernels, matmul=pipelined.tuned_matmul, matmul_swiglu=None)


def prefill(batch: int, seq: int) -> dict:
    """The model's prefill of batch x seq tokens on eager, torch.compile and the reference
    kernels: time, tokens/s, error against float32, GPU time by operation."""
    cfg = llama.GPU_CONFIG
    model = llama.Llama(cfg, torch.float16, "cuda")
    tokens = llama.random_tokens(cfg, batch, seq, torch.Generator().manual_seed(0))
    kernels = llama_kernels.reference_ops(small_blocks=False)
    lesson = lesson_ops(kernels)
    model(tokens, kernels)                                # tune the matmuls and attention first
    model(tokens, lesson)
    compiled = torch.compile(lambda t: model(t))
    compiled(tokens)
    versions = {"PyTorch eager": lambda: model(tokens), "torch.compile": lambda: compiled(tokens),
                "lesson kernels": lambda: model(tokens, lesson),
                "reference kernels": lambda: model(tokens, kernels)}
    expected = model.to(torch.float32)(tokens).float()
    errors = {name: ((run().float() - expected).norm() / expected.norm()).item()
              for name, run in versions.items()}
    del expected
    flops = 2 * batch * seq * (model.parameters() - cfg.vocab * cfg.dim)   # embedding: a lookup
    results = bench.compare(versions, flops=flops, graph_below_ms=0, rep_ms=3000)
    print(f"== prefill, batch {batch} x {seq} tokens, {model.parameters() / 1e6:.0f} M parameters")
    bench.print_table(results, baseline="PyTorch eager")
    # the same replayed from CUDA graphs: the GPU's work alone, without the host's launches
    graphs = bench.compare(versions, flops=flops, graph_below_ms=math.inf, rep_ms=3000)
    print(f"== prefill, batch {batch} x {seq} tokens, as CUDA graphs")
    bench.print_table(graphs, baseline="PyTorch eager")
    by_op = {"PyTorch eager": gpu_ms_by_op(lambda: model(tokens, profiled(llama.TORCH_OPS))),
             "reference kernels": gpu_ms_by_op(lambda: model(tokens, profiled(kernels)))}
    for name, split in by_op.items():
        print(f"{name}: GPU ms by operation " + ", ".join(f"{k} {v:.3f}" for k, v in split.items()))
    tables = {name: kernel_table(run) for name, run in versions.items()}
    for name, table in tables.items():
        print(f"-- {name}: kernels, 3 prefills\n{table}")
    return {"batch": batch, "seq": seq, "parameters": model.parameters(), "flops": flops,
            "rel_error_vs_float32": errors, "gpu_ms_by_op": by_op, "kernel_tables": tables,
            **{key: {m.name: {"median_ms": m.median_ms,
                              "tokens_per_s": batch * seq / m.median_ms * 1e3,
                              "tflops": m.tflops, "runs": m.runs, "cuda_graph": m.cuda_graph,
                              "sm_clock_mhz": m.sm_clock_mhz} for m in timed}
               for key, timed in (("results", results), ("results_cuda_graphs", graphs))}}


def decode_picks(model: llama.Llama, batch: int, context: int) -> dict:
    """What the tuner picked for the reference kernels' decoding step at this batch and cache
    length, read back from its cache (the step has run): shape_matmul's path and configuration
    for each of a layer's products and the output's (M x N x K), flash decoding's
    configuration. A step that got slower says here whether its kernels were picked anew. On a
    GPU each must be a cache hit: a problem the step did not run raises (a race here would
    report a pick the step never ran)."""
    cfg, layer = model.cfg, model.layers[0]

    def ran(result: tune.TuneResult, name: str) -> dict:
        if device.ON_GPU and not result.from_cache:
            raise RuntimeError(f"decode_picks: the tuner had no result for {name}: the decoding "
                               "step did not run that problem (have its shapes changed?)")
        return dict(result.config)
    picks = {}
    for name, w in (("qkv", layer["wqkv"]), ("o", layer["wo"]), ("gate and up", layer["w13"]),
                    ("down", layer["w2"]), ("output", model.output)):
        rows = torch.empty(batch, w.shape[0], device=w.device, dtype=w.dtype)
        name = f"{name} {batch} x {w.shape[1]} x {w.shape[0]}"
        picks[name] = ran(split_k.tune_shape_matmul(rows, w), name)
    q = torch.empty(batch, cfg.n_heads, 1, cfg.head_dim, device=model.output.device,
                    dtype=model.dtype)
    k = q.new_empty(batch, cfg.n_kv_heads, context + 1, cfg.head_dim)
    lse = q.new_empty(q.shape[:3], dtype=torch.float32)
    name = "attention over the cache"
    picks[name] = ran(flash_decode.tune_flash_decode(q, k, k, torch.empty_like(q), lse,
                                                     causal=True), name)
    return picks


def decode(batch: int, context: int, cfg: llama.LlamaConfig = llama.GPU_CONFIG,
           dtype: torch.dtype = torch.float16) -> dict:
    """One decoding step (a token per sequence after ``context`` cached ones) on eager,
    torch.compile and the reference kernels: time per step, tokens/s, error against float32,
    the tuner's picks for the reference kernels (decode_picks), GPU time by operation and
    each version's kernels."""
    model = llama.Llama(cfg, dtype)
    prompt = llama.random_tokens(cfg, batch, context + 1, torch.Generator().manual_seed(1))
    kernels = llama_kernels.reference_ops()
    versions = {"PyTorch eager": llama.repeatable_decode_step(model, llama.TORCH_OPS, prompt,
                                                              context),
                "torch.compile": llama.repeatable_decode_step(model, llama.TORCH_OPS, prompt,
                                                              context,
                                                              torch.compile(model.forward)),
                "lesson kernels": llama.repeatable_decode_step(model, lesson_ops(kernels),
                                                               prompt, context),
                "reference kernels": llama.repeatable_decode_step(model, kernels, prompt,
                                                                  context)}
    expected = model.to(torch.float32)(prompt)[:, -1:].float()
    errors = {name: ((run().float() - expected).norm() / expected.norm()).item()
              for name, run in versions.items()}
    picks = decode_picks(model, batch, context)
    results = bench.compare(versions, graph_below_ms=math.inf, rep_ms=2000)
    print(f"== decode, batch {batch}, one new token after {context} cached")
    bench.print_table(results, baseline="PyTorch eager")
    for name, config in picks.items():
        print(f"reference kernels' {name}: {config}")
    by_op = {name: gpu_ms_by_op(llama.repeatable_decode_step(model, profiled(ops), prompt,
                                                             context))
             for name, ops in (("PyTorch eager", llama.TORCH_OPS), ("reference kernels", kernels))}
    for name, split in by_op.items():
        print(f"{name}: GPU ms by operation " + ", ".join(f"{k} {v:.3f}" for k, v in split.items()))
    tables = {name: kernel_table(run, rows=14) for name, run in versions.items()}
    for name, table in tables.items():
        print(f"-- {name}: kernels, 3 steps\n{table}")
    return {"batch": batch, "context": context, "rel_error_vs_float32": errors,
            "tuned_configs": picks, "gpu_ms_by_op": by_op, "kernel_tables": tables,
            "results": {m.name: {"median_ms": m.median_ms,
                                 "tokens_per_s": batch / m.median_ms * 1e3, "runs": m.runs,
                                 "cuda_graph": m.cuda_graph, "sm_clock_mhz": m.sm_clock_mhz}
                        for m in results}}


#: what --parts can pick, in the order they run
PARTS = ("fused", "mlp", "prefill", "decode")


def measure(record: dict, out, parts=PARTS) -> None:
    """The ``parts`` (of PARTS) into ``record``, written to ``out`` after each part, prompt and
    decoding case: a run cut short keeps what it measured."""
    if "fused" in parts:
        record["fused_kernels"] = fused_kernels()
        write(record, out)
    if "mlp" in parts:
        record["mlp_up"] = mlp_up()
        write(record, out)
    for part, cases, run in (("prefill", PROMPTS, prefill), ("decode", DECODES, decode)):
        if part in parts:
            record[part] = []
            for case in cases:
                record[part].append(run(*case))
                write(record, out)


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--parts", nargs="*", default=list(PARTS), choices=PARTS)
    args = parser.parse_args()
    record = header()
    measure(record, args.out, args.parts)
    finish(record, args.out)


if __name__ == "__main__":
    main()
