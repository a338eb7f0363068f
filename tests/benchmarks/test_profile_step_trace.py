"""benchmarks/profile_step.py's trace analysis on a synthetic TPU trace: it reads a device
plane (nested while loops, ops classified from the HLO, the trace stat or the name) and
says when there are no op events; each op's component comes from its name stack by the
first matching rule, and the components' ms sum to the busy time."""
import re

import pytest

from profile_step_common import pa, ps


# ---- the analysis on a synthetic TPU trace --------------------------------------------
HLO = """HloModule jit_step, entry_computation_layout={(bf16[8,128]{1,0})->bf16[8,128]{1,0}}

%fc (param_0: bf16[8,128], param_1: bf16[128,128]) -> bf16[8,128] {
  %param_0 = bf16[8,128]{1,0} parameter(0)
  %param_1 = bf16[128,128]{1,0} parameter(1)
  ROOT %convolution.1 = bf16[8,128]{1,0} convolution(%param_0, %param_1), dim_labels=bf_io->bf
}

%fc.1 (param_0.1: bf16[8,128]) -> bf16[8,128] {
  %param_0.1 = bf16[8,128]{1,0} parameter(0)
  ROOT %tanh.1 = bf16[8,128]{1,0} tanh(%param_0.1)
}

%body (p.1: (s32[], bf16[8,128])) -> (s32[], bf16[8,128]) {
  %p.1 = (s32[], bf16[8,128]{1,0}) parameter(0)
  %gte.1 = bf16[8,128]{1,0:T(8,128)(2,1)} get-tuple-element(%p.1), index=1
  %w = bf16[128,128]{1,0} constant({...})
  %convolution_fusion = bf16[8,128]{1,0} fusion(%gte.1, %w), kind=kOutput, calls=%fc
  %tanh_fusion = bf16[8,128]{1,0} fusion(%convolution_fusion), kind=kLoop, calls=%fc.1, metadata={}
  ROOT %tuple.1 = (s32[], bf16[8,128]{1,0}) tuple(%gte.0, %tanh_fusion)
}

%cond (p.2: (s32[], bf16[8,128])) -> pred[] {
  %p.2 = (s32[], bf16[8,128]{1,0}) parameter(0)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main.9 (Arg_0.1: bf16[8,128]) -> bf16[8,128] {
  %Arg_0.1 = bf16[8,128]{1,0} parameter(0)
  %copy.4 = bf16[8,128]{0,1} copy(%Arg_0.1)
  %while.1 = (s32[], bf16[8,128]{1,0}) while(%tuple.0), condition=%cond, body=%body
  ROOT %gte.9 = bf16[8,128]{1,0} get-tuple-element(%while.1), index=1
}
"""
US = 10 ** 6   # picoseconds


def _xspace(ops_per_call: list[tuple], calls: int = 2, period_us: int = 200) -> str:
    """A text-proto XSpace: /device:TPU:0 with "XLA Modules" and "XLA Ops" lines, ``calls``
    calls ``period_us`` apart, each running ``ops_per_call`` = (name, start µs, end µs,
    hlo_category or None); and a host plane without XLA ops."""
    names = sorted({op[0] for op in ops_per_call} | {"jit_step(1)"})
    meta = {n: i + 1 for i, n in enumerate(names)}
    ops, modules = [], []
    for c in range(calls):
        t0 = c * period_us
        modules.append(f'events {{ metadata_id: {meta["jit_step(1)"]} offset_ps: {t0 * US} '
                       f'duration_ps: {100 * US} }}')
        for name, start, end, cat in ops_per_call:
            stat = f' stats {{ metadata_id: 900 str_value: "{cat}" }}' if cat else ""
            ops.append(f"events {{ metadata_id: {meta[name]} offset_ps: {(t0 + start) * US} "
                       f"duration_ps: {(end - start) * US}{stat} }}")
    em = "\n".join(f'event_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}'
                   for n, i in meta.items())
    return (f'planes {{ id: 1 name: "/device:TPU:0"\n'
            f'  lines {{ id: 1 name: "XLA Modules" timestamp_ns: 5000 {" ".join(modules)} }}\n'
            f'  lines {{ id: 2 name: "XLA Ops" timestamp_ns: 5000 {" ".join(ops)} }}\n'
            f'{em}\nstat_metadata {{ key: 900 value {{ id: 900 name: "hlo_category" }} }} }}\n'
            'planes { id: 2 name: "/host:CPU" lines { id: 1 name: "python" '
            'events { metadata_id: 1 offset_ps: 0 duration_ps: 5 } }\n'
            'event_metadata { key: 1 value { id: 1 name: "PjitFunction(step)" } } }')


