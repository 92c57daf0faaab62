"""What a kernel may see, written once: the file-system whitelist and the variables removed from
its environment. Data only, no imports. bubblewrap's command line (`launcher.py`) and the zygote's
system calls (`zygote_server.py`) are both built from it; both are scripts started by path, so
each reads this file by its path (`runpy.run_path`), never by importing the kit.

Besides these, every kernel gets: the Python installations (read-only; the grader names them in
CH34_SANDBOX_PYTHON), its scratch directory (read-write, its HOME and working directory), the
runtime directory of its IPC sockets (read-write), a private /tmp and /dev/shm, its own /proc.
"""

# The system's programs and libraries, read-only (each one that exists; a symlink such as merged
# /usr's /bin -> usr/bin is recreated as the same symlink).
SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")

# The devices in the kernel's /dev (bubblewrap's `--dev` set); no /dev/pts: no terminals.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

# Parts of /proc made read-only, as bubblewrap covers them: the kernel keeps the grader's uid (root
# on a grading server), and root may write /proc/sys and /proc/sysrq-trigger with no capability.
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")

# Variables the kernel never sees: nbgrader's (a notebook must not tell grading from a learner's
# own run), JPY_PARENT_PID (inside the PID namespace the parent looks gone; --die-with-parent does
# its job), and every CH34_SANDBOX_* setting the grader passes to the launcher.
REMOVED_VARIABLES = ("NBGRADER_EXECUTION", "JPY_PARENT_PID")
REMOVED_PREFIX = "CH34_SANDBOX_"
