"""Kernels forked from the pre-imported zygote stay in the sandbox bubblewrap gave them.

Real zygote, real kernels through jupyter_client and the kit's own kernelspec and launcher;
each probe is code a learner's cell could run. The adversarial batch (test_adversarial.py)
grades its attacks through this same path.
"""

import json
import os
import random
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from grader.kit.authoring.nbsource import REPO_ROOT
from grader.kit.grading.limits import Limits
from grader.kit.sandbox import cgroups
from grader.kit.sandbox.kernel_setup import (
    KERNEL_NAME,
    kernel_settings,
    kernel_tempdir,
    prepare_kernel,
)
from grader.kit.sandbox.zygote_client import Zygote


@pytest.fixture(scope="module", params=["user-namespace", "root-without-user-namespace"])
def zygote(request):
    """A serving zygote; its kernels get a user namespace, or (root only) bubblewrap's way as
    root: real capabilities for the setup, none left for the kernel."""
    if request.param == "root-without-user-namespace":
        if os.geteuid() != 0:
            pytest.skip("only root builds the sandbox without a user namespace")
        os.environ["CH34_SANDBOX_USER_NAMESPACE"] = "0"
    try:
        started = Zygote(threads=1)
    finally:
        os.environ.pop("CH34_SANDBOX_USER_NAMESPACE", None)
    assert started.problem is None, started.problem
    started.user_namespace = request.param == "user-namespace"
    yield started
    started.stop()


@pytest.fixture
def workdirs():
    """Short folders for kernels' working copies (their IPC sockets need short paths)."""
    root = kernel_tempdir("ch34-zygote-test-", below="/0000/runtime/kernel-99999")
    yield root
    import shutil

    shutil.rmtree(root, ignore_errors=True)


