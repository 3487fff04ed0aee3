"""Run example scripts as ``python script.py ARGS`` would, each in a process of its own, without paying the
imports of PyTorch and the library for every run.

A server (this file, run as a script) imports the heavy modules once and then forks one child per request.
The child sets up what a fresh interpreter running the script would have (``sys.argv``, the script's folder
first on ``sys.path``, the environment, the working directory, stdin from ``/dev/null``, stdout and stderr to
files, NumPy's global generator seeded afresh), runs the script as ``__main__`` and exits through the
interpreter's normal shutdown, so exit handlers and buffered output behave as in a fresh process. Nothing but
imports runs in the server before a fork (and one optimizer built, for its lazy imports). Before each fork the
server collects its garbage and moves its live objects out of the collector's reach (``gc.collect()``, then
``gc.freeze()``, the recipe Python's documentation gives for forking servers): otherwise the child's collections,
the last one at its exit included, would write to every object the imports made and copy each memory page they
sit on, about 1.2 of the 1.8 s a child took to exit.

What an interpreter reads only at its start (``PYTHON*`` variables such as ``PYTHONPATH`` or
``PYTHONWARNINGS``, thread counts) cannot change in a forked child: :class:`ExampleRunner` keeps one server
per distinct set of those variables, started with them. What still differs from a fresh interpreter: the
children of one server share its hash seed (unless ``PYTHONHASHSEED`` is set), the variables that the
preloaded imports set are in every child's environment, and the preloaded modules are already imported
(a script that uses ``marlparts.agents`` after a bare ``import marlparts`` would not fail here), and the objects
those imports made are frozen (``gc.freeze``): a cycle of them that the child leaves unreachable is not collected,
and ``gc.get_objects()`` does not list them. The README's and the docs' code blocks therefore run in fresh
interpreters (tests/test_docs.py).
"""

import gc
import json
import os
import pathlib
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from typing import Dict, Optional, Sequence, Tuple

import numpy

# the environment the example tests run their scripts in: every test that passes it is served by one server
# (a server per set of start-up variables), which has already paid its imports
EXAMPLE_ENVIRONMENT = {"TQDM_DISABLE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}

# imported once by the server, before any fork: the modules every example needs
PRELOADED = ("torch", "numpy", "gymnasium", "pettingzoo", "marlparts", "marlparts.agents", "marlparts.envs",
             "marlparts.trainers", "marlparts.models", "marlparts.memories")


def run_child(request: Dict, set_by_imports: Dict[str, str]) -> int:
    """In the forked child: become ``python script ARGS`` and run it; the exit status. ``set_by_imports``: the
    environment variables that the preloaded imports set (as they would have in a fresh process)."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for descriptor, path in ((1, request["stdout"]), (2, request["stderr"])):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, descriptor)
        os.close(handle)
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update(set_by_imports)
    os.chdir(request["cwd"])
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = str(pathlib.Path(script).resolve().parent)  # PYTHONPATH's entries follow, as the server's
    numpy.random.seed()  # a fresh interpreter draws its own: forked children would share the server's
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - reported as a fresh interpreter would: traceback, status 1
        traceback.print_exc()
        return 1
    return 0


def serve(preload: Sequence[str] = PRELOADED) -> Optional[int]:
    """The server loop: imports ``preload``, then reads one JSON request per line on stdin and writes one JSON
    answer per line on the answer channel (``{"pid": ...}`` when the child starts, ``{"returncode": ...}`` when
    it ends). Returns in a child, with the child's exit status; returns None when stdin closes.
    """
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing a module prints can reach the answer channel
    before = dict(os.environ)
    for module in preload:
        __import__(module)
    if "torch" in preload:  # PyTorch imports several hundred modules lazily at the first optimizer built
        import torch  # (about 1.6 s): once, here

        torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    set_by_imports = {name: value for name, value in os.environ.items() if before.get(name) != value}
    answers.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        gc.collect()  # (the server's own garbage is not handed to every child, frozen)
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            answers.close()
            return run_child(request, set_by_imports)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
    return None


def start_up_variables(env: Dict[str, str]) -> Tuple[Tuple[str, str], ...]:
    """The variables of ``env`` that an interpreter (or a library it imports) reads only at its start."""
    return tuple(sorted((name, value) for name, value in env.items()
                        if name.startswith("PYTHON") or name.endswith("_NUM_THREADS")))


class Server:
    """One server process, started with the given start-up variables, that imports the modules of ``preload``."""

    def __init__(self, variables: Tuple[Tuple[str, str], ...], preload: Sequence[str] = PRELOADED) -> None:
        environment = {"PATH": "/usr/bin:/bin", **dict(variables)}
        self.process = subprocess.Popen([sys.executable, __file__, *preload], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=environment)
        ready = self.answer(timeout=120)
        if not ready.get("ready"):
            raise RuntimeError(f"the example server did not start: {ready}")

    def answer(self, timeout: float) -> Dict:
        """The server's next answer."""
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not readable:
            raise subprocess.TimeoutExpired(cmd="example server", timeout=timeout)
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the example server ended (status {self.process.poll()})")
        return json.loads(line)

    def ask(self, request: Dict) -> None:
        """Send one request."""
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        """Stop the server."""
        self.process.stdin.close()
        self.process.wait(timeout=60)


class ExampleRunner:
    """The test side: runs scripts through a server started with the request's start-up variables (one per
    distinct set), answering like :func:`subprocess.run` with ``capture_output=True, text=True``. ``preload``:
    the modules each server imports before it forks (the examples' heavy imports by default).
    """

    def __init__(self, preload: Sequence[str] = PRELOADED) -> None:
        self.preload = tuple(preload)
        self.folder = tempfile.mkdtemp(prefix="example-runner-")
        self.servers: Dict[Tuple[Tuple[str, str], ...], Server] = {}
        self.runs = 0

    def run(self, argv: Sequence, *, env: Dict[str, str], cwd: Optional[str] = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
        """Run ``python argv[0] argv[1:]`` with environment ``env`` in ``cwd``; its status and output."""
        variables = start_up_variables(env)
        if variables not in self.servers:
            self.servers[variables] = Server(variables, self.preload)
        server = self.servers[variables]
        self.runs += 1
        stdout = os.path.join(self.folder, f"{self.runs}.out")
        stderr = os.path.join(self.folder, f"{self.runs}.err")
        server.ask({"argv": [str(argument) for argument in argv], "env": dict(env), "cwd": str(cwd or os.getcwd()),
                    "stdout": stdout, "stderr": stderr})
        pid = server.answer(timeout=60)["pid"]
        try:
            returncode = server.answer(timeout=timeout)["returncode"]
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            server.answer(timeout=60)
            raise
        output = [pathlib.Path(path).read_text(errors="replace") for path in (stdout, stderr)]
        return subprocess.CompletedProcess(list(argv), returncode, output[0], output[1])

    def close(self) -> None:
        """Stop every server."""
        for server in self.servers.values():
            server.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:] or PRELOADED))
