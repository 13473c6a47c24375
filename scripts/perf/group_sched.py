#!/usr/bin/env python3
"""Where a replicated write waits: scheduler latency of a single node and of
a 3-node group's processes under `redis-benchmark -t set -P 16 -c 50`.

For each setup (a fresh single node, then a fresh group, driven at its
leader), starts a long SET run, lets it warm up, records the scheduler's
switch and wake-up events system-wide for `--seconds` (`perf sched
record -a`), and prints `perf sched latency` (per task: CPU time, context
switches, mean and worst delay from wake-up to running) for the busiest
tasks, plus the SET rate and the context switches per SET of the Basalt
processes. Needs root, perf, redis-benchmark; run from the repository root:

    python3 scripts/perf/group_sched.py target/release/basalt [--seconds 2] [--profile DIR]

With --profile, each setup's run is also profiled (`perf record -a -g`,
frame-pointer call graphs: build with RUSTFLAGS="-C
force-frame-pointers=yes" for whole stacks): the busiest symbols by thread
name are printed and the reports with call graphs written to DIR.

Many hops per write, each paying a wake-up delay, are what a group's
latency-bound SET rate would be made of; this shows how many and how long.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_group as bg  # noqa: E402


def profile(setup, seconds, out, folder):
    """A CPU profile of everything for `seconds`, reported by thread name
    and symbol (printed) and with callers (written to `folder`)."""
    os.makedirs(folder, exist_ok=True)
    data = os.path.join(out, "cpu.data")
    subprocess.run(["perf", "record", "-a", "-g", "-F", "999", "-o", data, "--", "sleep",
                    str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    flat = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort",
                           "comm,sym", "-g", "none", "--percent-limit", "0.5"],
                          capture_output=True, text=True).stdout
    name = setup.name.replace(" ", "-")
    with open(os.path.join(folder, f"{name}.flat.txt"), "w") as f:
        f.write(flat)
    for comm in ("basalt", "basalt-conn"):
        graph = subprocess.run(["perf", "report", "-i", data, "--stdio", "--children",
                                "--sort", "sym", "--comms", ",".join(
                                    [comm] if comm == "basalt" else
                                    [f"basalt-conn-{i}" for i in range(64)]),
                                "-g", "caller,0.5,callee", "--percent-limit", "1"],
                               capture_output=True, text=True).stdout
        with open(os.path.join(folder, f"{name}.{comm}.graph.txt"), "w") as f:
            f.write(graph)
    os.unlink(data)
    print(f"-- {setup.name}: busiest symbols (all processes)")
    shown = 0
    for line in flat.splitlines():
        if line.strip() and not line.startswith("#") and shown < 40:
            print(line)
            shown += 1


def measure(setup, seconds, out, folder=None):
    rate_file = os.path.join(out, "rate.csv")
    with open(rate_file, "w") as rf:
        load = subprocess.Popen(
            ["redis-benchmark", "-p", str(setup.port), "-t", "set", "-n", "100000000", "-c", "50",
             "-r", "1000000", "-d", "100", "-P", "16", "-q"],
            stdout=rf, stderr=subprocess.DEVNULL)
    time.sleep(3)
    data = os.path.join(out, "sched.data")
    before = info_calls(setup.port)
    t = time.time()
    subprocess.run(["perf", "sched", "record", "-a", "-o", data, "--", "sleep", str(seconds)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    calls = info_calls(setup.port) - before
    wall = time.time() - t
    if folder:
        profile(setup, seconds, out, folder)
    load.kill()
    load.wait()
    lat = subprocess.run(["perf", "sched", "latency", "-i", data, "--sort", "runtime"],
                         capture_output=True, text=True).stdout
    os.unlink(data)
    rows = []
    for line in lat.splitlines():
        m = re.match(r"\s*(\S.*?):(\d+|\(\d+\))\s*\|\s*([\d.]+) ms\s*\|\s*(\d+)\s*\|\s*avg:\s*([\d.]+) ms"
                     r"\s*\|\s*max:\s*([\d.]+) ms", line)
        if m:
            rows.append((m.group(1).strip(), float(m.group(3)), int(m.group(4)),
                         float(m.group(5)), float(m.group(6))))
    print(f"\n== {setup.name}: {calls / wall:,.0f} SET/s at the leader over the {wall:.1f} s recorded")
    basalt = [r for r in rows if r[0].startswith("basalt") or r[0].startswith("tokio")]
    sw = sum(r[2] for r in basalt)
    print(f"basalt tasks: {sw:,} context switches, {sw / max(calls, 1):.2f} per SET; "
          f"mean wake-up delay over them "
          f"{sum(r[2] * r[3] for r in basalt) / max(sw, 1) * 1000:.1f} us")
    print("| task | runtime ms | switches | avg delay ms | max delay ms |")
    print("|---|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: -r[1])[:25]:
        print(f"| {r[0]} | {r[1]:.1f} | {r[2]} | {r[3]:.3f} | {r[4]:.3f} |")


def info_calls(port):
    r = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"],
                       capture_output=True, text=True).stdout
    m = re.search(r"cmdstat_set:calls=(\d+)", r)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("basalt")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--profile", default=None, metavar="DIR")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="group-sched-", dir=os.environ.get("TMPDIR"))
    for start in (lambda: bg.start_basalt_single(a.basalt, root),
                  lambda: bg.start_basalt_group(a.basalt, root)):
        s = start()
        try:
            measure(s, a.seconds, root, a.profile)
        finally:
            s.stop()


if __name__ == "__main__":
    main()
