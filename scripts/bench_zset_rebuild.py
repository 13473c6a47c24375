#!/usr/bin/env python3
"""How long the first command on a big sorted set (or stream) holds up
other clients after a restart (the index rebuild, `commands/zbuild.rs`).

Fills one sorted set of --members members (with --kind stream: one stream
of that many entries, read by the first XLEN; with --kind bitmap: one
string of --members bytes written by SETRANGE, 512-byte segments, read by
the first BITCOUNT) into a fresh data directory,
then for each binary given, alternating, restarts a server on it (with
`--read-residency check`, as a data set larger than memory sets it; pass
--residency in-place to see the warm default) and sends the first ZRANGE
while four other clients PING every 2 ms: it prints the ZRANGE's time and
each pinging client's worst PING. Clients spread over the server's
workers, so some share the ZRANGE's worker. Run as root to also measure
with the page cache dropped after the restart (cold records).

    python3 scripts/bench_zset_rebuild.py --members 1000000 OLD_BINARY NEW_BINARY
    python3 scripts/bench_zset_rebuild.py --kind stream --residency in-place OLD NEW
"""
import argparse
import os
import socket
import subprocess
import tempfile
import threading
import time

PORT = 7399


def conn():
    s = socket.create_connection(("127.0.0.1", PORT))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def encode(*args):
    return ("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args)).encode()


def reply(s):
    """One reply: a line, or an array of bulk strings."""
    buf = b""
    while True:
        buf += s.recv(1 << 20)
        if not buf.endswith(b"\r\n"):
            continue
        if buf[:1] != b"*":
            return buf
        n = int(buf[1:buf.index(b"\r\n")])
        if buf.count(b"\r\n") >= 1 + 2 * n:
            return buf


def start(binary, data, residency):
    p = subprocess.Popen([binary, "--port", str(PORT), "--dir", data, "--read-residency", residency],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            return p, conn()
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{binary} did not start")


def fill(binary, data, members, kind):
    p, c = start(binary, data, "in-place")
    per = 1000
    if kind == "bitmap":
        chunk = 1 << 20
        for at in range(0, members, chunk):
            c.sendall(encode("SETRANGE", "big", str(at), "\x55" * min(chunk, members - at)))
            reply(c)
        members = 0
    for base in range(0, members, per):
        if kind == "stream":
            n = min(base + per, members) - base
            c.sendall(b"".join(encode("XADD", "big", "*", "f", str(m)) for m in range(base, base + n)))
            got = b""
            while got.count(b"\r\n") < n:
                got += c.recv(1 << 20)
            continue
        args = ["ZADD", "big"]
        for m in range(base, min(base + per, members)):
            args += [str((m * 7919) % 1000003), f"member:{m}"]
        c.sendall(encode(*args))
        reply(c)
    p.terminate()
    p.wait()


def measure(binary, data, residency, drop, kind):
    subprocess.run("sync", shell=True)
    p, c = start(binary, data, residency)
    if drop:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    pingers = [conn() for _ in range(4)]
    worst = [0.0] * 4
    stop = threading.Event()

    def ping(i):
        while not stop.is_set():
            t = time.perf_counter()
            pingers[i].sendall(encode("PING"))
            reply(pingers[i])
            worst[i] = max(worst[i], time.perf_counter() - t)
            time.sleep(0.002)

    threads = [threading.Thread(target=ping, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    t = time.perf_counter()
    first = {"stream": ("XLEN", "big"), "bitmap": ("BITCOUNT", "big")}.get(kind, ("ZRANGE", "big", "0", "0"))
    c.sendall(encode(*first))
    reply(c)
    took = time.perf_counter() - t
    time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()
    p.terminate()
    p.wait()
    print(f"{binary} residency={residency} page-cache-dropped={drop}: first {first[0]} {took * 1000:.0f} ms, "
          f"worst PING per client (ms): {[round(w * 1000, 1) for w in worst]}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--residency", default="check")
    ap.add_argument("--kind", choices=["zset", "stream", "bitmap"], default="zset")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as data:
        fill(args.binaries[0], data, args.members, args.kind)
        drops = [False, True] if os.geteuid() == 0 else [False]
        for _ in range(args.rounds):
            for b in args.binaries:
                for drop in drops:
                    measure(b, data, args.residency, drop, args.kind)


if __name__ == "__main__":
    main()
