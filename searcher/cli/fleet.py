"""``fitplan fleet FILE``: the sub-command's arguments and its handler. Imports stay light here;
the planner loads only when the command runs."""

from __future__ import annotations

import argparse
from typing import Any

from constraints import limits as L
from constraints.errors import FitplanError
from searcher.validate import file_name, integer

FLEET_EXAMPLES = """\
examples:
  fitplan fleet scenarios/fleet-example.yaml
  fitplan fleet fleet.yaml --json > plan.json
  fitplan fleet fleet.yaml --report report.html     # needs: pip install 'fitplan[report]'
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "fleet",
        help="plan training jobs across GPU pools: capacity matrix, placement, cost",
        description=(
            "Search every job on every pool (multi-node: TP inside a node, PP and DP across), "
            "then place the jobs on the pools at the least total cost with an exact solver. "
            "Exit code 0 = every job placed, 1 = some job is not, 2 = bad input."
        ),
        epilog=FLEET_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="fleet YAML: pools and jobs")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    p.add_argument(
        "--report",
        metavar="HTML",
        type=file_name,
        help="write a self-contained HTML report with charts",
    )
    p.add_argument("--force", action="store_true", help="overwrite the --report file if it exists")
    p.add_argument(
        "--solver",
        default="milp",
        choices=["milp", "exhaustive"],
        help="milp (default: HiGHS, exact) or exhaustive (branch and bound, small fleets)",
    )
    p.add_argument(
        "--workers",
        type=integer(L.WORKERS),
        default=None,
        help="processes for the searches (default 1: measured faster on a loaded machine)",
    )
    from searcher.cli.stack import add_stack_arg

    add_stack_arg(p)
    p.set_defaults(handler="searcher.cli.fleet:cmd_fleet")


def cmd_fleet(args: argparse.Namespace) -> int:
    import json
    import sys
    from dataclasses import replace

    from searcher.cli.stack import stack_of
    from searcher.fleet.fleet_file import load_fleet
    from searcher.fleet.plan import plan_fleet, plan_json
    from searcher.terminal import progress_reporter

    if args.workers is not None and args.workers < 1:
        raise FitplanError(f"--workers must be at least 1, got {args.workers}")
    if args.force and not args.report:
        raise FitplanError("--force does nothing without --report (nothing else is written)")
    if args.report:
        from searcher.fleet.report import check_report_path, require_matplotlib

        require_matplotlib()
        check_report_path(args.report, force=args.force)
    stack = stack_of(args)  # a bad --stack is refused before the file is read
    fleet = load_fleet(args.file)
    # every job's plans keep to the stack: unpinned knobs narrowed, pins kept (and marked)
    fleet = replace(fleet, jobs=tuple(replace(j, stack=stack.packages) for j in fleet.jobs))
    with progress_reporter("searching job × pool") as progress:
        plan = plan_fleet(
            fleet,
            solver=args.solver,
            workers=args.workers,
            progress=progress,
            fronts=bool(args.report),
        )
    if args.report:
        from searcher.fleet.report import write_report

        path = write_report(plan, args.report, force=args.force)
        sys.stderr.write(f"report written to {path}\n")
    if args.json:
        sys.stdout.write(json.dumps(plan_json(plan), indent=2, default=str) + "\n")
    else:
        from searcher.cli.stack import needs_line, print_stack_line
        from searcher.fleet.render import print_plan
        from searcher.search.stack import missing_for
        from searcher.terminal import console

        print_stack_line(stack)
        print_plan(plan)
        needed = {
            p for x in plan.placed for p in missing_for(x.option.member.config, stack.packages)
        }
        line = needs_line([p for p in stack.missing if p in needed], "a placed job")
        if line:
            console().print(f"[yellow]{line}[/]")
    return 0 if not plan.unplaced else 1
