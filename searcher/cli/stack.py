"""``--stack`` on search / explain / launch / fits / max / fleet / check: which optional
packages the plan may use. The flag and its parsing live here only.

Default: what is importable in this Python (found with ``importlib.util.find_spec``, nothing
imported), said in one line. ``--stack flash-attn,bitsandbytes`` names the set for another
machine; ``--stack all`` plans for a machine with every one, ``--stack none`` for plain torch +
transformers. The table of packages and the knobs needing them: searcher/search/stack.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING

from searcher.search.stack import (
    ALL,
    HF,
    KNOWN_PACKAGES,
    NONE,
    Stack,
    resolve_stack,
)

if TYPE_CHECKING:
    from rich.console import Console


def add_stack_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument(
        "--stack",
        metavar="PKGS",
        help=f"optional packages the plan may use, comma-separated: {', '.join(KNOWN_PACKAGES)}; "
        f"or {NONE} / {ALL} (default: what is importable here)",
    )


def add_versions_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--transformers VERSION`` and ``--bitsandbytes VERSION`` on explain / search: the
    releases whose defaults the plan takes."""
    p.add_argument(
        "--transformers",
        metavar="VERSION",
        help="the transformers release the run uses, e.g. 4.46.3 (default: the installed one, "
        "else 5.25.0): its loss code and load dtype",
    )
    p.add_argument(
        "--bitsandbytes",
        metavar="VERSION",
        help="the bitsandbytes release a QLoRA run uses, e.g. 0.42.0 (default: the installed one, "
        "else 0.50.2): before 0.43.2 each 4-bit linear keeps its input for the backward",
    )


def stack_of(args: argparse.Namespace) -> Stack:
    """The stack the command plans for: ``--stack`` parsed (a bad name exits 2 through the
    FitplanError handler, before any work), else what is importable here."""
    return resolve_stack(getattr(args, "stack", None))


def stack_line(stack: Stack) -> str:
    """One line: the optional packages planned with, and where that set came from."""
    has = ", ".join(p for p in KNOWN_PACKAGES if p in stack.packages) or "none"
    if stack.source == "detected":
        return f"stack: {has} (importable here; --stack PKGS plans for another machine)"
    return f"stack: {has} (--stack)"


def install_hint(packages: Iterable[str], framework: str = HF) -> str:
    """``pip install name==version …``: the releases the launch files of ``framework`` are
    written for (searcher/emitters/data/versions.json) where fitplan pins one."""
    from searcher.emitters.versions import released_versions

    pins = {**released_versions(HF), **released_versions(framework)}
    return "pip install " + " ".join(f"{p}=={pins[p]}" if p in pins else p for p in packages)


def needs_line(missing: Iterable[str], what: str, framework: str = HF) -> str | None:
    """One line saying what ``what`` needs beyond the stack and how to install it (None: nothing)."""
    missing = tuple(missing)
    if not missing:
        return None
    hint = install_hint(missing, framework)
    return f"{what} needs {', '.join(missing)}, not in the stack: {hint}"


def print_stack_line(stack: Stack, out: Console | None = None) -> None:
    """The stack line above a search's or an explanation's screen."""
    from searcher.terminal import console

    (out or console()).print(f"[dim]{stack_line(stack)}[/]")


def print_marked(
    marks: tuple[tuple[str, ...], ...], pick: int, out: Console, framework: str = HF
) -> None:
    """Under the front: what the marked members need, and whether the pick runs with the stack."""
    needed = [p for p in KNOWN_PACKAGES if any(p in m for m in marks)]
    out.print(
        "[yellow]✗ needs: plans outside the stack, shown for comparison, not picked by default; "
        f"to run them: {install_hint(needed, framework)} (or --stack to name the target's "
        "packages)[/]"
    )
    if all(marks):
        out.print("[yellow]no plan on the front runs with this stack[/]")
    elif pick <= len(marks) and marks[pick - 1]:
        out.print(
            f"[yellow]front member {pick} needs {', '.join(marks[pick - 1])}, outside the stack[/]"
        )


def print_assumed(assumed: list[str]) -> None:
    """One line: the defaults the plan took from the stack rather than from the flags."""
    if assumed:
        from searcher.terminal import console

        console().print(f"[dim]assumed: {'; '.join(assumed)}[/]")