def _profile(ops_per_call, wall_ms: float, peak=None) -> dict:
    import jax
    data = jax.profiler.ProfileData.from_text_proto(_xspace(ops_per_call))
    rec = {"wall_ms_median": wall_ms, **ps.analyse(data, HLO, calls=2, top=3)}
    return ps.add_rates(rec, gflop=2.0, peak=peak)


TPU_OPS = [("copy.4", 0, 10, None), ("while.1", 10, 100, None),
           ("convolution_fusion", 20, 60, None), ("tanh_fusion", 60, 90, None)]


def test_device_plane_self_times_categories_and_the_verdict():
    rec = _profile(TPU_OPS, wall_ms=0.2, peak=ps.peak_rate("TPU v5 lite", None))
    assert rec["trace"]["device_plane"] == "/device:TPU:0"
    assert rec["trace"]["source"] == "device plane /device:TPU:0, line 'XLA Ops'"
    assert rec["trace"]["hlo_module"] == "jit_step"
    assert rec["trace"]["module_ms_per_call"] == {"jit_step(1)": pytest.approx(0.1)}
    assert rec["busy_ms_per_call"] == pytest.approx(0.1)      # the union, per call
    assert rec["op_ms_per_call"] == pytest.approx(0.1)        # the while less its body
    share = {k: v["share"] for k, v in rec["categories"].items()}
    assert share == pytest.approx({"matmul/convolution": 0.4, "elementwise/reduction": 0.3,
                                   "while-loop/control": 0.2, "copy/transpose": 0.1,
                                   "collective/infeed/outfeed": 0.0, "other": 0.0})
    assert [(r["name"], r["how"]) for r in rec["top_ops"]] == [
        ("convolution_fusion", "hlo"), ("tanh_fusion", "hlo"), ("while.1", "hlo")]
    assert rec["rest"] == {"ops": 1, "ms_per_call": pytest.approx(0.01),
                           "share": pytest.approx(0.1)}
    assert rec["tflop_s"] == pytest.approx(2.0 / 0.1)         # 2 GFLOP in 0.1 ms
    assert rec["matmul_tflop_s"] == pytest.approx(2.0 / 0.04)
    assert rec["idle_share_of_wall"] == pytest.approx(0.5)
    v = rec["verdict"]
    assert v.startswith("40% of device time in matmul/convolution ops; 30% in "
                        "elementwise/reduction; 20% in while-loop/control.")
    assert "50.00 TFLOP/s (25% of the 197 TFLOP/s TPU v5 lite dense bfloat16 peak)" in v
    assert "(the device idle 50%)" in v and "Bounded by the host side" in v
    busy = _profile(TPU_OPS, wall_ms=0.104)["verdict"]        # the device busy: matmuls
    assert "Bounded by matmul arithmetic." in busy and "peak" not in busy


