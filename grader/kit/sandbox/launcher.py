"""Start one notebook kernel in the sandbox (the kernelspec's argv points here): forked from the
batch's zygote (`zygote_server.py`) when there is one, else afresh inside bubblewrap.

    python launcher.py {connection_file}
    python launcher.py --check      # start this interpreter in the same sandbox, import ipykernel, exit

Run by jupyter_client, never imported by the kit's other modules (the kernel launches with
an unknown working directory, so this file imports nothing from the repository). Its
settings come from the environment the grader sets for one submission:

    CH34_SANDBOX_SCRATCH   the only writable directory; the kernel starts there
    CH34_SANDBOX_PYTHON    the Python installations the kernel needs (os.pathsep-separated:
                           the venv, the interpreter it was made from), visible read-only
    CH34_SANDBOX_MEMORY    address-space limit in bytes
    CH34_SANDBOX_BWRAP     "1" to use bubblewrap, "0" to run the kernel unsandboxed
    CH34_SANDBOX_ZYGOTE    where set, the socket of the batch's zygote (`zygote_server.py`): the
                           kernel is forked from it, into the same sandbox built without
                           bubblewrap, and this process stands for it until it ends
    CH34_SANDBOX_CGROUPS   the submission's cgroups (os.pathsep-separated), for the zygote's kernel

The kernel's file system is a whitelist: the system's programs and libraries (/usr, /etc,
/lib...), the Python installations, a private /tmp, the scratch directory and the runtime
directory. Nothing else exists in there: not the repository, not the gradebook, not other
submissions, not another copy of the course. It has no network (the kernel talks to the
grader over IPC sockets in the runtime directory), its own PID namespace, and no
NBGRADER_EXECUTION variable, so a notebook cannot tell grading from a learner's own run.
"""

import json
import os
import resource
import runpy
import shutil
import socket
import sys

# The whitelist, shared with the zygote (`whitelist.py`, read by its path: nothing of the kit is
# importable here).
WHITELIST = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "whitelist.py"))
SYSTEM_PATHS = WHITELIST["SYSTEM_PATHS"]


def grader_variables() -> list:
    """The variables of this environment the kernel must not see (`whitelist.py`)."""
    prefix = WHITELIST["REMOVED_PREFIX"]
    return [*WHITELIST["REMOVED_VARIABLES"], *(v for v in os.environ if v.startswith(prefix))]


def sandbox_argv(connection_file: str) -> list:
    """The bwrap command line that runs ipykernel on `connection_file`."""
    # With the IPC transport the connection file's "ip" is the path prefix of the sockets:
    # that directory, and a copy of the connection file in it, is all the kernel shares with us.
    runtime_dir = os.path.dirname(json_ip(connection_file))
    connection_file = shutil.copy(connection_file, runtime_dir)
    return bwrap_argv(runtime_dir) + [
        sys.executable,
        "-m",
        "ipykernel_launcher",
        "-f",
        connection_file,
    ]


def bwrap_argv(runtime_dir: str) -> list:
    """bubblewrap's options, up to the command: the file system, namespaces and environment.

    This interpreter (`sys.executable`, the kernelspec's argv[0]) must be reachable inside:
    its path may not go through a symlinked directory that is not bound (the grader passes
    the path with its directories resolved, and the resolved Python trees to bind).
    """
    scratch = os.environ["CH34_SANDBOX_SCRATCH"]
    argv = ["bwrap", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in SYSTEM_PATHS:
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for path in listed_paths("CH34_SANDBOX_PYTHON"):
        argv += ["--ro-bind", path, path]
    argv += ["--bind", scratch, scratch, "--bind", runtime_dir, runtime_dir, "--chdir", scratch]
    argv += [
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
    ]
    argv += ["--setenv", "HOME", scratch, "--setenv", "TMPDIR", "/tmp"]
    for name in grader_variables():
        argv += ["--unsetenv", name]
    return argv


def listed_paths(variable: str) -> list:
    """The os.pathsep-separated paths in environment `variable` (none when it is unset)."""
    return [path for path in os.environ.get(variable, "").split(os.pathsep) if path]


def json_ip(connection_file: str) -> str:
    """The absolute IPC socket prefix recorded in the connection file."""
    with open(connection_file, encoding="utf-8") as handle:
        return os.path.abspath(json.load(handle)["ip"])


def check() -> int:
    """Start this interpreter exactly as a kernel would start, import ipykernel, and exit.

    Its exit status and stderr are bubblewrap's or Python's own: the grader shows them to the
    instructor when the kernel cannot start (a path the sandbox does not show, a missing package).
    """
    import subprocess

    command = [sys.executable, "-c", "import ipykernel.kernelapp"]
    if os.environ.get("CH34_SANDBOX_BWRAP", "1") == "1":
        command = bwrap_argv(os.environ["CH34_SANDBOX_SCRATCH"]) + command
    return subprocess.run(command, stdin=subprocess.DEVNULL).returncode


def kernel_log(runtime_dir: str) -> int:
    """The kernel's own banner and warnings go to a log beside the sockets, not to the grader's terminal."""
    return os.open(
        os.path.join(runtime_dir, "kernel.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )


def kernel_environment() -> dict:
    """The environment the kernel gets: this one without the grader's variables."""
    scratch = os.environ["CH34_SANDBOX_SCRATCH"]
    removed = grader_variables()
    kept = {k: v for k, v in os.environ.items() if k not in removed}
    return {**kept, "HOME": scratch, "TMPDIR": "/tmp"}


def run_in_zygote(connection_file: str, zygote_socket: str) -> int:
    """Have the zygote fork the kernel; wait for its end and exit with its status.

    jupyter_client sees this process as the kernel: when it (or the grader's reaper) kills
    this one, the zygote sees the socket close and kills the kernel with all it started.
    """
    runtime_dir = os.path.dirname(json_ip(connection_file))
    log = kernel_log(runtime_dir)
    os.dup2(log, 1)  # a failure here, like the kernel's own words, goes to its log
    os.dup2(log, 2)
    request = {
        "connection_file": shutil.copy(connection_file, runtime_dir),
        "scratch": os.environ["CH34_SANDBOX_SCRATCH"],
        "runtime": runtime_dir,
        "python_roots": listed_paths("CH34_SANDBOX_PYTHON"),
        "memory": int(os.environ.get("CH34_SANDBOX_MEMORY", "0")),
        "cgroups": listed_paths("CH34_SANDBOX_CGROUPS"),
        "env": kernel_environment(),
    }
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as zygote:
        zygote.connect(zygote_socket)
        socket.send_fds(zygote, [json.dumps(request).encode()], [log])
        reply = zygote.recv(64).decode()  # "exit <status>"; empty if the zygote itself died
    return int(reply.split()[1]) & 0xFF if reply.startswith("exit ") else 1


def main() -> None:
    if sys.argv[1] == "--check":
        sys.exit(check())
    connection_file = sys.argv[1]
    zygote_socket = os.environ.get("CH34_SANDBOX_ZYGOTE")
    if zygote_socket:
        sys.exit(run_in_zygote(connection_file, zygote_socket))
    memory = int(os.environ.get("CH34_SANDBOX_MEMORY", "0"))
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    if os.environ.get("CH34_SANDBOX_BWRAP", "1") == "1":
        argv = sandbox_argv(connection_file)
    else:
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file]
        for name in grader_variables():
            os.environ.pop(name, None)
    log = kernel_log(os.path.dirname(json_ip(connection_file)))
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
