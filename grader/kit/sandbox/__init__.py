"""The kernel's sandbox: the launcher a kernelspec starts, the zygote that forks pre-imported
kernels into namespaces, the file-system whitelist both build, cgroups and the reaper.

`launcher.py` and `zygote_server.py` run as scripts by path, with an unknown working directory:
they import nothing from the repository, only the standard library (and read `whitelist.py`)."""
