"""benchmarks/learning_curve.py resumes its results file without losing or miscounting seeds (no training: a
stand-in records fixed results)."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import learning_curve  # noqa: E402


class Stopped(Exception):
    pass


def run(monkeypatch, output, *arguments, stop_at_point=None):
    """learning_curve.main() with a stand-in run_seed: point p of seed s scores 10 s + p / 100 greedy, 1 less sampled."""
    def run_seed(example, seed, args, directory, record):
        record(seed, "random", {"mean_return": -1.0, "returns": {}})
        for index, point in enumerate(args.at):
            if index == stop_at_point:
                raise Stopped
            value = 10.0 * seed + point / 100
            record(seed, str(point), {"mean_return": value, "returns": {}, "sampled_mean_return": value - 1,
                                      "sampled_returns": {}})

    monkeypatch.setattr(learning_curve, "load_example", lambda path: None)
    monkeypatch.setattr(learning_curve, "run_seed", run_seed)
    monkeypatch.setattr(sys, "argv", ["learning_curve.py", "--example", "x", "--output", str(output), *map(str, arguments)])
    try:
        learning_curve.main()
    except Stopped:
        pass
    return json.loads(output.read_text())


def test_a_resumed_curve_keeps_other_seeds_and_counts_only_what_the_seeds_hold(tmp_path, monkeypatch):
    output = tmp_path / "curve.json"
    run(monkeypatch, output, "--at", 100, "--seeds", 0, 1)
    report = run(monkeypatch, output, "--at", 100, 200, "--seeds", 2)  # seeds 0 and 1 lack point 200: kept
    assert sorted(report["seeds"]) == ["0", "1", "2"]
    assert report["summary"]["100"] == {"mean": 11.0, "min": 1.0, "max": 21.0, "seeds": 3,
                                        "sampled": {"mean": 10.0, "min": 0.0, "max": 20.0, "seeds": 3}}
    assert report["summary"]["200"]["seeds"] == 1

    run(monkeypatch, output, "--at", 100, 200, "--seeds", 3, stop_at_point=1)  # seed 3 stops after point 100
    report = run(monkeypatch, output, "--at", 100, 200, "--seeds", 3, stop_at_point=0)  # again, before point 100
    assert "100" not in report["seeds"]["3"]  # its partial run was dropped, not counted
    assert report["summary"]["100"]["seeds"] == 3 and report["summary"]["100"]["mean"] == 11.0

    with pytest.raises(SystemExit, match="episodes"):
        run(monkeypatch, output, "--at", 100, "--seeds", 0, "--episodes", 7)
