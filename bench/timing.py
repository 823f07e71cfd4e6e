"""Timing shared by the benchmark scripts and their workers (standard
library only, so any interpreter can import it)."""

import os
import statistics
import time


def timed(fn, reps, evict=None):
    """Calls `fn` once to warm up, then `reps` times; returns the median
    milliseconds and every call's milliseconds. `evict`, when given, runs
    untimed before each timed call (see `last_level_cache_bytes`)."""
    fn()
    samples = []
    for _ in range(reps):
        if evict is not None:
            evict()
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples), samples


def last_level_cache_bytes(default=32 << 20):
    """The largest data cache of CPU 0 from sysfs, or `default`. Reading
    twice this between timed calls leaves none of the previous call's data
    in the caches, as simpleop's bench leaves none between a row's calls
    (it alternates them with a baseline's over as many bytes)."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = os.listdir(base)
    except OSError:
        return default
    for e in entries:
        try:
            with open(os.path.join(base, e, "type")) as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(os.path.join(base, e, "size")) as f:
                size = f.read().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        digits = size[:-1] if size[-1:] in ("K", "M", "G") else size
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best or default


def cpu_model():
    """The model name in /proc/cpuinfo, or "unknown"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
