"""Timing shared by the benchmark scripts and their workers (standard
library only, so any interpreter can import it)."""

import statistics
import time


def timed(fn, reps):
    """Calls `fn` once to warm up, then `reps` times; returns the median
    milliseconds and every call's milliseconds."""
    fn()
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples), samples
