"""--emit torchrun: the hf script and launch_torchrun.sh, the torchrun command line for it
(nproc_per_node, nnodes, rendezvous for several nodes)."""

from __future__ import annotations

from searcher.emitters.base import Emission, EmitOptions, EmittedFile
from searcher.emitters.common import alloc_conf_export, model_config_file, out_path, plan_file
from searcher.emitters.hf_script import (
    ds_json_text,
    hf_requirements_file,
    render_train_py,
    smoke_command,
)
from searcher.emitters.hf_settings import HF_BACKENDS, HF_KNOBS, hf_settings
from searcher.emitters.plan import Plan

KNOBS = {**HF_KNOBS, "dp": "torchrun --nproc_per_node × --nnodes = dp processes"}


class TorchrunEmitter:
    name = "torchrun"
    summary = "launch_torchrun.sh: torchrun --nproc_per_node/--nnodes for the hf script (train.py)"
    knobs = KNOBS
    backends = HF_BACKENDS

    def emit(self, plan: Plan, options: EmitOptions) -> Emission:
        s = hf_settings(plan, options, self.name)
        script = out_path(options, "train.py")
        here = '"$(dirname "$0")/train.py"'
        if plan.nodes == 1:
            run = f'exec torchrun --standalone --nproc_per_node {plan.procs_per_node} {here} "$@"'
            env = ""
        else:
            run = (
                f"exec torchrun --nnodes {plan.nodes} --nproc_per_node {plan.procs_per_node} "
                '--node_rank "$NODE_RANK" --master_addr "$MASTER_ADDR" --master_port "${MASTER_PORT:-29500}" '
                f'{here} "$@"'
            )
            env = (
                f"# run on each of the {plan.nodes} nodes with NODE_RANK=0..{plan.nodes - 1} and\n"
                "# MASTER_ADDR=<the address of node 0>\n"
                ': "${NODE_RANK:?set NODE_RANK}" "${MASTER_ADDR:?set MASTER_ADDR}"\n'
            )
        launch = out_path(options, "launch_torchrun.sh")
        command = (
            f"bash {launch}"
            if plan.nodes == 1
            else f"NODE_RANK=0 MASTER_ADDR=<node-0 address> bash {launch}"
        )
        sh = (
            "#!/usr/bin/env bash\n"
            f"# fitplan plan, --emit torchrun: {plan.gpus} GPU(s) = {plan.nodes} node(s) x "
            f"{plan.procs_per_node} processes (dp {plan.config.dp}).\n"
            "# Extra arguments go to train.py, e.g. --max-steps 10.\n"
            "set -euo pipefail\n"
            + env
            + "".join(f"{x}\n" for x in alloc_conf_export(plan))
            + run
            + "\n"
        )
        files = [
            EmittedFile("train.py", render_train_py(plan, s, fmt=self.name, launch=command), True),
            EmittedFile("launch_torchrun.sh", sh, True),
        ]
        if s.ds_config is not None:
            files.append(EmittedFile("ds_config.json", ds_json_text(s.ds_config)))
        files.extend(model_config_file(plan))
        files.append(hf_requirements_file(s))
        files.append(plan_file(plan))
        notes = (f"torchrun runs {script} with {plan.procs_per_node} process(es) per node",)
        return Emission(self.name, tuple(files), command, notes, smoke=smoke_command(command))


EMITTER = TorchrunEmitter()
