#!/usr/bin/env python3
"""Replicated writes and reads side by side: a 3-node Basalt Raft group
against redis-server with two replicas (asynchronous replication), with a
single Basalt node and a single redis-server as the baselines.

Every server runs on 127.0.0.1 with `appendfsync everysec` (Redis:
`appendonly yes`); redis-benchmark (-c 50, -r 1000000, -d 100) drives the
leader / primary. Rounds alternate the systems; each figure is the median
of the rounds. Prints one table (ops/s and the ratio to the redis-server
setup of the same shape).

Usage: python3 scripts/bench_group.py --basalt target/release/basalt
         [--requests 100000] [--requests-pipelined N] [--rounds 3]
         [--pipelines 1,16] [--tests set,get] [--client-threads N] [--single-only]

--cpu prints, after each run, the CPU time (user + system, /proc) each
server process spent per request, the leader or primary first: where a
replicated write's cost lies when the cores are shared.

--requests-pipelined sets the request count for P > 1 (default: --requests),
so that fast pipelined runs last as long as the P=1 ones. --client-threads
gives redis-benchmark that many threads (its --threads): on a many-core
machine one client thread caps pipelined runs below what the servers do.
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_ping(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True)
        if r.stdout.strip() == "PONG":
            return
        time.sleep(0.1)
    sys.exit(f"server on port {port} did not answer PING")


class Setup:
    def __init__(self, name):
        self.name = name
        self.procs = []
        self.port = None
        self.ports = []

    def primary_first(self):
        """The processes, the one on `self.port` (leader / primary) first."""
        if not self.ports:
            return list(self.procs)
        i = self.ports.index(self.port)
        return [self.procs[i]] + [p for j, p in enumerate(self.procs) if j != i]

    def stop(self):
        for p in self.procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        self.procs = []


def start_basalt_single(binary, root):
    s = Setup("basalt x1")
    port = free_port()
    d = os.path.join(root, "basalt-single")
    s.procs.append(subprocess.Popen([binary, "--port", str(port), "--http-port", "0", "--dir", d],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_ping(port)
    s.port = port
    return s


def start_basalt_group(binary, root, flags=()):
    s = Setup("basalt raft x3")
    ports = [free_port() for _ in range(3)]
    s.ports = ports
    rafts = [free_port() for _ in range(3)]
    peers = ",".join(f"{i + 1}@127.0.0.1:{rafts[i]}" for i in range(3))
    for i in range(3):
        d = os.path.join(root, f"basalt-n{i + 1}")
        s.procs.append(subprocess.Popen(
            [binary, "--port", str(ports[i]), "--http-port", "0", "--dir", d, "--node-id", str(i + 1),
             "--raft-port", str(rafts[i]), "--peers", peers, *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for p in ports:
        wait_ping(p)
    deadline = time.time() + 30
    while time.time() < deadline:
        named = set()
        for p in ports:
            r = subprocess.run(["redis-cli", "-p", str(p), "SENTINEL", "get-master-addr-by-name", "x"],
                               capture_output=True, text=True)
            named.add(r.stdout.strip())
        lines = named.pop().split() if len(named) == 1 else []
        if len(lines) == 2:
            # Every node names the same leader.
            s.port = int(lines[1])
            return s
        time.sleep(0.1)
    sys.exit("the Basalt group elected no leader")


def start_redis(root, replicas):
    s = Setup("redis x1" if replicas == 0 else f"redis +{replicas} replicas")
    ports = [free_port() for _ in range(replicas + 1)]
    for i, port in enumerate(ports):
        d = os.path.join(root, f"redis-{replicas}-{i}")
        os.makedirs(d)
        args = ["redis-server", "--port", str(port), "--dir", d, "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--repl-diskless-sync-delay", "0"]
        if i > 0:
            args += ["--replicaof", "127.0.0.1", str(ports[0])]
        s.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_ping(port)
    s.port = ports[0]
    s.ports = ports
    if replicas:
        deadline = time.time() + 30
        while time.time() < deadline:
            r = subprocess.run(["redis-cli", "-p", str(ports[0]), "INFO", "replication"],
                               capture_output=True, text=True)
            # Online, not just connected: a replica waits for the primary's
            # (diskless) snapshot before the write stream reaches it, and
            # one still waiting replicates nothing of the run.
            if r.stdout.count("state=online") == replicas:
                break
            time.sleep(0.1)
        else:
            sys.exit(f"redis replicas of port {ports[0]} never came online")
    return s


def bench(port, test, requests, pipeline, threads=0):
    cmd = ["redis-benchmark", "-p", str(port), "-t", test, "-n", str(requests), "-c", "50",
           "-r", "1000000", "-d", "100", "-P", str(pipeline), "--csv"]
    if threads > 1:
        cmd += ["--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    rows = [l for l in r.stdout.splitlines() if l.strip() and not l.startswith('"test"')]
    if not rows:
        sys.exit(f"redis-benchmark -t {test} -P {pipeline} on port {port} printed no result:\n"
                 f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return float(rows[-1].split(",")[1].strip('"'))


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def print_raft_info(s):
    """The leader's and the other nodes' `basalt_raft_*` means (INFO
    replication), one line each."""
    ports = [s.port] + [p for p in s.ports if p != s.port]
    for role, port in zip(["leader"] + ["follower"] * (len(ports) - 1), ports):
        r = subprocess.run(["redis-cli", "-p", str(port), "INFO", "replication"],
                           capture_output=True, text=True)
        fields = [l.strip() for l in r.stdout.splitlines()
                  if l.startswith("basalt_raft_") and any(
                      k in l for k in ("entries", "per_entry", "mean_us", "lane_", "apply_threads"))]
        print(f"  {role} {port}: {' '.join(f.replace('basalt_raft_', '') for f in fields)}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--basalt", required=True)
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--tests", default="set,get")
    ap.add_argument("--requests-pipelined", type=int, default=0)
    ap.add_argument("--client-threads", type=int, default=0)
    ap.add_argument("--single-only", action="store_true",
                    help="only the single-node setups (redis x1, basalt x1)")
    ap.add_argument("--group-only", action="store_true",
                    help="only the Basalt group (e.g. to compare --group-flags settings)")
    ap.add_argument("--group-flags", default="",
                    help="extra flags for every group node, e.g. '--raft-in-flight 16'")
    ap.add_argument("--cpu", action="store_true",
                    help="after each run, each server process's CPU microseconds per request, "
                         "the leader / primary first")
    ap.add_argument("--raft-info", action="store_true",
                    help="after each group run, print the leader's and a follower's "
                         "basalt_raft_* INFO fields (where a write's time went)")
    a = ap.parse_args()
    for tool in ("redis-server", "redis-benchmark", "redis-cli"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install -y redis-server redis-tools")
    root = tempfile.mkdtemp(prefix="basalt-bench-group-")
    starters = [
        ("redis x1", lambda: start_redis(root + "/r1-" + str(time.time_ns()), 0)),
        ("basalt x1", lambda: start_basalt_single(a.basalt, root + "/b1-" + str(time.time_ns()))),
        ("redis +2 replicas", lambda: start_redis(root + "/r3-" + str(time.time_ns()), 2)),
        ("basalt raft x3", lambda: start_basalt_group(a.basalt, root + "/b3-" + str(time.time_ns()),
                                                      a.group_flags.split())),
    ]
    if a.single_only:
        starters = starters[:2]
    if a.group_only:
        starters = starters[3:]
    results = {}
    cpu = {}
    try:
        for rnd in range(a.rounds):
            order = starters if rnd % 2 == 0 else list(reversed(starters))
            for name, start in order:
                s = start()
                try:
                    for test in a.tests.split(","):
                        for p in [int(x) for x in a.pipelines.split(",")]:
                            n = a.requests_pipelined if p > 1 and a.requests_pipelined else a.requests
                            procs = s.primary_first()
                            before = [cpu_seconds(x.pid) for x in procs]
                            ops = bench(s.port, test, n, p, a.client_threads)
                            results.setdefault((name, test, p), []).append(ops)
                            line = f"round {rnd + 1} {name:18} {test} P={p}: {ops:.0f} ops/s"
                            if a.cpu:
                                us = [(cpu_seconds(x.pid) - b) * 1e6 / n for x, b in zip(procs, before)]
                                cpu.setdefault((name, test, p), []).append(us)
                                line += " | cpu us/op " + " ".join(f"{u:.2f}" for u in us)
                            print(line, flush=True)
                            if a.raft_info and name == "basalt raft x3":
                                print_raft_info(s)
                finally:
                    s.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    if a.cpu:
        print("CPU us per request, medians over the rounds (leader / primary first):")
        for (name, test, p), runs in cpu.items():
            per = [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]
            print(f"  {name:18} {test} P={p}: {' + '.join(f'{u:.2f}' for u in per)} "
                  f"= {sum(per):.2f}")
        print()
    if a.group_only:
        print(f"| test | P | basalt raft x3 {a.group_flags} |")
        print("|---|---:|---:|")
        for test in a.tests.split(","):
            for p in [int(x) for x in a.pipelines.split(",")]:
                print(f"| {test.upper()} | {p} | {statistics.median(results[('basalt raft x3', test, p)]):.0f} |")
        return
    if a.single_only:
        print("| test | P | redis x1 | basalt x1 | basalt x1 / redis x1 |")
        print("|---|---:|---:|---:|---:|")
        for test in a.tests.split(","):
            for p in [int(x) for x in a.pipelines.split(",")]:
                m = {n: statistics.median(results[(n, test, p)]) for n, _ in starters}
                print(f"| {test.upper()} | {p} | {m['redis x1']:.0f} | {m['basalt x1']:.0f} | "
                      f"{m['basalt x1'] / m['redis x1']:.2f}x |")
        return
    print("| test | P | redis x1 | basalt x1 | redis +2 replicas | basalt raft x3 | basalt x1 / redis x1 "
          "| raft x3 / redis +2 | raft x3 / basalt x1 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for test in a.tests.split(","):
        for p in [int(x) for x in a.pipelines.split(",")]:
            m = {n: statistics.median(results[(n, test, p)]) for n, _ in starters}
            print(f"| {test.upper()} | {p} | {m['redis x1']:.0f} | {m['basalt x1']:.0f} | "
                  f"{m['redis +2 replicas']:.0f} | {m['basalt raft x3']:.0f} | "
                  f"{m['basalt x1'] / m['redis x1']:.2f}x | {m['basalt raft x3'] / m['redis +2 replicas']:.2f}x | "
                  f"{m['basalt raft x3'] / m['basalt x1']:.2f}x |")


if __name__ == "__main__":
    main()
