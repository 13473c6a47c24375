#!/usr/bin/env python3
"""CPU per thread of each Basalt process while redis-benchmark writes.

Starts a single node, then a 3-node Raft group (as scripts/bench_group.py
does), sends `redis-benchmark -t set -P 16 -c 50 -r 1000000 -d 100` to
the node (the group's leader), and prints for every process its CPU time
over the run (user + system, from /proc/<pid>/task/*/stat), CPU per SET,
the CPU by thread name and the five busiest threads in cores. Shows
whether a run is bound by one thread, by all the CPUs, or by neither
(latency).

Usage: python3 scripts/perf/group_cpu.py target/release/basalt [single_requests] [group_requests]
"""
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_group as bg  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def threads(pid):
    """tid -> (thread name, CPU ticks so far)."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                s = f.read()
        except OSError:
            continue  # the thread ended
        name = s[s.index("(") + 1:s.rindex(")")]
        rest = s[s.rindex(")") + 2:].split()
        out[t] = (name, int(rest[11]) + int(rest[12]))
    return out


def run(setup, label, n):
    pids = [p.pid for p in setup.procs]
    before = {pid: threads(pid) for pid in pids}
    t0 = time.time()
    r = subprocess.run(["redis-benchmark", "-p", str(setup.port), "-t", "set", "-n", str(n), "-c", "50",
                        "-r", "1000000", "-d", "100", "-P", "16", "--csv"],
                       capture_output=True, text=True, timeout=600)
    wall = time.time() - t0
    rows = [line for line in r.stdout.splitlines() if line.startswith('"SET"')]
    rps = float(rows[-1].split(",")[1].strip('"')) if rows else 0
    print(f"== {label}: {rps:.0f} SET/s over {wall:.1f} s")
    for pid in pids:
        after = threads(pid)
        spent = {t: (name, ticks - before[pid].get(t, (name, 0))[1]) for t, (name, ticks) in after.items()}
        by_name = collections.Counter()
        for name, ticks in spent.values():
            by_name[name] += ticks
        total = sum(by_name.values()) / TICK
        print(f"  pid {pid}: {total:.2f} CPU s ({total / wall:.2f} cores), {total * 1e6 / n:.2f} us per SET")
        for name, ticks in by_name.most_common(8):
            if ticks:
                print(f"    {name:20} {ticks / TICK:6.2f} s")
        busiest = sorted(((ticks, t, name) for t, (name, ticks) in spent.items()), reverse=True)[:5]
        print("    busiest threads: " + ", ".join(
            f"{name}/{t} {ticks / TICK / wall:.2f} cores" for ticks, t, name in busiest))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    single_n = int(sys.argv[2]) if len(sys.argv) > 2 else 3000000
    group_n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000000
    # The data directories go at the end: a run writes about 2 GB.
    root = tempfile.mkdtemp(prefix="basalt-group-cpu-")
    try:
        s = bg.start_basalt_single(binary, root + "/single")
        try:
            run(s, "basalt x1", single_n)
        finally:
            s.stop()
        g = bg.start_basalt_group(binary, root + "/group")
        try:
            run(g, f"basalt raft x3 (nodes 1, 2, 3 in order), leader on port {g.port}", group_n)
        finally:
            g.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