def test_tpu_ops_named_by_their_whole_instruction_match_the_hlo():
    # a TPU's "XLA Ops" events carry the whole instruction text; its operand names (here
    # %copy-done.3) must not decide the category, the instruction's HLO does
    long = [("%copy.4 = bf16[8,128]{0,1} copy(%Arg_0.1)", 0, 10, None),
            ("%while.1 = (s32[], bf16[8,128]{1,0}) while(%tuple.0), condition=%cond, "
             "body=%body", 10, 100, None),
            ("%convolution_fusion = bf16[8,128]{1,0} fusion(%gte.1, %w), kind=kOutput, "
             "calls=%fc", 20, 60, None),
            ("%tanh_fusion = bf16[8,128]{1,0} fusion(%copy-done.3), kind=kLoop, "
             "calls=%fc.1", 60, 90, None)]
    short = _profile(TPU_OPS, wall_ms=0.2)
    rec = _profile(long, wall_ms=0.2)
    assert rec["classified_by"] == pytest.approx({"hlo": 1.0, "trace-stat": 0.0, "name": 0.0})
    assert rec["categories"] == short["categories"]
    assert [r["name"] for r in rec["top_ops"]] == ["convolution_fusion", "tanh_fusion",
                                                   "while.1"]
    assert pa.instruction_name("ROOT %tuple.1 = (s32[]) tuple(%a)") == "tuple.1"
    assert pa.instruction_name("%fusion.12") == pa.instruction_name("fusion.12") == "fusion.12"


def test_ops_missing_from_the_hlo_use_the_trace_stat_then_the_name():
    ops = [("fusion.77", 0, 50, "convolution fusion"), ("fusion.78", 50, 80, None),
           ("sort.3", 80, 100, None)]
    rec = _profile(ops, wall_ms=0.1)
    by = {r["name"]: (r["category"], r["how"]) for r in rec["top_ops"]}
    assert by == {"fusion.77": ("matmul/convolution", "trace-stat"),
                  "fusion.78": ("elementwise/reduction", "name"), "sort.3": ("other", "name")}
    assert rec["classified_by"] == pytest.approx({"hlo": 0.0, "trace-stat": 0.5,
                                                  "name": 0.5})
    assert "50% of the op time was classified by op name alone" in rec["verdict"]


def test_no_op_events_is_said_not_invented():
    import jax
    data = jax.profiler.ProfileData.from_text_proto(
        'planes { id: 2 name: "/host:CPU" lines { id: 1 name: "python" '
        'events { metadata_id: 1 offset_ps: 0 duration_ps: 5 } }\n'
        'event_metadata { key: 1 value { id: 1 name: "PjitFunction(step)" } } }')
    rec = ps.add_rates({"wall_ms_median": 1.0, **ps.analyse(data, None, 2, 5)}, 1.0, None)
    assert rec["op_events"] == 0 and rec["trace"]["device_plane"] is None
    assert rec["tflop_s"] is None and rec["matmul_tflop_s"] is None and rec["top_ops"] == []
    assert all(c["share"] == 0 for c in rec["categories"].values())
    assert rec["verdict"].startswith("The trace has no XLA op events")


def test_hlo_classification_of_fusions_and_unfused_ops():
    hlo = pa.parse_hlo(HLO)
    assert hlo.module == "jit_step" and hlo.ops["while.1"][1] == ["cond", "body"]
    assert {n: pa.classify_hlo(hlo, n) for n in ("convolution_fusion", "tanh_fusion",
                                                 "copy.4", "while.1", "lt")} == {
        "convolution_fusion": "matmul/convolution", "tanh_fusion": "elementwise/reduction",
        "copy.4": "copy/transpose", "while.1": "while-loop/control",
        "lt": "elementwise/reduction"}
    assert pa.classify_hlo(hlo, "fusion.1") is None
    assert pa.classify_stat("data formatting") == "copy/transpose"
    assert pa.classify_name("all-reduce.3") == "collective/infeed/outfeed"


# ---- components: name stacks and rules -------------------------------------------------
TICK = "jit(one_seed)/vmap()/while/body/closed_call/"
"""The name stack of a tick of the online chunk (`wmx.train_online.program`)."""


