"""Pre-imported kernels: every notebook kernel of a batch is forked from one process (the zygote)
that imported torch and ipykernel once, into Linux namespaces of its own.

    python zygote_server.py SOCKET PARENT_PID

Started by the batch grader (`zygote_client.Zygote`) once a batch; once it has tested the sandbox
and imported what kernels need it prints "ready" (or "unavailable: <why>", or an import's
traceback, and exits), then serves the kernel launcher (`launcher.py`) on the Unix socket
SOCKET until it is killed; it dies with PARENT_PID. Its self-test binds the Python trees
named in CH34_SANDBOX_PYTHON, as every kernel's request will. Imports nothing from the repository: like `launcher.py` it
runs with an unknown working directory.

Why: a kernel that starts from nothing spends about 3 CPU-s importing torch, IPython and
ipykernel, as much as the whole notebook then takes to run. bubblewrap cannot help here: it
isolates a command by exec'ing it, and an exec throws the imports away. So each forked kernel
builds the same sandbox itself, with the same system calls bubblewrap makes:

    zygote      serves launch requests; trusted code only, never reads a submission's files
    └ monitor   enters the submission's cgroups, unshares the user, mount, PID, network, IPC
      │         and UTS namespaces, reports the kernel's exit status to the zygote
      └ init    PID 1 in the new PID namespace: builds the file system, drops every
        │       capability, reaps orphans; when the kernel ends, everything in here ends
        └ kernel  PID 2: limits, environment, argv as `python -m ipykernel_launcher`; runs it

The kernel's file system is bubblewrap's whitelist from `launcher.py`: /dev with the usual
devices only, its own /proc (with /proc/sys, sysrq-trigger, irq and bus read-only, as
bubblewrap covers them), a private /tmp and /dev/shm, the system's programs and libraries
and the Python installations read-only (sub-mounts too: /sys/fs/cgroup stays read-only), the
scratch and runtime directories read-write; the repository, the course, other submissions
and the zygote's socket do not exist in there. It has no capabilities (none in its bounding
set either, and no_new_privs), so it cannot remount, unmount or exec its way to more; a user
namespace it creates itself gets these mounts locked, as the kernel documents for mounts
copied into a less privileged namespace. Loopback is its only network interface.

Protocol (SOCK_SEQPACKET, one message each way): the launcher sends a JSON request (see
`launcher.py`) with the kernel log's file descriptor attached; the zygote answers
"exit <status>" when the kernel has ended. A launcher that goes away (killed by
jupyter_client or by the grader's reaper) takes its kernel with it: the zygote SIGKILLs the
monitor, and each process below has a parent-death signal.
"""

import ctypes
import fcntl
import json
import os
import platform
import re
import resource
import runpy
import selectors
import signal
import socket
import struct
import sys
import traceback

# from <sched.h>, <sys/mount.h>, <linux/prctl.h>, <linux/capability.h>, <linux/sockios.h>
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH = 0x2
# A bind mount's remount must repeat the flags its source has (the kernel locks them).
MOUNT_OPTIONS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": 0x400,
    "nodiratime": 0x800,
    "relatime": 0x200000,
    "strictatime": 0x1000000,
}
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
SYSCALLS = {
    "x86_64": {"pivot_root": 155, "capset": 126},
    "aarch64": {"pivot_root": 41, "capset": 91},
}

# What the kernel sees: the whitelist bubblewrap's command line (launcher.py) is built from too,
# read by its path (this script imports nothing of the kit).
WHITELIST = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "whitelist.py"))
SYSTEM_PATHS = WHITELIST["SYSTEM_PATHS"]
DEVICES = WHITELIST["DEVICES"]
PROC_COVERED = WHITELIST["PROC_COVERED"]
# What every kernel imports for itself, listed from a graded kernel's sys.modules: torch
# (about 2.5 CPU-s), IPython and ipykernel (0.5), then what the kernel imports as it starts:
# its debugger (debugpy), completion and inspection helpers, tornado's queues; and what
# the hidden checks import (statistics).
PRELOAD = (
    "torch",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",
    "IPython.core.interactiveshell",
    "IPython.core.debugger",
    "IPython.core.completerlib",
    "IPython.core.logger",
    "IPython.core.oinspect",
    "IPython.extensions.storemagic",
    "tornado.platform.asyncio",
    "tornado.queues",
    "faulthandler",
    "statistics",
)

libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def syscall(name: str, *args) -> int:
    return libc.syscall(SYSCALLS[platform.machine()][name], *args)


def c_path(text):
    """A str or bytes path as C wants it; None stays NULL."""
    return None if text is None else os.fsencode(text)


def mount(source, target, fstype, flags, data=None) -> None:
    arguments = map(c_path, (source, target, fstype))
    check(
        libc.mount(*arguments, ctypes.c_ulong(flags), c_path(data)),
        f"mount {source or fstype} on {target}",
    )


def set_death_signal(parent: int) -> None:
    """Die with `parent` (SIGKILL), including when it died before this line ran."""
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if os.getppid() != parent:
        os._exit(1)


# --- the zygote --------------------------------------------------------------------------


def serve(listener: socket.socket, user_namespace: bool) -> None:
    """Fork a monitor for each request; answer each launcher when its kernel ended.

    `user_namespace`: whether kernels get one (the way the self-test found to work)."""
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    launchers = {}  # monitor pid -> the launcher's connection
    while True:
        for key, _ in selector.select(timeout=0.05):
            if key.fileobj is listener:
                connection, _ = listener.accept()
                monitor = accept_request(connection, selector, listener, launchers, user_namespace)
                if monitor is None:
                    connection.close()
                    continue
                launchers[monitor] = connection
                selector.register(connection, selectors.EVENT_READ, monitor)
            else:  # the launcher went away (or said something it should not): end its kernel
                try:
                    os.kill(key.data, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                selector.unregister(key.fileobj)
                key.fileobj.close()
                launchers.pop(key.data, None)
        while True:  # reap: each ended monitor's status goes to its launcher
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            connection = launchers.pop(pid, None)
            if connection is not None:
                try:
                    connection.send(b"exit %d" % os.waitstatus_to_exitcode(status))
                except OSError:
                    pass
                selector.unregister(connection)
                connection.close()


def accept_request(connection, selector, listener, launchers, user_namespace) -> int | None:
    """Read one request and fork its monitor; the monitor's pid, or None for a bad request."""
    fds = []
    try:
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 1)
        request = {**json.loads(message), "user_namespace": user_namespace}
        if len(fds) != 1:
            raise ValueError("one file descriptor (the kernel's log) expected")
    except (OSError, ValueError):  # only the grader's own launchers can reach the socket
        for fd in fds:
            os.close(fd)
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        # Nothing of the zygote's own may reach the kernel: close its sockets as objects
        # (closing their numbers alone would let a later close hit a reused descriptor).
        selector.close()
        listener.close()
        connection.close()
        for other in launchers.values():
            other.close()
        run_child(lambda: monitor(request, fds[0], zygote))
    os.close(fds[0])
    return pid


def run_child(body) -> None:
    """Run `body` in a forked process and exit: never return into the zygote's loop."""
    code = 1
    try:
        body()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# --- one kernel ----------------------------------------------------------------------------


