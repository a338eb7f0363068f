"""Task registry: the mt19 table, discounts, seed steps, lookups."""
import jax
import pytest

from wmx.envs.registry import (MT19, MT19_TASKS, PROBE_TASKS, TaskSpec,
                               discount_from_length, get_task,
                               seed_steps_from_length, task_names)

MT30_ORDER_19 = [
    "walker-stand", "walker-walk", "walker-run", "cheetah-run", "reacher-easy",
    "reacher-hard", "acrobot-swingup", "pendulum-swingup", "cartpole-balance",
    "cartpole-balance-sparse", "cartpole-swingup", "cartpole-swingup-sparse",
    "cup-catch", "finger-spin", "finger-turn-easy", "finger-turn-hard",
    "fish-swim", "hopper-stand", "hopper-hop"]

# dm_control suite state dims (obs, action) of the 19 tasks.
DMC_DIMS = {
    "walker": (24, 6), "cheetah": (17, 6), "reacher": (6, 2),
    "acrobot": (6, 1), "pendulum": (3, 1), "cartpole": (5, 1), "cup": (8, 2),
    "finger-spin": (9, 2), "finger-turn": (12, 2), "fish": (24, 5),
    "hopper": (15, 4)}


def _dmc_dims(name):
    for prefix, dims in sorted(DMC_DIMS.items(), key=lambda kv: -len(kv[0])):
        if name.startswith(prefix):
            return dims
    raise KeyError(name)


def test_mt19_order_and_names():
    assert [t.name for t in MT19_TASKS] == MT30_ORDER_19
    assert MT19 is MT19_TASKS
    assert get_task("cup-catch").playground_name == "BallInCup"
    assert get_task("cartpole-balance").playground_name == "CartpoleBalance"
    assert task_names()[:19] == tuple(MT30_ORDER_19)
    assert set(task_names()[19:]) == {"probe-constant", "probe-action"}


def test_mt19_dims_and_protocol():
    for t in MT19_TASKS:
        assert (t.obs_dim, t.action_dim) == _dmc_dims(t.name), t.name
        assert (t.T, t.action_repeat, t.kind, t.obs_keys) == (
            500, 2, "playground", ())
        assert t.discount == pytest.approx(0.99)      # tdmpc2_spec 2.20
        assert t.seed_steps == 2500                   # tdmpc2_spec 4.3
    assert max(t.obs_dim for t in MT19_TASKS) == 24
    assert max(t.action_dim for t in MT19_TASKS) == 6


def test_discount_and_seed_steps_formulas():
    assert discount_from_length(500) == pytest.approx(0.99)
    assert discount_from_length(100) == pytest.approx(0.95)
    assert discount_from_length(1000) == pytest.approx(0.995)
    assert discount_from_length(200) == pytest.approx(0.975)
    assert discount_from_length(20) == pytest.approx(0.95)
    assert seed_steps_from_length(500) == 2500
    assert seed_steps_from_length(100) == 1000
    assert seed_steps_from_length(1000) == 5000
    with pytest.raises(ValueError, match="T must be >= 1"):
        discount_from_length(0)


def test_probe_specs():
    names = {t.name: t for t in PROBE_TASKS}
    for t in names.values():
        assert (t.kind, t.action_repeat, t.playground_name) == ("probe", 1, None)
        assert t.T == 20 and t.discount == pytest.approx(0.95)
    assert get_task("probe-action").action_dim == 2


def test_unknown_task_lists_known_names():
    with pytest.raises(ValueError, match="unknown task 'walker-fly'") as e:
        get_task("walker-fly")
    assert "walker-stand" in str(e.value) and "probe-action" in str(e.value)
    # the probes are accepted, but said apart from the tasks people train on
    assert str(e.value).endswith("hopper-hop (and the test probes probe-constant, "
                                 "probe-action)")


def test_taskspec_validation_and_replace():
    t = get_task("cartpole-balance")
    short = t.replace(T=10)
    assert short.T == 10 and t.T == 500 and short.seed_steps == 1000
    with pytest.raises(ValueError, match="T and action_repeat"):
        t.replace(T=0)
    with pytest.raises(ValueError, match="kind"):
        TaskSpec("x", None, 1, 1, 1, 1, kind="gym")
    with pytest.raises(Exception):
        t.T = 3  # frozen


def test_playground_names_exist():
    from mujoco_playground import registry
    known = set(registry.dm_control_suite.ALL_ENVS)
    missing = [t.playground_name for t in MT19_TASKS
               if t.playground_name not in known]
    assert not missing


def _probe_real_dims(spec):
    from mujoco_playground import registry
    env = registry.dm_control_suite.load(
        spec.playground_name, config_overrides={"impl": "jax"})
    obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
    return obs.shape, env.action_size, env._config.episode_length


@pytest.mark.parametrize("name", ["pendulum-swingup", "cartpole-balance"])
def test_table_matches_real_env_fast(name):
    spec = get_task(name)
    shape, nu, length = _probe_real_dims(spec)
    assert shape == (spec.obs_dim,) and nu == spec.action_dim
    assert length // spec.action_repeat == spec.T


@pytest.mark.slow
def test_table_matches_real_envs_all():
    for spec in MT19_TASKS:
        shape, nu, length = _probe_real_dims(spec)
        assert shape == (spec.obs_dim,), spec.name
        assert nu == spec.action_dim, spec.name
        assert length // spec.action_repeat == spec.T, spec.name
