"""What this machine offers the local backend: cores, memory, GPUs, and free ports.

Every command imports this module (``validate`` checks a job against the machine's size), so
what only GPUs and ports need (``shutil``, ``subprocess``, ``socket``: about 7 ms of a cold
``validate`` of 140 ms here) is imported where it is used.
"""

from __future__ import annotations

import contextlib
import os


def cpu_count() -> float:
    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return float(os.cpu_count() or 1)


def memory_mib() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))


def gpu_count() -> int:
    """GPUs that ``nvidia-smi -L`` lists; 0 without the tool or a driver."""
    import shutil
    import subprocess

    tool = shutil.which("nvidia-smi")
    if tool is None:
        return 0
    try:
        listing = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    if listing.returncode != 0:
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def port_is_free(port: int) -> bool:
    """Can a server bind this port on every interface (as TF's gRPC server does)?"""
    import socket

    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):  # noqa: S104
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        with contextlib.closing(sock):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError:
                return False
    return True
