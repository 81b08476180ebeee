"""``fitplan serve``: how many requests of what context fit, on how many GPUs, at what speed."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from constraints import limits as L
from searcher.validate import file_name, integer, number

SERVE_EXAMPLES = """\
examples:
  fitplan serve --model llama-3.1-8b --gpu h100-sxm --context 8192          # max concurrency
  fitplan serve --model llama-3.1-8b --gpu rtx-4090 --concurrency 16        # max context
  fitplan serve --model llama-3.1-70b --gpu h100-sxm --context 32768 --concurrency 32  # GPUs
  fitplan serve --model llama-2-7b --gpu a100-80gb --weights int4 --kv-cache-dtype fp8 --json
  fitplan serve --model llama-3.1-8b --gpu l4 --report serve.html
"""


def register(subparsers: Any) -> None:
    # no physics imported here: `fitplan --help` stays fast (the names are checked when it runs)
    p = subparsers.add_parser(
        "serve",
        help="a serving plan: weights + paged KV cache + prefill workspace, concurrency, speed",
        description=(
            "vLLM's memory accounting per GPU: gpu_memory_utilization × memory, less the weights, "
            "the activations of the largest prefill chunk, the CUDA context and graphs, is the "
            "KV cache, in blocks of --block-size tokens. Give --context for the most concurrent "
            "requests, --concurrency for the longest context, both for the tensor-parallel "
            "degree that holds them. Exit 0 = it fits, 1 = it does not, 2 = bad input."
        ),
        epilog=SERVE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="NAME|PATH",
        help="catalog id, config.json or Hub id (org/name)",
    )
    p.add_argument("--gpu", default="a100-80gb", help="catalog id or a size (default %(default)s)")
    p.add_argument(
        "--context", type=integer(L.SEQ_LEN), help="tokens per request (prompt + output)"
    )
    p.add_argument("--concurrency", type=integer(L.MICRO_BATCH), help="requests served at once")
    p.add_argument(
        "--tp",
        type=integer(L.PARALLEL_DEGREE),
        help="tensor-parallel degree (default 1, or the least that fits)",
    )
    p.add_argument(
        "--weights",
        default="bf16",
        help="weight format: bf16, fp16, fp8, int8, nf4, nf4-dq (bitsandbytes), int4 (AWQ/GPTQ "
        "group 128); default bf16",
    )
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        help="auto (the model's 16-bit), bf16, fp16, fp8, fp8_e4m3, fp8_e5m2, fp32",
    )
    p.add_argument(
        "--block-size",
        type=integer(L.KV_BLOCK),
        choices=L.KV_BLOCK_SIZES,
        metavar="TOKENS",
        help="KV block, tokens: 1, 8, 16, 32, 64, 128 or 256 (vLLM's; default 16)",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=number(L.GPU_MEMORY_UTILIZATION),
        default=0.9,
        help="fraction of the GPU the engine may use (vLLM semantics, default 0.9)",
    )
    p.add_argument(
        "--max-num-batched-tokens", type=integer(L.SEQ_LEN), help="largest prefill chunk"
    )
    p.add_argument(
        "--max-num-seqs", type=integer(L.MICRO_BATCH), help="most requests scheduled at once"
    )
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    p.add_argument(
        "--allow-long-context", action="store_true", help="allow --context beyond the model's"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--report", metavar="HTML", type=file_name, help="write a self-contained HTML page"
    )
    p.add_argument("--force", action="store_true", help="overwrite the --report file")
    p.set_defaults(handler="searcher.cli.serve:cmd_serve")


def cmd_serve(args: argparse.Namespace) -> int:
    from constraints.gpus import resolve_gpu
    from constraints.serving_plan import ServeRequest, check_request, plan_serving, serve_json

    if args.report:
        from searcher.report.page import check_page_path

        check_page_path(args.report, args.force)
    from searcher.hub import resolve_any_model  # a catalog name, a config.json or a Hub id

    spec = resolve_any_model(args.model)
    gpu = resolve_gpu(args.gpu)
    request = ServeRequest(
        context=args.context,
        concurrency=args.concurrency,
        tp=args.tp,
        weights=args.weights,
        kv_dtype=args.kv_cache_dtype,
        **({"block_size": args.block_size} if args.block_size is not None else {}),
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        cuda_graphs=not args.enforce_eager,
        allow_long_context=args.allow_long_context,
    )
    check_request(spec, request)
    plan = plan_serving(spec, gpu, request)
    if args.report:
        from searcher.report.serve import write_serve_page

        path = write_serve_page(plan, args.report, force=args.force)
        sys.stderr.write(f"page written to {path}\n")
    if args.json:
        sys.stdout.write(json.dumps(serve_json(plan), indent=2) + "\n")
    else:
        print_serve(plan)
    return 0 if plan.fits else 1


def print_serve(plan: Any) -> None:
    from rich.table import Table

    from constraints.units import GiB
    from searcher.terminal import console

    out = console()
    m, s = plan.memory, plan.speed
    r = plan.request
    gpus = f"{m.tp} × {plan.gpu.name}" if m.tp > 1 else plan.gpu.name
    out.print(
        f"[bold]{plan.spec.name}[/] on {gpus}: weights {r.weights}, KV {r.kv_dtype}, "
        f"blocks of {m.block_size} tokens, gpu_memory_utilization {r.gpu_memory_utilization:g}"
    )
    table = Table(title="memory per GPU", title_justify="left")
    table.add_column("term")
    table.add_column("GiB", justify="right")
    for name, v in (
        ("weights", m.weights),
        (f"prefill activations ({plan.max_num_batched_tokens} tokens)", m.activations),
        ("CUDA context", m.cuda_context),
        ("NCCL buffers", m.nccl),
        ("CUDA graphs", m.cuda_graphs),
        (f"KV cache ({m.kv_blocks:,} blocks = {m.kv_capacity_tokens:,} tokens)", m.kv_cache),
    ):
        if v:
            table.add_row(name, f"{v / GiB:.2f}")
    table.add_row(
        f"[bold]budget[/] ({r.gpu_memory_utilization:g} × {m.capacity / GiB:.1f})",
        f"[bold]{m.budget / GiB:.2f}[/]",
    )
    out.print(table)
    per_tok = m.kv_bytes_per_token
    out.print(
        f"KV per token {per_tok:,} B ({m.kv_bytes_per_token_per_gpu:,.0f} B per GPU); "
        f"per request of {plan.context:,} tokens {plan.kv_bytes_per_request / GiB:.3f} GiB"
    )
    mark = "[green]✓[/]" if plan.fits else "[red]✗[/]"
    if plan.question == "concurrency":
        out.print(
            f"{mark} [bold]max concurrency at {plan.context:,} tokens: {plan.max_concurrency}[/]"
        )
    elif plan.question == "context":
        out.print(
            f"{mark} [bold]max context at {plan.concurrency} requests: {plan.max_context:,} tokens[/]"
        )
    else:
        verdict = "fit" if plan.fits else "do not fit even"
        out.print(
            f"{mark} [bold]{plan.concurrency} requests × {plan.context:,} tokens {verdict} on "
            f"{m.tp} GPU{'s' if m.tp > 1 else ''}[/] (max concurrency there: {plan.max_concurrency})"
        )
    if s is not None:
        out.print(
            f"speed (roofline bound): prefill {s.prefill_tokens_per_s:,.0f} tokens/s "
            f"(first token after {s.time_to_first_token_s * 1e3:,.0f} ms at {s.context:,} tokens); "
            f"decode at {s.concurrency} requests: {s.decode_tokens_per_s_per_request:,.1f} "
            f"tokens/s each, {s.decode_tokens_per_s:,.0f} tokens/s in all "
            f"({s.decode_step_s * 1e3:.1f} ms per token)"
        )
    for n in plan.notes:
        out.print(f"[dim]note: {n}[/]")
