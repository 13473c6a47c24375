#!/usr/bin/env python3
"""Does compaction keep up with overwrites on a data set larger than memory?

The server runs inside a memory cgroup (v1, created and removed here;
root only) capped at --limit-mb, over --ratio times that much data
(--value-byte values, loaded once with `redis-cli --pipe` and copied
afresh for every run). redis-benchmark then overwrites random keys of
the data set (`SET key:<rand> <value>`, --clients connections, pipeline
--pipeline) for --seconds, while this script samples every --every
seconds: SETs done (INFO `total_commands_processed`), the data files'
live and dead bytes and the compactions so far (the HTTP API's
`/metrics`), and the data directory's size on disk.

Compaction keeps up when the directory stops growing: its size levels
off at live / (1 - garbage fraction a file may reach before compaction),
about 2x live with the default 0.5 threshold, instead of growing with
every byte written. The run stops early if the directory passes
--max-disk-gb.

    sudo scripts/bench_compaction.py --binary new=target/release/basalt

Prints one table row per sample (with whether writes are being delayed:
the engine's write stall) and a summary per binary: SET/s, bytes written
by clients, the directory's size at the end and its peak over live bytes
(space amplification), the compactions run and the write stalls begun.
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
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
from bench_cold import Cgroup, drop_caches, load, resp, start, stop  # noqa: E402
from servers import free_port  # noqa: E402


def info_field(port, field):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(resp("INFO", "stats"))
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            # $<len>\r\n<body>\r\n
            head, _, rest = buf.partition(b"\r\n")
            if head.startswith(b"$") and len(rest) >= int(head[1:]) + 2:
                break
    for line in buf.decode().splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1])
    raise RuntimeError(f"INFO has no {field}")


def metrics(http_port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        name = name.split("{", 1)[0]
        out[name] = out.get(name, 0) + float(value)
    return out


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def run(name, binary, base, work, a, keys, cgroup):
    data = os.path.join(work, f"run-{name}")
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(base, data)
    drop_caches()
    port, http_port = free_port(), free_port()
    p = start(binary, port, data, cgroup, http_port=http_port)
    bench = subprocess.Popen(
        ["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(keys), "-d", str(a.value),
         "-c", str(a.clients), "-P", str(a.pipeline), "-n", str(10**9), "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    c0 = info_field(port, "total_commands_processed")
    rows = []
    last_t, last_c = t0, c0
    print(f"\n== {name}: {binary}")
    print("| s | SET/s | live MB | dead MB | dir MB | dir/live | compactions | writes delayed |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    try:
        while time.time() - t0 < a.seconds:
            time.sleep(a.every)
            now = time.time()
            c = info_field(port, "total_commands_processed")
            m = metrics(http_port)
            d = dir_bytes(data)
            live = m.get("basalt_disk_live_bytes", 0)
            dead = m.get("basalt_disk_dead_bytes", 0)
            row = (now - t0, (c - last_c) / (now - last_t), live, dead, d,
                   m.get("basalt_compactions_total", 0))
            rows.append(row)
            last_t, last_c = now, c
            # Builds before write stalls have no such gauge.
            stalled = m.get("basalt_write_stalled")
            stalled = "-" if stalled is None else ("yes" if stalled else "no")
            print(f"| {row[0]:.0f} | {row[1]:.0f} | {live / 2**20:.0f} | {dead / 2**20:.0f} | "
                  f"{d / 2**20:.0f} | {d / max(live, 1):.2f} | {row[5]:.0f} | {stalled} |", flush=True)
            if d > a.max_disk_gb * 2**30:
                print(f"stopping: the directory passed {a.max_disk_gb} GiB")
                break
    finally:
        bench.send_signal(signal.SIGINT)
        try:
            bench.wait(10)
        except subprocess.TimeoutExpired:
            bench.kill()
        total = info_field(port, "total_commands_processed") - c0
        secs = time.time() - t0
        try:
            stalls = info_field(port, "basalt_write_stalls")
        except RuntimeError:
            stalls = None
        stop(p, port)
    shutil.rmtree(data, ignore_errors=True)
    peak = max(r[4] / max(r[2], 1) for r in rows) if rows else 0
    return {
        "sets_per_sec": total / secs,
        "written_gb": total * a.value / 2**30,
        "end_dir_mb": rows[-1][4] / 2**20 if rows else 0,
        "end_live_mb": rows[-1][2] / 2**20 if rows else 0,
        "peak_amp": peak,
        "end_amp": rows[-1][4] / max(rows[-1][2], 1) if rows else 0,
        "compactions": rows[-1][5] if rows else 0,
        "stalls": stalls,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", action="append", required=True, help="name=path; repeat to compare")
    ap.add_argument("--limit-mb", type=int, default=256)
    ap.add_argument("--ratio", type=float, default=4)
    ap.add_argument("--value", type=int, default=8000)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--every", type=float, default=10)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--pipeline", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--max-disk-gb", type=float, default=30)
    ap.add_argument("--dir", default=None, help="parent of the data directories")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (memory cgroup, drop_caches)")
    binaries = [b.split("=", 1) for b in a.binary]
    limit = a.limit_mb << 20
    keys = int(a.ratio * limit / a.value)
    work = tempfile.mkdtemp(prefix="basalt-compaction-", dir=a.dir)
    cgroup = Cgroup(f"basalt-compaction-{os.getpid()}", limit)
    results = {}
    try:
        base = os.path.join(work, "base")
        print(f"loading {keys} keys x {a.value} B ({keys * a.value / 2**30:.2f} GiB) "
              f"for a {a.limit_mb} MiB limit", flush=True)
        load(binaries[0][1], base, 0, keys, a.value)
        for _ in range(a.rounds):
            for name, binary in binaries:
                results.setdefault(name, []).append(run(name, binary, base, work, a, keys, cgroup))
    finally:
        cgroup.remove()
        shutil.rmtree(work, ignore_errors=True)
    print("\n| binary | SET/s | GiB written | dir MB at end | live MB | dir/live at end | peak dir/live | compactions | write stalls |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, rs in results.items():
        for r in rs:
            print(f"| {name} | {r['sets_per_sec']:.0f} | {r['written_gb']:.1f} | {r['end_dir_mb']:.0f} | "
                  f"{r['end_live_mb']:.0f} | {r['end_amp']:.2f} | {r['peak_amp']:.2f} | {r['compactions']:.0f} | "
                  f"{'-' if r['stalls'] is None else r['stalls']} |")


if __name__ == "__main__":
    main()