@pytest.mark.parametrize("agent, program, stack, label", [
    # TD-MPC2's online chunk: the Adam moments of the Q ensemble (a top op on the TPU) and
    # MJX's Cholesky in the walker's step
    ("tdmpc2", "online", TICK + "train_updates/while/body/jit(update)/optimizer_step/add",
     "update: optimizer"),
    ("tdmpc2", "online", TICK + "env_step/cond/branch_0_fun/vmap(jit(_step))/while/body/"
     "closed_call/step/forward/solve/jit(_cholesky)/cholesky", "env step (MJX)"),
    # the same two ops before the name scopes: nothing in their stacks says which part
    ("tdmpc2", "online", TICK + "while/body/jit(update)/add", "other"),
    ("tdmpc2", "online", TICK + "cond/branch_0_fun/vmap(jit(_step))/while/body/closed_call/"
     "step/forward/solve/jit(_cholesky)/cholesky", "other"),
    ("tdmpc2", "online", TICK + "acting/cond/branch_2_fun/vmap(pi_prior)/dot_general",
     "plan: encoder + policy prior"),
    ("tdmpc2", "online", TICK + "acting/cond/branch_2_fun/vmap()/while/body/closed_call/"
     "candidate_values/add", "plan: candidate values"),
    ("tdmpc2", "online", TICK + "acting/cond/branch_2_fun/vmap(mppi)/jit(cumsum)/"
     "reduce_window_sum", "plan: MPPI update"),
    ("tdmpc2", "online", TICK + "acting/cond/branch_2_fun/vmap(noise)/jit(_normal)/"
     "jit(_normal_real)/erf_inv", "plan: noise draws"),
    ("tdmpc2", "online", TICK + "replay_write/dynamic_update_slice", "replay write"),
    ("tdmpc2", "online", TICK + "train_updates/while/body/sample_batch/gather",
     "update: batch sampling, noise"),
    ("tdmpc2", "online", TICK + "train_updates/while/body/jit(draw_update_noise)/noise/"
     "jit(_normal)/jit(_normal_real)/erf_inv", "update: batch sampling, noise"),
    # a pass of the Q ensemble inside a loss is the Q ensemble's, forward and backward
    ("tdmpc2", "online", TICK + "train_updates/while/body/jit(update)/td_target/q_ensemble/"
     "vmap()/add", "update: Q ensemble"),
    ("tdmpc2", "online", TICK + "train_updates/while/body/jit(update)/"
     "transpose(jvp(world_model))/q_ensemble/vmap()/dot_general", "update: Q ensemble"),
    ("tdmpc2", "online", TICK + "train_updates/while/body/jit(update)/td_target/div",
     "update: TD target"),
    ("tdmpc2", "online", TICK + "train_updates/while/body/jit(update)/jvp(world_model)/tanh",
     "update: world model"),
    ("tdmpc2", "online", TICK + "train_updates/while/body/jit(update)/"
     "transpose(jvp(pi_loss))/mul", "update: policy"),
    # a PRNG body lowered once keeps the Python frame of its first trace ("policy",
    # "draw_plan_noise") after the call site's scopes: the call site decides
    ("tdmpc2", "online", TICK + "train_updates/while/body/vmap(jit(_threefry_split))/"
     "draw_plan_noise/while", "update: rest"),
    ("tdmpc2", "online", TICK + "acting/cond/branch_2_fun/vmap(jit(_threefry_split))/"
     "policy/while", "plan: rest"),
    ("tdmpc2", "online", TICK + "vmap(jit(_threefry_fold_in))/make_tick_fn.<locals>."
     "tick_fn/while", "other"),
    ("tdmpc2", "online", None, "other"),
    ("tdmpc2", "update", "jit(<lambda>)/jit(update)/optimizer_step/add", "optimizer"),
    ("tdmpc2", "plan", "jit(decide_fn)/vmap(mppi)/jit(clip)/max", "MPPI update"),
    ("dreamerv3", "train", "jit(update_fn)/transpose(jvp(actor_critic))/critic/transpose",
     "critic"),
    ("dreamerv3", "train", "jit(update_fn)/transpose(jvp(replay_critic))/dot_general",
     "critic"),
    ("dreamerv3", "train", "jit(update_fn)/transpose(jvp(actor_critic))/actor/transpose",
     "actor"),
    ("dreamerv3", "train", "jit(update_fn)/jvp(actor_critic)/cumsum", "returns"),
    ("dreamerv3", "train", "jit(update_fn)/jvp(imagination)/while/body/closed_call/tanh",
     "imagination"),
    ("dreamerv3", "train", "jit(update_fn)/transpose(jvp(world_model))/while/body/"
     "dynamic_slice", "world model"),
    ("dreamerv3", "train", "jit(update_fn)/optimizer_step/jit(norm)/mul", "optimizer"),
    ("dreamerv3", "policy", "jit(policy_fn)/rssm/dot_general", "RSSM step"),
    ("dreamerv3", "online", TICK + "acting/cond/branch_2_fun/actor/tanh", "policy"),
    ("dreamerv3", "online", TICK + "train_updates/while/body/jit(update)/"
     "transpose(jvp(actor_critic))/actor/mul", "update: actor"),
])
def test_component_rules_label_name_stacks(agent, program, stack, label):
    assert pa.component_of(stack, ps.component_rules(agent, program)) == label


