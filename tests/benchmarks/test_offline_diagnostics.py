"""benchmarks/learning/offline_diagnostics.py: the series it draws, read from metrics.csv."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "learning"))
import offline_diagnostics as diag  # noqa: E402

CSV = ("seed,kind,updates,task,episodes,return,return_std,ret/mean,dyn_loss\n"
       "0,train,1000,,,,,5.0,1.3\n1,train,1000,,,,,7.0,1.2\n0,train,500,,,,,nan,1.4\n"
       "0,eval,1000,reacher-easy,10,100.0,30.0,,\n1,eval,1000,reacher-easy,30,200.0,40.0,,\n"
       "0,eval,1000,mean,10,,,,\n0,train,1500,,,,,9.0,\n")


def test_series(tmp_path):
    (tmp_path / "metrics.csv").write_text(CSV)
    rows = diag.read_metrics(tmp_path)
    assert diag.train_series(rows, "ret/mean") == ([1000, 1500], [5.0, 9.0])   # nan dropped
    assert diag.train_series(rows, "dyn_loss") == ([500, 1000], [1.4, 1.3])
    xs, mean, se = diag.eval_series(rows, "reacher-easy")
    # 40 episodes pooled: mean 175; variance = within (10·30² + 30·40²)/40 + between
    within = (10 * 30 ** 2 + 30 * 40 ** 2) / 40
    between = (10 * 75 ** 2 + 30 * 25 ** 2) / 40
    assert xs == [1000] and mean == [175.0]
    assert se[0] == pytest.approx(math.sqrt((within + between) / 40))


def test_plot_and_bad_input(tmp_path, capsys):
    (tmp_path / "metrics.csv").write_text(CSV)
    out = tmp_path / "d.png"
    assert diag.main(["--run", f"a={tmp_path}", "--run", f"b={tmp_path / 'metrics.csv'}",
                      "--task", "reacher-easy", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.png", "metrics.csv"]
    with pytest.raises(SystemExit):
        diag.main(["--run", str(tmp_path), "--task", "reacher-easy", "--out", str(out)])
    assert "give LABEL=PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        diag.main(["--run", f"a={tmp_path}", "--task", "walker-stand", "--out", str(out)])
    assert "no run has evaluations of it" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no metrics.csv"):
        diag.main(["--run", f"a={tmp_path / 'x'}", "--task", "reacher-easy", "--out", str(out)])
