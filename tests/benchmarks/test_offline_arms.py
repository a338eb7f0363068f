"""benchmarks/learning/offline_arms.py: arms of one offline check side by side."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "learning"))
import offline_arms as arms_mod  # noqa: E402


def result(dataset="mt19-x@abc", per_seed=None, final=700.0, overrides=None):
    per_seed = per_seed or {"2000": [100.0, 300.0], "4000": [600.0, 800.0]}
    return {"dataset": dataset, "run_dir": "runs/r", "updates_reached": 4000,
            "run_wall_s": 250.4, "agent_overrides": overrides or {},
            "tasks": {"reacher-easy": {
                "source_final_return": 900.0, "offline_eval_return_per_seed": per_seed,
                "offline_final_evaluation": {"return": final, "stderr": 30.0,
                                             "episodes": 50, "seeds": 2},
                "offline_final_return": final, "ratio": final / 900.0,
                "pass": final >= 450.0}}}


def write(tmp_path, name, res):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(res))
    return p


def test_curve_and_table(tmp_path):
    a = write(tmp_path, "a", result())
    b = write(tmp_path, "b", result(final=300.0, overrides={"offline_bc_weight": 0.3}))
    arms = arms_mod.load_arms([f"faithful={a}", f"bc={b}"])
    assert list(arms) == ["faithful", "bc"]
    assert arms_mod.curve(arms["faithful"]["tasks"]["reacher-easy"]) == (
        [2000, 4000], [200.0, 700.0], [100.0, 600.0], [300.0, 800.0])
    rows = arms_mod.table(arms).splitlines()
    assert rows[2] == ("| faithful | reacher-easy | 2,000: 200.0, 4,000: 700.0 | 700.0 ± 30.0 "
                       "| 0.78 | pass | 250 | — |")
    assert rows[3].endswith("| 0.33 | fail | 250 | offline_bc_weight=0.3 |")


def test_plot_and_bad_input(tmp_path, capsys):
    a = write(tmp_path, "a", result())
    out = tmp_path / "arms.png"
    assert arms_mod.main(["--result", f"x={a}", "--result", f"y={a}", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    other = write(tmp_path, "o", result(dataset="mt19-y@def"))
    with pytest.raises(SystemExit, match="compare arms on one dataset"):
        arms_mod.load_arms([f"x={a}", f"y={other}"])
    with pytest.raises(SystemExit, match="give LABEL=RESULT_JSON"):
        arms_mod.load_arms([str(a)])
    with pytest.raises(SystemExit, match="given twice"):
        arms_mod.load_arms([f"x={a}", f"x={a}"])
    with pytest.raises(SystemExit, match="not an offline check result"):
        arms_mod.load_arms([f"x={write(tmp_path, 'bad', {'a': 1})}"])
    with pytest.raises(SystemExit, match="not an offline check result"):
        arms_mod.load_arms([f"x={write(tmp_path, 'num', 3)}"])
    with pytest.raises(SystemExit):
        arms_mod.main(["--result", f"x={a}", "--out", str(tmp_path / "no" / "arms.png")])
    assert "does not exist" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.json", "arms.png", "bad.json", "num.json", "o.json"]


def test_table_without_a_standard_error_or_any_final_return(tmp_path):
    """A one-episode final evaluation has no standard error; a run reported before its
    first evaluation has no final return at all: shown as such, not a crash."""
    one = result()
    one["tasks"]["reacher-easy"]["offline_final_evaluation"]["stderr"] = None
    early = result()
    t = early["tasks"]["reacher-easy"]
    t.update(offline_eval_return_per_seed={}, offline_final_evaluation=None,
             offline_final_return=None, ratio=None, **{"pass": None})
    arms = arms_mod.load_arms([f"one={write(tmp_path, 'one', one)}",
                               f"early={write(tmp_path, 'early', early)}"])
    rows = arms_mod.table(arms).splitlines()
    assert "| 700.0 ± — | 0.78 | pass |" in rows[2]
    assert rows[3] == "| early | reacher-easy |  | — | — | — | 250 | — |"
    out = tmp_path / "arms.png"
    arms_mod.plot(arms, out, "t")
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_a_label_or_a_path_with_an_equals_sign(tmp_path):
    """An arm labelled by its override (``bc=0.3``) or a result in a folder named with
    ``=``: the split is the one whose right side is a file."""
    a = write(tmp_path, "a", result())
    (tmp_path / "w=1").mkdir()
    b = write(tmp_path / "w=1", "b", result())
    arms = arms_mod.load_arms([f"bc=0.3={a}", f"x={b}", f"y=z={b}"])
    assert list(arms) == ["bc=0.3", "x", "y=z"]
    with pytest.raises(SystemExit, match="cannot read a result JSON at .*nope.json"):
        arms_mod.load_arms([f"bc=0.3={tmp_path / 'nope.json'}"])


def test_plot_with_non_finite_returns(tmp_path):
    """A diverged arm's returns (inf, NaN in the result JSON) leave the axis to the finite
    ones instead of failing on the limits."""
    bad = result(per_seed={"2000": [float("inf"), 1.0], "4000": [float("nan"), 2.0]},
                 final=float("nan"))
    a, b = write(tmp_path, "a", result()), write(tmp_path, "b", bad)
    out = tmp_path / "arms.png"
    assert arms_mod.main(["--result", f"ok={a}", "--result", f"bad={b}", "--out",
                          str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