def test_every_program_has_rules_of_distinct_labels():
    for agent, programs in ps.PROGRAMS.items():
        for program in programs:
            rules = ps.component_rules(agent, program)
            labels = [label for label, _ in rules]
            assert rules and len(set(labels)) == len(labels) and "other" not in labels
            assert all(re.compile(rx) for _, rx in rules)
    assert pa.component_of("a/b", (("x", "b"), ("y", "a"))) == "x"    # first match wins


HLO_NAMED = """HloModule jit_step

%fused (p.3: f32[8]) -> f32[8] {
  %p.3 = f32[8]{0} parameter(0)
  %neg.3 = f32[8]{0} negate(%p.3), metadata={op_name="jit(step)/while/body/actor/neg"}
  ROOT %tanh.3 = f32[8]{0} tanh(%neg.3), metadata={op_name="jit(step)/while/body/actor/tanh"}
}

%body (p.1: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p.1 = (s32[], f32[8]{0}) parameter(0)
  %gte.1 = f32[8]{0} get-tuple-element(%p.1), index=1
  %dot.7 = f32[8]{0} dot(%gte.1, %gte.1), metadata={op_name="jit(step)/while/body/world_model/dot_general" stack_frame_id=3}
  %fusion.3 = f32[8]{0} fusion(%dot.7), kind=kLoop, calls=%fused
  %dot.9 = f32[8]{0} dot(%gte.1, %dot.7), lhs_contracting_dims={0}
  %x.2 = f32[8]{0} negate(%gte.1), metadata={op_name="jit(step)/elsewhere/neg"}
  %copy.6 = f32[8]{0} copy(%x.2)
  ROOT %tuple.1 = (s32[], f32[8]{0}) tuple(%gte.0, %fusion.3)
}

ENTRY %main.9 (Arg_0.1: f32[8]) -> f32[8] {
  %Arg_0.1 = f32[8]{0} parameter(0)
  %copy.4 = f32[8]{0} copy(%Arg_0.1)
  %while.1 = (s32[], f32[8]{0}) while(%tuple.0), condition=%cond, body=%body, metadata={op_name="jit(step)/while"}
  ROOT %gte.9 = f32[8]{0} get-tuple-element(%while.1), index=1
}
"""
RULES = (("world model", ps._scope("world_model")), ("actor", ps._scope("actor")))


