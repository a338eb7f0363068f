"""`profile_step`'s components: for each (agent, program) the rules that put an op in a
part of the program (the planner, the env step, the update's world model...) by the name
scopes in its JAX name stack; `_profile_analysis` applies them.
"""
from __future__ import annotations


def _scope(*names: str) -> str:
    """A regex finding any of the name scopes ``names`` as a whole element of a name stack:
    ``.../acting/...``, or wrapped by a transform (``jvp(world_model)``, ``vmap(mppi)``)."""
    return r"(?:^|[/(])(?:" + "|".join(names) + r")(?:[/)]|$)"


def _within(outer: str, group: str, rules: tuple) -> tuple:
    """``rules`` under the name scope ``outer``, their labels prefixed ``group: ``."""
    return tuple((f"{group}: {label}", _scope(outer) + ".*" + rx) for label, rx in rules)


_TDMPC2_PLAN = (("noise draws", _scope("noise")),
                ("encoder + policy prior", _scope("pi_prior")),
                ("candidate values", _scope("candidate_values")),
                ("MPPI update", _scope("mppi")))
_TDMPC2_UPDATE = (("batch sampling, noise", _scope("sample_batch", "noise")),
                  ("Q ensemble", _scope("q_ensemble")),
                  ("TD target", _scope("td_target")),
                  ("world model", _scope("world_model")),
                  ("policy", _scope("pi_loss")),
                  ("optimizer", _scope("optimizer_step")))
_DREAMERV3_TRAIN = (("batch sampling, noise", _scope("sample_batch", "noise")),
                    ("world model", _scope("world_model")),
                    ("imagination", _scope("imagination")),
                    ("actor", _scope("actor")),
                    ("critic", _scope("critic", "replay_critic")),
                    ("returns", _scope("actor_critic")),
                    ("offline terms", _scope("offline")),
                    ("optimizer", _scope("optimizer_step")),
                    ("metrics", _scope("metrics")))
COMPONENTS = {
    ("tdmpc2", "update"): _TDMPC2_UPDATE,
    ("tdmpc2", "plan"): _TDMPC2_PLAN,
    ("tdmpc2", "online"): (*_within("acting", "plan", _TDMPC2_PLAN),
                           ("plan: rest", _scope("acting")),
                           ("env step (MJX)", _scope("env_step")),
                           ("replay write", _scope("replay_write")),
                           *_within("train_updates", "update", _TDMPC2_UPDATE),
                           ("update: rest", _scope("train_updates"))),
    ("dreamerv3", "train"): _DREAMERV3_TRAIN,
    ("dreamerv3", "policy"): (("noise draws", _scope("noise")), ("encoder", _scope("encoder")),
                              ("RSSM step", _scope("rssm")), ("actor", _scope("actor"))),
    ("dreamerv3", "online"): (("policy", _scope("acting")),
                              ("env step (MJX)", _scope("env_step")),
                              ("replay write", _scope("replay_write")),
                              *_within("train_updates", "update", _DREAMERV3_TRAIN),
                              ("update: rest", _scope("train_updates")))}
"""The components of each (agent, program): ``(label, regex)`` rules, in order; an op
belongs to the first whose regex is found (``re.search``) in its JAX name stack (the
``op_name`` of its HLO metadata, `_profile_analysis.op_name`), else to "other".

The regexes find the name scopes (`jax.named_scope`) wmx's code runs its parts under: the
online tick's "acting", "env_step", "replay_write" and "train_updates"
(`wmx.train_online.program`); TD-MPC2's planner ("noise", "pi_prior",
"candidate_values", "mppi") and update ("noise", "td_target", "world_model", "pi_loss",
"optimizer_step", and "q_ensemble" around each pass of the Q ensemble inside the losses,
which so count as "Q ensemble"); DreamerV3's training step ("noise", "world_model",
"imagination", "actor_critic" with "actor" and "critic" inside, "replay_critic",
"offline", "optimizer_step", "metrics"; its "returns" are the rest of "actor_critic":
the reward and continue heads on the imagined states, the λ-returns, their normaliser)
and policy ("noise", "encoder", "rssm", "actor"); "sample_batch" in both agents'
replay. A label "group: part" is a part of group (the verdict sums the group). A
scope's name must be no Python function's: JAX lowers some functions (the PRNG's) once
per program, and the ops of that body keep the name of the Python frame of its first
trace in their name stacks wherever it is inlined, after the call site's own (correct)
scopes."""


def component_rules(agent: str, program: str) -> tuple:
    """The `COMPONENTS` rules of ``agent``'s ``program`` (none: every op "other")."""
    return COMPONENTS.get((agent, program), ())
