"""The trace commands' own flags (``explain --exact``, ``trace-step``): how deep to trace and the
caching allocator the trace replays."""

from __future__ import annotations

import argparse


def _max_split_size_mb(text: str) -> int:
    """PYTORCH_CUDA_ALLOC_CONF's max_split_size_mb: torch refuses 20 or less."""
    if not text.isdigit() or int(text) <= 20:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a whole number of MiB above 20, e.g. 512 (torch refuses 20 or less)"
        )
    return int(text)


def max_split_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-split-size-mb",
        type=_max_split_size_mb,
        default=None,
        metavar="MB",
        help="the traced step's caching allocator with PYTORCH_CUDA_ALLOC_CONF="
        "max_split_size_mb:MB (cached blocks this large are not split for smaller requests)",
    )


def depth_args(p: argparse.ArgumentParser) -> None:
    depth = p.add_mutually_exclusive_group()
    depth.add_argument(
        "--full-depth",
        action="store_true",
        help="trace and replay every layer (the default)",
    )
    depth.add_argument(
        "--fast",
        action="store_true",
        help="trace 3 and 4 layers and extrapolate: the allocated peak exactly, the reserved "
        "peak with the 4-layer replay's slack (within about 7 %% of every layer replayed)",
    )
