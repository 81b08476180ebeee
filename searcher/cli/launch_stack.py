"""``fitplan launch`` with the stack: the plan is the user's choice, so a plan that needs a
package outside the stack is written all the same, with one line naming what to install."""

from __future__ import annotations

import argparse
import sys


def cmd_launch(args: argparse.Namespace) -> int:
    from searcher.cli.stack import needs_line, stack_line, stack_of
    from searcher.emitters.commands import check_emit_args
    from searcher.emitters.commands import cmd_launch as emit_launch
    from searcher.emitters.plan import load_plan
    from searcher.search.stack import framework_of, missing_for

    stack = stack_of(args)  # a bad --stack is refused before anything is read or written
    check_emit_args(args)
    plan = load_plan(args.plan, pick=args.pick, model=args.model, gpus_per_node=args.gpus_per_node)
    code = emit_launch(args)  # a refusal raises: its one line stays the only line
    framework = framework_of(args.emit)  # torchtune's QLoRA is torchao's NF4, not bitsandbytes
    line = needs_line(missing_for(plan.config, stack.packages, framework), "this plan", framework)
    if line:
        sys.stderr.write(f"fitplan: {stack_line(stack)}\nfitplan: {line}\n")
    return code
