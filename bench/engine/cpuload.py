"""CPU accounting for benchmarks on a shared machine: how busy the machine
was with *other* processes while something ran, and waiting for a quiet
moment before a measurement.

llama.cpp's CPU backend synchronises its threads with spinning barriers
(OpenMP builds included): when another process takes one of the cores the
threads are using, every barrier can cost a scheduler time slice, and
tokens/s can drop 10-100x. A measurement is only comparable with another
if both ran on an otherwise idle machine, so every measurement records the
share of the machine that others used ("foreign load").
"""

import os
import time

HZ = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # without guest (already in user)
    return total - idle, total


def proc_cpu_jiffies(pid: int) -> int:
    """utime + stime of a live process (all threads)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def self_and_children_jiffies() -> int:
    t = os.times()
    return round((t.user + t.system + t.children_user + t.children_system) * HZ)


class ForeignLoad:
    """Measures the share of all CPUs used by processes other than ours
    (this process, its waited-for children, and the given pids)."""

    def __init__(self, pids: tuple[int, ...] = ()):
        self.pids = pids

    def _ours(self) -> int:
        own = self_and_children_jiffies()
        for pid in self.pids:
            try:
                own += proc_cpu_jiffies(pid)
            except OSError:
                pass
        return own

    def __enter__(self):
        self.busy0, self.total0 = busy_jiffies()
        self.ours0 = self._ours()
        return self

    def __exit__(self, *exc):
        busy1, total1 = busy_jiffies()
        ours1 = self._ours()
        total = max(total1 - self.total0, 1)
        foreign = (busy1 - self.busy0) - (ours1 - self.ours0)
        self.share = max(0.0, foreign / total)
        return False


def wait_quiet(max_wait: float, threshold: float = 0.15, window: float = 1.0) -> float:
    """Waits (up to max_wait seconds) until the machine is less than
    `threshold` busy over `window` seconds. Returns the last busy share."""
    deadline = time.monotonic() + max_wait
    while True:
        b0, t0 = busy_jiffies()
        time.sleep(window)
        b1, t1 = busy_jiffies()
        share = (b1 - b0) / max(t1 - t0, 1)
        if share < threshold or time.monotonic() >= deadline:
            return share
