#!/usr/bin/env python3
"""Real client, real group: redis-py's Sentinel support against a 3-node
Basalt Raft group.

Starts three Basalt processes on free 127.0.0.1 ports as one group (the
README's flags), then does what an application with a Sentinel-aware
client does, unchanged:

  * `Sentinel([...nodes...]).discover_master(name)` names the leader,
    `discover_slaves` the two followers, `master_for(name)` writes and
    reads through it, `slave_for(name)` reads from a follower;
  * the leader is killed with SIGKILL; the same `master_for` client keeps
    writing (it finds the new leader by itself, within a bounded retry),
    and every write acknowledged before and after the kill is there;
  * a `Lock` held through the master client keeps working after the
    failover.

Every loop is bounded in count and time. Exit status 0 when all pass.

Usage: python3 scripts/clients/redis_py_sentinel.py [--binary PATH]
(CI: `pip install redis==8.1.0` first; see .ci/run.)
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import redis
from redis.sentinel import Sentinel


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_ping(port, deadline):
    while time.time() < deadline:
        try:
            if redis.Redis(port=port, socket_timeout=1).ping():
                return
        except redis.RedisError:
            time.sleep(0.05)
    raise SystemExit(f"node on port {port} did not answer PING")


def retry(what, f, seconds=15):
    """Runs f until it returns without a connection-level error."""
    deadline = time.time() + seconds
    while True:
        try:
            return f()
        except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError,
                redis.exceptions.ResponseError) as e:
            if time.time() > deadline:
                raise SystemExit(f"{what}: still failing after {seconds} s: {e}")
            time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/debug/basalt")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="basalt-sentinel-")
    ports = [free_port() for _ in range(3)]
    rafts = [free_port() for _ in range(3)]
    peers = ",".join(f"{i + 1}@127.0.0.1:{rafts[i]}" for i in range(3))
    procs = {}

    def start(i):
        procs[i] = subprocess.Popen(
            [a.binary, "--port", str(ports[i]), "--http-port", "0", "--dir", os.path.join(root, f"n{i + 1}"),
             "--node-id", str(i + 1), "--raft-port", str(rafts[i]), "--peers", peers],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    try:
        for i in range(3):
            start(i)
        for p in ports:
            wait_ping(p, time.time() + 30)
        sentinel = Sentinel([("127.0.0.1", p) for p in ports], socket_timeout=2)
        host, port = retry("discover_master", lambda: sentinel.discover_master("mymaster"))
        assert host == "127.0.0.1" and port in ports, (host, port)
        slaves = retry("discover_slaves", lambda: sentinel.discover_slaves("mymaster"))
        assert sorted(p for _, p in slaves) == sorted(p for p in ports if p != port), slaves
        print(f"ok  discover_master -> {port}, discover_slaves -> {[p for _, p in slaves]}")

        master = sentinel.master_for("mymaster", socket_timeout=3)
        for i in range(100):
            assert master.set(f"k{i}", i)
        assert master.incrby("n", 5) == 5
        replica = sentinel.slave_for("mymaster", socket_timeout=3)
        assert replica.get("k99") == b"99", "a follower read sees the acknowledged write"
        lock = master.lock("job", timeout=30)
        assert lock.acquire(blocking=False)
        print("ok  master_for writes, slave_for reads, Lock acquired")

        leader = ports.index(port)
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait()
        killed = time.time()
        retry("write after the kill", lambda: master.set("after", "kill"))
        took = time.time() - killed
        new_host, new_port = sentinel.discover_master("mymaster")
        assert new_port != port, "a new leader"
        for i in range(100, 200):
            assert retry("write", lambda: master.set(f"k{i}", i))
        assert master.incrby("n", 5) == 10
        values = master.mget([f"k{i}" for i in range(200)])
        assert values == [str(i).encode() for i in range(200)], "every acknowledged write is there"
        assert lock.owned(), "the lock survived the failover"
        lock.release()
        print(f"ok  leader {port} killed: master_for wrote again after {took:.2f} s through {new_port}; "
              f"200 writes and the lock intact")

        start(leader)
        wait_ping(ports[leader], time.time() + 30)
        back = redis.Redis(port=ports[leader], socket_timeout=3)
        assert retry("read on the restarted node", lambda: back.get("after")) == b"kill"
        print("ok  the killed node rejoined and serves every write")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        shutil.rmtree(root, ignore_errors=True)
    print("all passed")


if __name__ == "__main__":
    main()
