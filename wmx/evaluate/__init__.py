"""Policy evaluation and reports (the `evaluate` command; docs/evaluation.md).

rollout: the jitted eval_mode rollout shared with the trainers; runs: opening
and restoring a run; aggregates: normalised scores and bootstrap aggregates;
lineage: a dataset's source episode sets and their agents' final returns;
report / compare / plots: the report files; reference_curves: published
curves; random_policy: the uniform-random policy's return per task
(the committed mt19 table) and the learned-source rule; video: rendering
recorded episodes and MP4 encoding (--video); gl_backend: MuJoCo's OpenGL
backend; video_loggers: videos to TensorBoard / W&B; cli: the command.
"""
