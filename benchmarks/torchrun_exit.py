"""How often a torchrun rank dies at exit: the torchrun tests' script, run again and again.

    python benchmarks/torchrun_exit.py --runs 20 --busy 1
    python benchmarks/torchrun_exit.py --runs 4 --busy 1 --variant maddpg --variant happo --variant different-spaces
    python benchmarks/torchrun_exit.py --runs 10 --busy 0 --variant in-flight --root <a checkout of older code>

Each run launches ``tests/distributed_run.py`` as ``tests/test_distributed.py`` does (``torchrun
--standalone --nproc_per_node=2``, same arguments) while ``--busy`` processes spin on the CPU beside
it (a rank that is slow to shut down is where a race at exit shows). The ``in-flight`` variant runs
``torchrun_exit_rank.py`` instead, where rank 0's last all-reduce finishes during its interpreter's
shutdown unless the process group was freed before. A run counts as an abort when a rank's output
says ``terminate called`` or torchrun reports a rank killed by a signal; every run must exit 0,
except the ``different-spaces`` variant, which must fail with its clear error and without an abort.
``--root`` measures another checkout (its ``marlparts`` and ``tests/distributed_run.py``); with
``--cores DIR`` the ranks run in DIR with core files enabled, for ``gdb``. The figures are printed
and written to ``benchmarks/results/torchrun_exit.json`` (``--output``).
"""

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
IN_FLIGHT = ROOT / "benchmarks" / "torchrun_exit_rank.py"
VARIANTS = {"mappo": [], "maddpg": ["--algorithm", "maddpg"], "happo": ["--algorithm", "happo"],
            "different-spaces": ["--different-spaces"], "in-flight": []}
ABORT_SIGNS = ("terminate called", "Signal 6", "SIGABRT", "exitcode  : -6", "SIGSEGV", "exitcode  : -11")


def enable_core_files() -> None:
    """In the child before exec: no limit on core files (the kernel writes them where the rank runs)."""
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def one_run(variant: str, root: pathlib.Path, cores: str = "") -> dict:
    """One torchrun launch of the test script of ``root``; its exit status and whether a rank aborted."""
    with tempfile.TemporaryDirectory() as out:
        script = [str(IN_FLIGHT)] if variant == "in-flight" else [str(root / "tests" / "distributed_run.py"), out]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                               *script, *VARIANTS[variant]], capture_output=True, text=True, timeout=900,
                              cwd=cores or None, preexec_fn=enable_core_files if cores else None,
                              env={**os.environ, "PYTHONPATH": str(root)})
        seconds = time.perf_counter() - start
        exits = [(pathlib.Path(out) / f"exit{rank}.txt").read_text() if (pathlib.Path(out) / f"exit{rank}.txt").exists()
                 else "missing" for rank in (0, 1)]
    output = done.stdout + done.stderr
    aborted = any(sign in output for sign in ABORT_SIGNS)
    if variant == "different-spaces":
        as_expected = done.returncode != 0 and "the ranks do not agree on what they train" in done.stderr
    else:
        as_expected = done.returncode == 0
    return {"variant": variant, "returncode": done.returncode, "aborted": aborted, "as_expected": as_expected and not aborted,
            "exit_files": exits, "seconds": round(seconds, 1),
            "abort_output": output[-3000:] if aborted or not as_expected else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="runs of each variant")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="repeatable; mappo by default")
    parser.add_argument("--busy", type=int, default=1, help="processes that spin on the CPU during the runs")
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose marlparts and test script run")
    parser.add_argument("--cores", default="", help="a folder where the ranks run with core files enabled")
    parser.add_argument("--label", default="", help="what the code under test is (e.g. a commit)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "torchrun_exit.json"))
    args = parser.parse_args()
    variants = args.variant or ["mappo"]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    runs = []
    try:
        for index in range(args.runs):
            for variant in variants:
                run = one_run(variant, pathlib.Path(args.root).resolve(), args.cores)
                runs.append(run)
                print(f"run {index} {variant}: exit status {run['returncode']}, exit files {run['exit_files']}, "
                      f"{'ABORTED' if run['aborted'] else 'no abort'}, {run['seconds']} s", flush=True)
                if run["abort_output"]:
                    print(run["abort_output"][-1500:], flush=True)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    summary = {variant: {"runs": sum(run["variant"] == variant for run in runs),
                         "aborted": sum(run["aborted"] for run in runs if run["variant"] == variant),
                         "not_as_expected": sum(not run["as_expected"] for run in runs if run["variant"] == variant)}
               for variant in variants}
    result = {"label": args.label, "root": args.root, "busy_processes": args.busy,
              "summary": summary, "runs": runs}
    pathlib.Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.output).write_text(json.dumps(result, indent=2))
    for variant, figures in summary.items():
        print(f"{variant}: {figures['aborted']} of {figures['runs']} runs aborted, "
              f"{figures['not_as_expected']} did not end as expected")


if __name__ == "__main__":
    main()
