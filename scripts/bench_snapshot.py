#!/usr/bin/env python3
"""What Raft snapshots cost a 3-node group, side by side for two builds.

For each binary (alternating, --rounds times): start a 3-node group with
`--raft-snapshot-every N`, load --keys keys of --value bytes through the
leader (redis-benchmark, P16), then run a write load (redis-benchmark SET
-P 16 -c 50 over the same keys) for --seconds while a probe client sends
one SET to the leader every 5 ms and records each reply's latency. The
write load crosses several snapshot points; a snapshot that holds the
writers up shows as the probe's worst latency. Then a fourth node is
added (`basalt cluster add`): the leader has compacted its log, so it
catches up by snapshot; the time from the add to the new node holding
every key is the catch-up time (by snapshot when the leader's log was
compacted, which INFO's basalt_raft_purged_index tells; else from the
log).

Reports, per binary: SET throughput of the load, the probe's p50, p99 and
max latency, and the catch-up time; medians over rounds.

    scripts/bench_snapshot.py --binary old=/tmp/basalt-old --binary new=target/release/basalt

Needs redis-benchmark (apt-get install redis-tools).
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
from servers import free_port  # noqa: E402


def resp(*args):
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += f"${len(a)}\r\n".encode() + a + b"\r\n"
    return out


def read_reply(f):
    line = f.readline()
    if not line:
        raise ConnectionError("closed")
    t = line[:1]
    if t in b"+-:":
        return line
    if t == b"$":
        n = int(line[1:])
        if n >= 0:
            f.read(n + 2)
        return line
    if t == b"*":
        n = int(line[1:])
        return [read_reply(f) for _ in range(max(n, 0))]
    raise ValueError(line)


def cmd(port, *args):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(resp(*args))
        return read_reply(s.makefile("rb"))


def info(port, field):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(resp("INFO", "replication"))
        f = s.makefile("rb")
        n = int(f.readline()[1:])
        text = f.read(n + 2).decode()
    m = re.search(rf"^{field}:(\S+)", text, re.M)
    return m.group(1) if m else None


class Group:
    def __init__(self, binary, root, every):
        self.binary, self.root, self.every = binary, root, every
        # Builds before the flag existed snapshot every 200,000 entries.
        help_text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
        self.every_flag = "--raft-snapshot-every" in help_text
        self.ports, self.rafts, self.procs = [], [], []
        for _ in range(3):
            self.ports.append(free_port())
            self.rafts.append(free_port())
        peers = ",".join(f"{i + 1}@127.0.0.1:{self.rafts[i]}" for i in range(3))
        for i in range(3):
            self.spawn(i + 1, self.ports[i], self.rafts[i], peers)
        deadline = time.monotonic() + 30
        while True:
            try:
                leaders = {info(p, "basalt_raft_leader_id") for p in self.ports}
                if len(leaders) == 1 and leaders != {"none"}:
                    break
            except (OSError, ConnectionError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the group did not elect a leader")
            time.sleep(0.1)
        leader_id = int(info(self.ports[0], "basalt_raft_leader_id"))
        self.leader = self.ports[leader_id - 1]

    def spawn(self, node_id, port, raft, peers=None):
        argv = [self.binary, "--port", str(port), "--http-port", "0",
                "--dir", os.path.join(self.root, f"n{node_id}"),
                "--node-id", str(node_id), "--raft-port", str(raft), "--loglevel", "info"]
        if self.every_flag:
            argv += ["--raft-snapshot-every", str(self.every)]
        if peers:
            argv += ["--peers", peers]
        log = open(os.path.join(self.root, f"n{node_id}.log"), "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))

    def stop(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def bench(port, n, keys, value, clients=50, pipeline=16):
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(n), "-r", str(keys),
         "-d", str(value), "-P", str(pipeline), "-c", str(clients), "-q", "--csv"],
        capture_output=True, text=True, check=True).stdout
    # "SET","123456.78",...
    for line in out.splitlines():
        if line.startswith('"SET"'):
            return float(line.split(",")[1].strip('"'))
    raise SystemExit(f"no SET figure in: {out}")


def probe(port, stop, lat):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    f = s.makefile("rb")
    i = 0
    while not stop.is_set():
        t = time.perf_counter()
        s.sendall(resp("SET", f"probe{i % 100}", "x"))
        read_reply(f)
        lat.append(time.perf_counter() - t)
        i += 1
        time.sleep(0.005)
    s.close()


def one_round(binary, args):
    root = tempfile.mkdtemp(prefix="bslt-snapbench-")
    g = Group(binary, root, args.every)
    try:
        bench(g.leader, args.keys, args.keys, args.value)
        lat, stop = [], threading.Event()
        th = threading.Thread(target=probe, args=(g.leader, stop, lat))
        th.start()
        t0 = time.monotonic()
        ops = bench(g.leader, args.load, args.keys, args.value)
        took = time.monotonic() - t0
        stop.set()
        th.join()
        lat.sort()
        dbsize = int(cmd(g.leader, "DBSIZE")[1:])
        purged = int(info(g.leader, "basalt_raft_purged_index") or 0)
        port4, raft4 = free_port(), free_port()
        g.spawn(4, port4, raft4)
        time.sleep(0.5)
        t0 = time.monotonic()
        add = subprocess.run([binary, "cluster", "--via", f"127.0.0.1:{g.rafts[0]}",
                              "add", f"4@127.0.0.1:{raft4}"], capture_output=True, text=True)
        if add.returncode != 0:
            raise SystemExit(f"cluster add failed: {add.stdout}{add.stderr}")
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port4), timeout=30) as s:
                    s.sendall(resp("READONLY") + resp("DBSIZE"))
                    f = s.makefile("rb")
                    read_reply(f)
                    n = int(read_reply(f)[1:])
                if n >= dbsize:
                    break
            except (OSError, ConnectionError):
                pass
            if time.monotonic() - t0 > 300:
                raise SystemExit("node 4 did not catch up in 300 s")
            time.sleep(0.05)
        catchup = time.monotonic() - t0
        snaps = []
        for name in sorted(os.listdir(root)):
            if name.endswith(".log"):
                with open(os.path.join(root, name)) as f:
                    snaps += [int(m) for m in re.findall(r"took_ms=(\d+)", f.read())]
        return {
            "ops": ops, "load_s": took, "probes": len(lat),
            "p50_ms": lat[len(lat) // 2] * 1e3, "p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
            "max_ms": lat[-1] * 1e3, "catchup_s": catchup, "keys": dbsize, "purged": purged,
            "checkpoint_ms": snaps,
        }
    finally:
        g.stop()
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", action="append", required=True, help="name=path (repeat)")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--value", type=int, default=100)
    ap.add_argument("--load", type=int, default=3_000_000, help="SETs in the measured load")
    ap.add_argument("--every", type=int, default=200_000,
                    help="--raft-snapshot-every (builds without the flag: 200,000)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.binary]
    results = {name: [] for name, _ in bins}
    for r in range(args.rounds):
        for name, path in bins:
            res = one_round(path, args)
            results[name].append(res)
            print(f"round {r + 1} {name}: " + ", ".join(
                f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()),
                flush=True)
    print(f"\nmedians over {args.rounds} rounds ({args.keys} keys x {args.value} B, "
          f"load {args.load} SETs P16 c50, snapshot every {args.every} entries)")
    for name, _ in bins:
        rs = results[name]
        med = {k: statistics.median(r[k] for r in rs)
               for k in ("ops", "p50_ms", "p99_ms", "max_ms", "catchup_s")}
        how = "by snapshot" if all(r["purged"] > 0 for r in rs) else "(log not compacted: from the log)"
        print(f"{name:>8}: SET {med['ops']:.0f}/s  probe p50 {med['p50_ms']:.1f} ms  "
              f"p99 {med['p99_ms']:.1f} ms  max {med['max_ms']:.0f} ms  "
              f"new node caught up {how} in {med['catchup_s']:.1f} s")


if __name__ == "__main__":
    main()