def test_name_stacks_of_ops_xla_made_come_from_what_they_compute_or_where_they_run():
    hlo = pa.parse_hlo(HLO_NAMED)
    stack = {n: pa.op_name(hlo, n) for n in ("dot.7", "fusion.3", "dot.9", "copy.6",
                                             "copy.4", "while.1", "nothing.1")}
    assert stack == {
        "dot.7": "jit(step)/while/body/world_model/dot_general",     # its own metadata
        "fusion.3": "jit(step)/while/body/actor/tanh",               # its fused ROOT's
        "dot.9": "jit(step)/while/body/world_model/dot_general",     # its named operand's
        "copy.6": "jit(step)/while",          # an operand named outside its loop: the loop's
        "copy.4": None, "while.1": "jit(step)/while", "nothing.1": None}
    assert [pa.component_of(stack[n], RULES) for n in ("fusion.3", "dot.9", "copy.6")] == [
        "actor", "world model", "other"]


def test_components_split_the_busy_time_by_rule():
    import jax
    ops = [("copy.4", 0, 10, None), ("while.1", 10, 100, None), ("dot.7", 20, 60, None),
           ("fusion.3", 60, 90, None)]
    data = jax.profiler.ProfileData.from_text_proto(_xspace(ops))
    rec = ps.analyse(data, HLO_NAMED, calls=2, top=4, rules=RULES)
    comps = rec["components"]
    assert list(comps) == ["world model", "actor", "other"]
    assert {k: c["ms_per_call"] for k, c in comps.items()} == pytest.approx(
        {"world model": 0.04, "actor": 0.03, "other": 0.03})    # copy.4 and the loop's own
    assert {k: c["ops"] for k, c in comps.items()} == {"world model": 1, "actor": 1,
                                                        "other": 2}
    assert sum(c["ms_per_call"] for c in comps.values()) == pytest.approx(
        rec["busy_ms_per_call"])
    assert rec["components_named_share"] == pytest.approx(0.9)    # all but copy.4
    top = {r["name"]: (r["component"], r["op_name"]) for r in rec["top_ops"]}
    assert top["copy.4"] == ("other", None) and top["while.1"][0] == "other"
    text = ps.component_text({**rec, "ticks_per_call": None})
    assert text == (" By component, per call: world model 0.04 ms (40%); actor 0.03 ms "
                    "(30%); other 0.03 ms (30%).")


def test_components_of_overlapping_ops_sum_to_the_busy_time():
    """XLA:CPU's thunks on two threads overlap: the busy time (the union) is less than the
    summed self time, and the components split the busy time in proportion."""
    hlo = pa.parse_hlo(HLO_NAMED)
    ev = [pa.OpEvent("dot.7", None, None, 0.0, 3e6, "t1"),
          pa.OpEvent("fusion.3", None, None, 1e6, 2e6, "t2")]
    rec = pa.summarise_ops(ev, hlo, calls=1, top=2, rules=RULES)
    assert rec["busy_ms_per_call"] == pytest.approx(3.0)
    assert rec["op_ms_per_call"] == pytest.approx(4.0)
    comps = {k: c["ms_per_call"] for k, c in rec["components"].items()}
    assert comps == pytest.approx({"world model": 2.25, "actor": 0.75, "other": 0.0})


def test_component_text_sums_the_groups_per_tick():
    comps = {"plan: candidate values": {"ms_per_call": 30.0, "share": 0.3, "ops": 5},
             "plan: rest": {"ms_per_call": 0.5, "share": 0.005, "ops": 1},
             "env step (MJX)": {"ms_per_call": 20.0, "share": 0.2, "ops": 9},
             "update: world model": {"ms_per_call": 49.5, "share": 0.495, "ops": 9},
             "other": {"ms_per_call": 0.0, "share": 0.0, "ops": 0}}
    text = ps.component_text({"components": comps, "ticks_per_call": 10,
                              "components_named_share": 0.5})
    assert text == (" By component, per tick: plan 3.05 ms (30%: candidate values 30%); "
                    "env step (MJX) 2 ms (20%); update 4.95 ms (50%: world model 50%). Only "
                    "50% of the op time has a name stack in the HLO (the rest is other).")
    assert ps.component_text({"components": {"other": comps["other"]}}) == ""
