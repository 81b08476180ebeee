"""Capacity planning across GPU fleets.

A fleet file (:mod:`searcher.fleet.schema`) names pools of GPUs and training jobs. For every
(job, pool) pair the exhaustive search runs over the pool's whole nodes (:mod:`.options`), giving
per GPU count the fastest configuration that fits, its time and cost for the job's token budget;
:mod:`.placement` assigns jobs to pools at the least total cost with an exact solver;
:mod:`.plan` ties it together (capacity matrix, placement, totals); :mod:`.render`,
:mod:`.report` and :mod:`.cli` present it.
"""
