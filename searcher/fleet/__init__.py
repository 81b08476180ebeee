"""Capacity planning across GPU fleets.

A fleet file (:mod:`.schema`; read and resolved by :mod:`.fleet_file`, errors naming the line via
:mod:`.yaml_lines`) names pools of GPUs and training jobs. For every (job, pool) pair the
exhaustive search runs over the pool's whole nodes (:mod:`.options`), giving per GPU count the
fastest configuration that fits, its time and cost for the job's token budget; :mod:`.placement`
assigns jobs to pools at the least total cost with an exact solver; :mod:`.plan` ties it together
(capacity matrix, placement, totals); :mod:`.render` and :mod:`.report` present it, and
:mod:`searcher.cli.fleet` is the command.
"""
