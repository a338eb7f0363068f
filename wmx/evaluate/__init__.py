"""Policy evaluation and reports (the `evaluate` command; docs/evaluation.md).

rollout: the jitted eval_mode rollout shared with the trainers; runs: opening
and restoring a run; aggregates: normalised scores and bootstrap aggregates;
lineage: a dataset's source episode sets and their agents' final returns;
report / compare / plots: the report files; reference_curves: published
curves; cli: the command.
"""