def monitor(request: dict, log: int, zygote: int) -> None:
    """In the zygote's child: cgroups, namespaces, then wait for init and exit as it did."""
    set_death_signal(zygote)
    os.setsid()
    os.dup2(log, 1)
    os.dup2(log, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    for group in request["cgroups"]:  # before the kernel exists, so all of it counts there
        with open(os.path.join(group, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    namespaces = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    if request["user_namespace"]:
        uid, gid = os.getuid(), os.getgid()
        check(libc.unshare(CLONE_NEWUSER | namespaces), "unshare")
        # The kernel keeps the grader's uid and gid, as under bubblewrap; no other id exists.
        for name, text in (
            ("uid_map", f"{uid} {uid} 1"),
            ("setgroups", "deny"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    else:  # root where user namespaces are refused: bubblewrap's way as root, real capabilities
        check(libc.unshare(namespaces), "unshare")  # for the setup, all dropped before the kernel
    init = os.fork()
    if init == 0:  # its parent, outside its PID namespace, reads as pid 0 from in there
        run_child(lambda: become_init(request, 0))
    _, status = os.waitpid(init, 0)
    sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)


def become_init(request: dict, monitor_pid: int) -> None:
    """PID 1: build the file system, drop capabilities, start the kernel, reap until it ends."""
    set_death_signal(monitor_pid)
    last_capability = int(open("/proc/sys/kernel/cap_last_cap").read())
    build_root(request)
    loopback_up()
    drop_capabilities(last_capability)
    me = os.getpid()  # 1
    kernel = os.fork()
    if kernel == 0:
        run_child(lambda: become_kernel(request, me))
    while True:  # orphans in the namespace are re-parented here
        pid, status = os.wait()
        if pid == kernel:
            sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)


def build_root(request: dict) -> None:
    """Make a tmpfs the root and bind into it only what the kernel may see."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing from here propagates to the host
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    os.chdir("/tmp")
    os.mkdir("newroot", 0o755)
    os.mkdir("oldroot", 0o755)
    check(syscall("pivot_root", b"/tmp", b"/tmp/oldroot"), "pivot_root")  # old / at /oldroot
    os.chdir("/")
    mount("/newroot", "/newroot", None, MS_BIND | MS_REC)  # a mount point, to pivot into
    new = "/newroot"

    os.makedirs(new + "/dev")
    mount("tmpfs", new + "/dev", "tmpfs", MS_NOSUID, "mode=0755")
    for device in DEVICES:
        open(f"{new}/dev/{device}", "w").close()
        mount(f"/oldroot/dev/{device}", f"{new}/dev/{device}", None, MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{new}/dev/{name}")
    os.mkdir(new + "/dev/shm")
    mount("tmpfs", new + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    os.mkdir(new + "/proc")
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this PID namespace's
    # As bubblewrap does: the kernel keeps the grader's uid, root's on a grading server, and
    # root may write /proc/sys (global settings) and /proc/sysrq-trigger (a reboot) without any
    # capability. These four become read-only.
    for name in PROC_COVERED:
        if os.path.exists(f"{new}/proc/{name}"):
            mount(f"{new}/proc/{name}", f"{new}/proc/{name}", None, MS_BIND | MS_REC)
            remount_read_only(f"{new}/proc/{name}")
    os.mkdir(new + "/tmp")
    mount("tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")

    for path in SYSTEM_PATHS:
        if os.path.islink("/oldroot" + path):  # merged /usr: /bin -> usr/bin
            os.symlink(os.readlink("/oldroot" + path), new + path)
        elif os.path.exists("/oldroot" + path):
            bind(path, read_only=True)
    for path in request["python_roots"]:
        bind(path, read_only=True)
    bind(request["scratch"], read_only=False)
    bind(request["runtime"], read_only=False)

    check(libc.umount2(b"/oldroot", MNT_DETACH), "umount /oldroot")
    os.chdir(new)
    check(syscall("pivot_root", b".", b"."), "pivot_root into the new root")
    check(libc.umount2(b".", MNT_DETACH), "umount the setup root")
    os.chdir("/")


def bind(path: str, *, read_only: bool) -> None:
    """Show the host's `path` at the same place in the new root (and every mount below it)."""
    source, target = "/oldroot" + path, "/newroot" + path
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    elif not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        remount_read_only(target)


def remount_read_only(target: str) -> None:
    """Make the bind mount at `target`, and every mount below it, read-only."""
    for mount_point, options in mounts_at_or_below(target):
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        for option in options:
            flags |= MOUNT_OPTIONS.get(option, 0)
        mount(None, mount_point, None, flags)


def mounts_at_or_below(target: str) -> list:
    """(mount point, per-mount options) for each mount at `target` or below, from mountinfo."""
    found, target = [], os.fsencode(target)
    with open("/newroot/proc/self/mountinfo", "rb") as table:  # ours, mounted first
        for line in table:
            fields = line.split()
            # Octal escapes for space, tab, newline and backslash: "\040" is a space.
            point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4])
            if point == target or point.startswith(target + b"/"):
                found.append((point, fields[5].decode().split(",")))
    return found


def loopback_up() -> None:
    """The new network namespace's only interface, up (bubblewrap does the same)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(probe, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))


def drop_capabilities(last_capability: int) -> None:
    """No capability now, none to gain by exec (empty bounding set, no_new_privs)."""
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    for capability in range(last_capability + 1):
        check(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "prctl(CAPBSET_DROP)")
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "prctl(CAP_AMBIENT)")
    header = struct.pack("Ii", LINUX_CAPABILITY_VERSION_3, 0)
    check(syscall("capset", header, bytes(24)), "capset")  # effective, permitted, inheritable: 0


def become_kernel(request: dict, init: int) -> None:
    """PID 2: what `python -m ipykernel_launcher -f CONNECTION_FILE` would be, then run it."""
    set_death_signal(init)
    os.setsid()
    memory = request["memory"]
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    os.chdir(request["scratch"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path.insert(0, request["scratch"])  # `python -m` puts the working directory first
    if request.get("check"):
        check_kernel_can_start()
        return
    from ipykernel import kernelapp

    packages = os.path.dirname(os.path.dirname(kernelapp.__file__))
    sys.argv = [os.path.join(packages, "ipykernel_launcher.py"), "-f", request["connection_file"]]
    kernelapp.launch_new_instance()


def check_kernel_can_start() -> None:
    """The self-test's kernel: the interpreter and its packages are visible in the sandbox."""
    import importlib.util

    missing = [name for name in ("ipykernel", "torch") if importlib.util.find_spec(name) is None]
    if not os.path.exists(sys.executable) or missing:
        raise SystemExit(f"in the sandbox: {sys.executable} or {missing} not found")


def self_test(listener: socket.socket, user_namespace: bool) -> str | None:
    """Fork one kernel through the whole sandbox, stopping where the kernel would start.

    None when it worked; otherwise what failed (the sandbox's own traceback, last lines).
    """
    read, write = os.pipe()
    request = {
        "check": True,
        "user_namespace": user_namespace,
        "cgroups": [],
        # What the grader gives every kernel (kernel_setup.python_roots), passed to the zygote.
        "python_roots": [
            p for p in os.environ.get("CH34_SANDBOX_PYTHON", "").split(os.pathsep) if p
        ],
        "scratch": os.getcwd(),
        "runtime": os.getcwd(),
        "memory": 0,
        "env": {},
    }
    sys.stdout.flush()
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        listener.close()
        os.close(read)
        run_child(lambda: monitor(request, write, zygote))
    os.close(write)
    with os.fdopen(read, errors="replace") as said:
        text = said.read()
    _, status = os.waitpid(pid, 0)
    if status == 0:
        return None
    return (text.strip().splitlines() or [f"exit status {os.waitstatus_to_exitcode(status)}"])[-1]


def main() -> None:
    socket_path, parent = sys.argv[1], int(sys.argv[2])
    set_death_signal(parent)
    del sys.path[0]  # this script's folder: the kit's modules must not shadow what kernels import
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path)
    listener.listen(64)  # launchers wait here while the imports below run
    user_namespace = True
    if not sys.platform.startswith("linux") or platform.machine() not in SYSCALLS:
        problem = f"needs Linux on {' or '.join(SYSCALLS)}"
    else:
        # A user namespace where one can be made; root may do without (as bubblewrap does).
        # CH34_SANDBOX_USER_NAMESPACE=0 takes the second way at once (the tests use it).
        ways = [True, False] if os.geteuid() == 0 else [True]
        if os.environ.get("CH34_SANDBOX_USER_NAMESPACE") == "0":
            ways = ways[1:]
        problem = "CH34_SANDBOX_USER_NAMESPACE=0 needs root" if not ways else None
        for way in ways:
            problem = self_test(listener, way)
            if problem is None:
                user_namespace = way
                break
    if problem:
        print(f"unavailable: {problem}", flush=True)
        return
    # An import that fails prints its traceback: the grader then starts kernels afresh.
    for name in PRELOAD:
        __import__(name)
    print("ready", flush=True)
    # No one reads these any more: a full pipe must not stop the zygote.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    serve(listener, user_namespace)


if __name__ == "__main__":
    main()