class Kernel:
    """A kernel of one working copy, started the way the forked grader starts it."""

    def __init__(self, workdir: Path, zygote: Zygote, limits=Limits(), groups=()):
        self.workdir = workdir
        prepare_kernel(workdir, limits)
        # two threads, not the suite's own one (conftest): the kernel's count must come from here
        settings = kernel_settings(workdir, limits, True, 2, list(groups), zygote.socket)
        specs = KernelSpecManager(kernel_dirs=[str(workdir / "kernels")])
        self.manager = KernelManager(
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=specs,
            transport="ipc",
            ip=str(workdir / "runtime" / "kernel"),
            connection_file=str(workdir / "connection.json"),  # the launcher copies it in
        )
        self.manager.start_kernel(env={**os.environ, **settings})
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(self, code: str) -> str:
        """What `code` printed; the error's name and message if it raised."""
        said = []

        def hook(message):
            content = message["content"]
            if message["msg_type"] == "stream":
                said.append(content["text"])
            elif message["msg_type"] == "error":
                said.append(f"{content['ename']}: {content['evalue']}")

        self.client.execute_interactive(textwrap.dedent(code), output_hook=hook, timeout=60)
        return "".join(said)

    def value(self, expression: str):
        return json.loads(self.run(f"import json\nprint(json.dumps({expression}))"))

    def stop(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(zygote, workdirs):
    started = Kernel(workdirs / "0000", zygote)
    yield started
    started.stop()


def test_kernel_sees_its_scratch_but_not_the_repository_the_zygote_or_other_submissions(
    zygote, workdirs, kernel
):
    other = workdirs / "0001" / "scratch"
    other.mkdir(parents=True)
    (other / "answers.py").write_text("HIDDEN = 1\n")
    seen = kernel.value(
        f"""{{
        "cwd": __import__("os").getcwd(),
        "repo": __import__("os").path.exists({str(REPO_ROOT / "grader")!r}),
        "other": __import__("os").path.exists({str(other)!r}),
        "socket": __import__("os").path.exists({str(zygote.socket)!r}),
        "root": sorted(__import__("os").listdir("/")),
        }}"""
    )
    assert seen["cwd"] == str(kernel.workdir / "scratch")
    assert not seen["repo"] and not seen["other"] and not seen["socket"], seen
    assert set(seen["root"]) <= {
        "usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "sys", "dev", "proc",
        "tmp", *(Path(p).resolve().parts[1] for p in (sys.prefix, sys.base_prefix)),
    }, seen["root"]  # fmt: skip


def test_only_scratch_runtime_and_private_mounts_are_writable(kernel):
    # Down to every sub-mount: /sys/fs/cgroup writable would let a kernel leave its cgroups.
    table = kernel.run("print(open('/proc/self/mountinfo').read())")
    scratch, runtime = str(kernel.workdir / "scratch"), str(kernel.workdir / "runtime")
    private = {"/", "/dev", "/dev/shm", "/proc", "/tmp", scratch, runtime}
    devices = {f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom", "tty")}
    writable = {
        fields[4]
        for fields in map(str.split, table.strip().splitlines())
        if "rw" in fields[5].split(",")
    }
    assert writable - private - devices == set(), writable - private - devices
    read_only = {
        fields[4]
        for fields in map(str.split, table.strip().splitlines())
        if "ro" in fields[5].split(",")
    }
    # Root may write these without a capability: global settings, and a reboot (where the
    # host's kernel has the trigger at all).
    covered = {p for p in ("/proc/sys", "/proc/sysrq-trigger") if os.path.exists(p)}
    assert "/proc/sys" in covered and covered <= read_only, read_only
    probes = [sys.prefix + "/pwned", "/usr/pwned", "/proc/sys/vm/drop_caches"]
    probes += sorted(covered - {"/proc/sys"})
    assert len(table.splitlines()) > 5 and any(
        f.startswith("/sys/fs/cgroup") for f in table.split()
    )
    said = kernel.run(
        f"""
        import errno
        for path in {probes!r}:
            try:
                open(path, "a").close()  # opened, never written: a write here would act
                print("WROTE", path)
            except OSError as error:
                print(errno.errorcode[error.errno], path)
        """
    )
    assert said.count("EROFS") == len(probes), said


def test_kernel_has_no_capabilities_and_a_user_namespace_of_its_own_cannot_remount(kernel):
    status = kernel.run("print(open('/proc/self/status').read())")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    for name in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert int(fields[name], 16) == 0, (name, fields[name])
    assert fields["NoNewPrivs"].strip() == "1"
    # In a child (unshare needs a single thread), as root of a new user namespace: the
    # sandbox's mounts came from a more privileged namespace, so they are locked.
    said = kernel.run(
        f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        read, write = os.pipe()
        if os.fork() == 0:
            os.close(read)
            out = []
            if libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
                out.append("unshare refused")
            else:
                remount = libc.mount(None, {sys.prefix.encode()!r}, None, 0x20 | 0x1000, None)
                out.append("remount rw: " + ("DONE" if remount == 0 else os.strerror(ctypes.get_errno())))
                gone = libc.umount2(b"/usr", 2)
                out.append("umount /usr: " + ("DONE" if gone == 0 else os.strerror(ctypes.get_errno())))
            os.write(write, "; ".join(out).encode())
            os._exit(0)
        os.close(write)
        print(os.read(read, 1000).decode())
        os.wait()
        """
    )
    assert "DONE" not in said and said.strip(), said


def test_kernel_is_in_a_user_namespace_of_its_own_unless_root_went_without(zygote, kernel):
    # uid_map: one id mapped in a user namespace of its own; the whole range in the host's.
    mapped = kernel.run("print(open('/proc/self/uid_map').read().split())")
    assert (mapped.split(",")[-1].strip(" ']\n") == "1") == zygote.user_namespace, mapped


def test_kernel_has_only_loopback_and_no_route_out(kernel):
    said = kernel.run(
        """
        import socket
        print(sorted(name for _, name in socket.if_nameindex()))
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=3)
            print("CONNECTED")
        except OSError as error:
            print("refused:", error)
        """
    )
    assert said.startswith("['lo']") and "CONNECTED" not in said, said


def test_kernel_sees_only_its_own_processes(kernel):
    seen = kernel.value(
        "[__import__('os').getpid(), sorted(int(p) for p in __import__('os').listdir('/proc') if p.isdigit())]"
    )
    assert seen[0] == 2 and seen[1] == [1, 2], seen


def test_kernel_environment_is_a_learners_not_the_graders(kernel):
    seen = kernel.value(
        "[dict(__import__('os').environ), __import__('sys').path[0], "
        "__import__('resource').getrlimit(__import__('resource').RLIMIT_AS)[0]]"
    )
    environment, first_path, address_space = seen
    hidden = ("NBGRADER_EXECUTION", "JPY_PARENT_PID")  # and the sandbox's own settings
    assert not [k for k in environment if k.startswith("CH34_SANDBOX_") or k in hidden]
    assert environment["HOME"] == first_path == str(kernel.workdir / "scratch")
    assert environment["TMPDIR"] == "/tmp" and environment["OMP_NUM_THREADS"] == "2"
    assert address_space == Limits().memory_bytes


def test_kernel_holds_no_descriptor_of_the_zygote(zygote, kernel):
    said = kernel.run(
        """
        import os, socket
        for fd in map(int, os.listdir("/proc/self/fd")):
            try:
                with socket.socket(fileno=os.dup(fd)) as s:
                    if s.family == socket.AF_UNIX:
                        print(fd, s.type, repr(s.getsockname()), repr(s.getpeername()))
            except OSError:
                pass  # not a socket
        """
    )
    assert str(zygote.socket) not in said, said


def test_two_kernels_share_no_tmp_no_shm_and_no_random_state(zygote, workdirs):
    first, second = Kernel(workdirs / "0000", zygote), Kernel(workdirs / "0001", zygote)
    try:
        first.run("open('/tmp/mine', 'w').write('a'); open('/dev/shm/mine', 'w').write('a')")
        assert second.value(
            "[__import__('os').path.exists(p) for p in ('/tmp/mine', '/dev/shm/mine')]"
        ) == [False, False]
        draws = [k.value("__import__('random').random()") for k in (first, second)]
        assert draws[0] != draws[1], "forked kernels must not share one random sequence"
        tensors = [k.value("__import__('torch').rand(3).tolist()") for k in (first, second)]
        assert tensors[0] == tensors[1], "torch's default seed, as in a fresh process"
    finally:
        first.stop()
        second.stop()


def test_a_killed_launcher_takes_the_kernel_and_its_detached_children_along(kernel):
    seconds = unique_sleep()
    said = kernel.run(
        f"import subprocess\nsubprocess.Popen(['sleep', '{seconds}'], start_new_session=True)\n"
    )
    assert once_running(f"sleep\x00{seconds}\x00"), f"the detached process did not start: {said}"
    kernel.stop()  # jupyter_client kills the launcher, as nbclient does after the last cell
    assert survivors(f"sleep\x00{seconds}\x00") == []


def test_kernel_counts_in_its_submissions_cgroups(zygote, workdirs):
    bases = cgroups.available()
    if "pids" not in bases:
        pytest.skip("no writable pids cgroup here")
    groups = cgroups.make_groups(bases, workdirs.name, {"pids": 64})
    started = Kernel(workdirs / "0000", zygote, groups=groups)
    try:
        said = started.run(
            """
            import threading, time
            made = 0
            try:
                for _ in range(200):
                    threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
                    made += 1
            except RuntimeError:
                pass
            print(made)
            """
        )
        assert 0 < int(said) < 64, said
    finally:
        started.stop()
        time.sleep(0.2)
        cgroups.remove(groups)


def unique_sleep() -> int:
    """A `sleep` length no other run's leftover has: a process found later is this test's."""
    return random.randrange(100_000, 999_999)


def survivors(text: str, seconds: float = 20) -> list[str]:
    """Processes whose command line holds `text` once none are left or `seconds` have passed
    (SIGKILL is asynchronous), each with its state and parent, to say where it hangs."""
    wait_until(lambda: not processes_with(text), seconds)
    found = []
    for pid in processes_with(text):
        try:
            status = (Path("/proc") / str(pid) / "status").read_text().splitlines()
        except OSError:
            continue  # gone since
        found.append(
            f"{pid}: " + "; ".join(x for x in status if x.startswith(("State", "PPid", "NSpid")))
        )
    return found


def once_running(text: str, seconds: float = 30) -> list[int]:
    """Processes whose command line holds `text`, once there is one or `seconds` have passed.

    The cell that starts the process has returned, yet with both cores busy the process was once
    not found right after (CI run of 2026-12-02): wait for the condition, never read it once."""
    wait_until(lambda: processes_with(text), seconds)
    return processes_with(text)


def wait_until(condition, seconds: float) -> None:
    """Return once `condition()` is true or `seconds` have passed; the caller judges."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def processes_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_text():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_zygote_gone_means_its_kernels_are_gone(workdirs):
    seconds = unique_sleep()
    zygote = Zygote(threads=1)
    try:
        assert zygote.serving, zygote.problem  # it has started: its kernels can be asked for
        started = Kernel(workdirs / "0000", zygote)
        said = started.run(
            f"import subprocess\nsubprocess.Popen(['sleep', '{seconds}'], start_new_session=True)"
        )
        assert once_running(f"sleep\x00{seconds}\x00"), f"did not start: {said}"
        os.kill(zygote.process.pid, signal.SIGKILL)
        assert survivors(f"sleep\x00{seconds}\x00") == []
        started.client.stop_channels()
    finally:
        zygote.stop()  # its folder too, even when an assertion failed


def test_the_zygote_shows_kernels_the_same_system_paths_as_bubblewrap():
    # Two standalone scripts (neither may import the other's folder): one whitelist between them.
    from grader.kit.sandbox import launcher, zygote_server

    assert zygote_server.SYSTEM_PATHS == launcher.SYSTEM_PATHS
