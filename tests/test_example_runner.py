"""The example runner of the tests answers as ``python script.py`` would: a failing script fails."""

import os

from example_runner import EXAMPLE_ENVIRONMENT, ExampleRunner


def test_a_script_run_through_the_example_runner_reports_its_status_output_and_arguments(tmp_path, example_runner):
    script = tmp_path / "script.py"
    script.write_text("import os, sys\n"
                      "print('args', sys.argv[1:], os.environ.get('ONLY'), os.getcwd())\n"
                      "print('to stderr', file=sys.stderr)\n"
                      "if sys.argv[1] == 'raise':\n"
                      "    raise ValueError('broken')\n"
                      "sys.exit(int(sys.argv[1]))\n")
    done = example_runner.run([script, 0], env={"ONLY": "this", **EXAMPLE_ENVIRONMENT}, cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout == f"args ['0'] this {os.path.realpath(tmp_path)}\n" and done.stderr == "to stderr\n"
    assert example_runner.run([script, 3], env=EXAMPLE_ENVIRONMENT).returncode == 3
    failed = example_runner.run([script, "raise"], env=EXAMPLE_ENVIRONMENT)
    assert failed.returncode == 1 and "ValueError: broken" in failed.stderr


def test_the_example_runner_honours_start_up_variables_and_draws_fresh_random_numbers(tmp_path):
    # servers that preload NumPy alone: this test starts three, and what it checks does not need PyTorch
    example_runner = ExampleRunner(preload=("numpy",))
    try:
        check_start_up_variables_and_fresh_random_numbers(tmp_path, example_runner)
    finally:
        example_runner.close()


def check_start_up_variables_and_fresh_random_numbers(tmp_path, example_runner):
    shadow = tmp_path / "shadow" / "marlparts"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    script = tmp_path / "script.py"
    script.write_text("import warnings, marlparts, numpy\n"
                      "print(marlparts.__file__, numpy.random.random())\n"
                      "warnings.warn('as an error?')\n")
    shadowed = example_runner.run([script], env={"PYTHONPATH": str(tmp_path / "shadow")})
    assert shadowed.returncode == 0 and shadowed.stdout.startswith(str(shadow / "__init__.py"))
    assert example_runner.run([script], env={"PYTHONWARNINGS": "error"}).returncode == 1
    draws = {example_runner.run([script], env={}).stdout.split()[1] for _ in range(2)}
    assert len(draws) == 2, "two runs drew the same NumPy random number"
