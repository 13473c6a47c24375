#!/usr/bin/env python3
"""Failover time of a 3-node Basalt group: kill -9 of the leader to the
first successful write through a client that retries.

Starts three nodes (the README's flags, free 127.0.0.1 ports, release
binary), then `--kills` times: finds the leader, sends SIGKILL to it and
from that instant has one client write (`INCR failover`) to the nodes still
up in turn, each try with a 50 ms socket timeout and 10 ms between rounds,
until one write is acknowledged; the time from the kill to that
acknowledgement is one sample. The killed node is restarted with its flags
and must catch up (its INFO `master_repl_offset`, the log index, reaches
the leader's) before the next kill. Finally checks with redis-cli that the
counter is the same on every node and at least the number of
acknowledged INCRs (a try that timed out may still have been applied).

Prints every sample and the median and maximum. Every wait is bounded.

Usage: python3 scripts/bench_failover.py --basalt target/release/basalt [--kills 20]
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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(port, *args, timeout=0.05):
    """One RESP command on a fresh connection; the raw reply, or None."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(f"*{len(args)}\r\n".encode() + b"".join(
                f"${len(str(a))}\r\n{a}\r\n".encode() for a in args))
            data = b""
            while not data.endswith(b"\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    return None
                data += chunk
            return data
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--basalt", default="target/release/basalt")
    ap.add_argument("--kills", type=int, default=20)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="basalt-failover-")
    ports = [free_port() for _ in range(3)]
    rafts = [free_port() for _ in range(3)]
    peers = ",".join(f"{i + 1}@127.0.0.1:{rafts[i]}" for i in range(3))
    procs = {}

    def start(i):
        procs[i] = subprocess.Popen(
            [a.basalt, "--port", str(ports[i]), "--http-port", "0",
             "--dir", os.path.join(root, f"n{i + 1}"), "--node-id", str(i + 1),
             "--raft-port", str(rafts[i]), "--peers", peers],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def leader(deadline):
        while time.time() < deadline:
            for i in procs:
                r = command(ports[i], "ROLE", timeout=0.5)
                if r and r.startswith(b"*3\r\n$6\r\nmaster"):
                    return i
            time.sleep(0.02)
        raise SystemExit("no leader within the deadline")

    def offset(i):
        r = command(ports[i], "INFO", "replication", timeout=1)
        if not r:
            return -1
        for line in r.decode(errors="replace").splitlines():
            if line.startswith("master_repl_offset:"):
                return int(line.split(":")[1])
        return -1

    acked = 0
    samples = []
    try:
        for i in range(3):
            start(i)
        leader(time.time() + 30)
        for k in range(a.kills):
            l = leader(time.time() + 30)
            # Some writes before the kill.
            for _ in range(20):
                if (command(ports[l], "INCR", "failover", timeout=1) or b"").startswith(b":"):
                    acked += 1
            procs[l].send_signal(signal.SIGKILL)
            killed = time.time()
            procs[l].wait()
            del procs[l]
            done = None
            while done is None and time.time() - killed < 30:
                for i in procs:
                    r = command(ports[i], "INCR", "failover")
                    if r and r.startswith(b":"):
                        done = time.time()
                        acked += 1
                        break
                else:
                    time.sleep(0.01)
            if done is None:
                raise SystemExit(f"kill {k + 1}: no write acknowledged within 30 s")
            samples.append(done - killed)
            print(f"kill {k + 1}: first write {1000 * samples[-1]:.0f} ms after the kill", flush=True)
            start(l)
            deadline = time.time() + 60
            while True:
                nl = leader(deadline)
                if offset(l) >= offset(nl) > 0:
                    break
                if time.time() > deadline:
                    raise SystemExit(f"node {l + 1} did not catch up within 60 s")
                time.sleep(0.05)
        counts = {}
        for i in procs:
            r = subprocess.run(["redis-cli", "-p", str(ports[i]), "GET", "failover"],
                               capture_output=True, text=True, timeout=10)
            counts[i + 1] = int(r.stdout.strip() or -1)
        # A try that timed out may still have been applied: the counter is
        # at least the acknowledged count, and the same on every node.
        print(f"acknowledged INCRs: {acked}; the counter on each node: {counts}")
        if len(set(counts.values())) != 1 or min(counts.values()) < acked:
            raise SystemExit("the nodes disagree, or an acknowledged INCR is missing")
        ms = sorted(1000 * s for s in samples)
        print(f"failover over {len(ms)} kills: median {statistics.median(ms):.0f} ms, "
              f"max {ms[-1]:.0f} ms, min {ms[0]:.0f} ms")
        return 0
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
