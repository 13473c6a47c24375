#!/usr/bin/env python3
"""Random GETs on a data set larger than the memory Basalt may use.

The server runs inside a memory cgroup (v1 `memory.limit_in_bytes`, or
v2 `memory.max` where no v1 memory hierarchy is mounted; created and
removed here; root only) capped at --limit-mb, over a data
set of --keys values of --value bytes (default: each of --ratios times the
limit, grown step by step).
The data is loaded once (`redis-cli --pipe`), then for each binary in
turn (alternating, --rounds times) the page cache is dropped (`echo 3 >
/proc/sys/vm/drop_caches`: the whole machine's), the binary starts on
the same directory inside the cgroup, and redis-benchmark sends random
GETs (`-t get -r KEYS`, 50 clients) at each pipeline depth while a probe
client reads 10 small hot keys one at a time and records each latency:
its p99 shows whether cold reads stall the warm ones. fio measures the
disk in the same run: random reads of --value bytes (rounded up to 4 KiB)
with O_DIRECT at queue depth 32 (libaio), the physical limit.

    sudo scripts/bench_cold.py --binary old=/tmp/basalt-old --binary new=target/release/basalt

With --exec-gets N the load is transactions instead (--clients processes,
each sending MULTI, N GETs of random keys and EXEC together, --requests
transactions in all): GET/s then counts transactions. With --script each
request is an EVAL whose script GETs the random key; with --command, the
command given (GET/s then counts those commands).

Reports GET throughput, p50/p99 (redis-benchmark's), the probe's p50/p99/
max, and the ratio to fio's IOPS; medians over rounds. Needs
redis-benchmark and redis-cli (apt-get install redis-tools) and fio.
"""
import argparse
import csv
import io
import json
import os
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

CGROUP_V1 = "/sys/fs/cgroup/memory"
CGROUP_V2 = "/sys/fs/cgroup"


def resp(*args):
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += f"${len(a)}\r\n".encode() + a + b"\r\n"
    return out


def wait_ping(port, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(resp("PING"))
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no PING answer on port {port}")


class Cgroup:
    def __init__(self, name, limit):
        self.v2 = not os.path.isdir(CGROUP_V1) and os.path.exists(
            os.path.join(CGROUP_V2, "cgroup.controllers"))
        if self.v2:
            # The memory controller must be enabled for the root's children.
            with open(os.path.join(CGROUP_V2, "cgroup.subtree_control"), "w") as f:
                f.write("+memory")
            self.path = os.path.join(CGROUP_V2, name)
        else:
            self.path = os.path.join(CGROUP_V1, name)
        os.makedirs(self.path, exist_ok=True)
        knob = "memory.max" if self.v2 else "memory.limit_in_bytes"
        with open(os.path.join(self.path, knob), "w") as f:
            f.write(str(limit))

    def usage(self):
        # Peak usage (v2's memory.peak exists from Linux 5.19 on).
        knob = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            with open(os.path.join(self.path, knob)) as f:
                return int(f.read())
        except OSError:
            with open(os.path.join(self.path, "memory.current")) as f:
                return int(f.read())

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def start(binary, port, data, cgroup=None, http_port=0):
    cmd = [binary, "--port", str(port), "--dir", data, "--http-port", str(http_port),
           "--appendfsync", "everysec"]
    if cgroup:
        procs = os.path.join(cgroup.path, "cgroup.procs")
        cmd = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"] + cmd
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ping(port)
    return p


def stop(p, port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(resp("SHUTDOWN", "NOSAVE"))
            s.recv(64)
    except OSError:
        pass
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def load(binary, data, first, keys, size, fields=0, segmented=False):
    """Writes keys `first..keys` (and the hot keys); with `fields`, each key
    is a hash of that many fields sharing the `size` bytes; with
    `segmented`, each value is written by SETRANGE, which keeps a value over
    4 KiB in 512-byte segments (Basalt's bitmaps and ranged strings)."""
    port = free_port()
    p = start(binary, port, data)
    cli = subprocess.Popen(["redis-cli", "-p", str(port), "--pipe"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    block = os.urandom(size)
    batch = []
    for i in range(first, keys):
        key = f"key:{i:012d}".encode()
        # Incompressible, and different per key.
        v = key + block[len(key):]
        if fields:
            part = len(v) // fields
            args = [b"HSET", key]
            for f in range(fields):
                args += [b"f%d" % f, v[f * part:(f + 1) * part]]
            batch.append(resp(*args))
        elif segmented:
            batch.append(resp(b"SETRANGE", key, b"0", v))
        else:
            batch.append(resp(b"SET", key, v))
        if len(batch) == 256:
            cli.stdin.write(b"".join(batch))
            batch = []
    for i in range(10):
        batch.append(resp("SET", f"hot:{i}", f"hot value {i}"))
    cli.stdin.write(b"".join(batch))
    cli.stdin.close()
    out = cli.stdout.read().decode()
    cli.wait()
    if "errors: 0" not in out:
        raise RuntimeError(f"load failed: {out}")
    stop(p, port)


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def probe(port, running, lat):
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    i = 0
    while running:
        t = time.perf_counter()
        s.sendall(resp("GET", f"hot:{i % 10}"))
        line = f.readline()
        if line.startswith(b"$"):
            f.read(int(line[1:]) + 2)
        lat.append((time.perf_counter() - t) * 1000)
        i += 1
        time.sleep(0.001)
    s.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] if xs else float("nan")


def disk_reads(path):
    """(reads completed, sectors read, milliseconds spent on reads) so far by
    the block device holding `path` (/proc/diskstats; the milliseconds are
    the sum of every read's time from issue to completion, so their change
    over a run divided by the reads' is the disk's mean read latency)."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if int(p[0]) == major and int(p[1]) == minor:
                return int(p[3]), int(p[5]), int(p[6])
    return 0, 0, 0


def read_reply(f):
    """Reads one RESP2 reply from `f` (arrays of bulk strings and nulls)."""
    line = f.readline()
    kind = line[:1]
    if kind == b"$":
        n = int(line[1:])
        if n >= 0:
            f.read(n + 2)
    elif kind == b"*":
        for _ in range(max(0, int(line[1:]))):
            read_reply(f)
    elif kind == b"-":
        raise RuntimeError(line.decode(errors="replace").strip())


def exec_client(args):
    """One client: `count` transactions, each MULTI, `gets` GETs of random
    keys and EXEC sent together; returns each transaction's latency (ms)."""
    port, keys, count, gets, seed = args
    import random
    rnd = random.Random(seed)
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    lat = []
    for _ in range(count):
        req = resp("MULTI") + b"".join(
            resp("GET", f"key:{rnd.randrange(keys):012d}") for _ in range(gets)) + resp("EXEC")
        t = time.perf_counter()
        s.sendall(req)
        for _ in range(gets + 2):
            read_reply(f)
        lat.append((time.perf_counter() - t) * 1000)
    s.close()
    return lat


def exec_load(port, keys, requests, clients, gets):
    """`requests` transactions of `gets` GETs from `clients` processes."""
    import multiprocessing
    per = max(1, requests // clients)
    t = time.perf_counter()
    with multiprocessing.Pool(clients) as pool:
        lats = pool.map(exec_client, [(port, keys, per, gets, i) for i in range(clients)])
    wall = time.perf_counter() - t
    lat = [x for ls in lats for x in ls]
    return {"rps": len(lat) / wall, "p50": pct(lat, 50), "p99": pct(lat, 99)}


def get_run(port, keys, requests, clients, pipeline, data, mix=False, value=8000, fields=0,
            exec_gets=0, script=False, command=None):
    """Random GETs; with `mix`, a tenth of the clients send SETs of the same
    keys meanwhile (a tenth of the requests): a 90/10 read/update mix."""
    before = disk_reads(data)
    lat = []
    running = [True]
    t = threading.Thread(target=probe, args=(port, running, lat))
    # The probe runs while redis-benchmark does; it ends when it returns.
    t.start()
    writer = None
    if mix:
        wc = max(1, clients // 10)
        clients -= wc
        writer = subprocess.Popen(
            ["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(keys), "-d", str(value),
             "-n", str(requests // 9), "-c", str(wc), "-P", str(pipeline), "--csv"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if exec_gets:
        row = exec_load(port, keys, requests, clients, exec_gets)
    else:
        if command:
            what = command.split()
        elif script:
            what = ["EVAL", "return redis.call('get', KEYS[1])", "1", "key:__rand_int__"]
        elif fields:
            what = ["HGETALL", "key:__rand_int__"]
        else:
            what = ["-t", "get"]
        out = subprocess.run(
            ["redis-benchmark", "-p", str(port), "-r", str(keys),
             "-n", str(requests), "-c", str(clients), "-P", str(pipeline), "--csv"] + what,
            capture_output=True, text=True, check=True).stdout
        row = next(csv.DictReader(io.StringIO(out)))
        row = {"rps": float(row["rps"]), "p50": float(row["p50_latency_ms"]),
               "p99": float(row["p99_latency_ms"])}
    set_rps = 0.0
    if writer:
        wout, _ = writer.communicate()
        set_rps = float(next(csv.DictReader(io.StringIO(wout)))["rps"])
    running.clear()
    t.join()
    after = disk_reads(data)
    read_kb = (after[1] - before[1]) * 512 / 1024
    reads = after[0] - before[0]
    return {
        "set_rps": set_rps,
        "disk_kb_per_get": read_kb / requests,
        "disk_read_ms": (after[2] - before[2]) / reads if reads else float("nan"),
        "rps": row["rps"],
        "p50": row["p50"],
        "p99": row["p99"],
        "probe_p50": pct(lat, 50),
        "probe_p99": pct(lat, 99),
        "probe_max": max(lat) if lat else float("nan"),
        "probe_n": len(lat),
    }


IO_URING_EVENTS = ("io_uring:io_uring_submit_req,io_uring:io_uring_queue_async_work,"
                   "io_uring:io_uring_complete,io_uring:io_uring_task_add,"
                   "io_uring:io_uring_poll_arm")


def start_perf(folder, label, seconds):
    """With `folder`, starts a system-wide `perf record` (cpu-clock, call
    graphs) and a `perf stat` of io_uring's tracepoints, each for `seconds`;
    returns the processes to wait for (none without a folder)."""
    if not folder:
        return []
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(folder, label)
    rec = subprocess.Popen(
        ["perf", "record", "-a", "-g", "-e", "cpu-clock", "-F", "999", "-o", base + ".data",
         "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stat = subprocess.Popen(
        ["perf", "stat", "-a", "-e", IO_URING_EVENTS, "-o", base + ".stat",
         "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [rec, stat]


def fio(dirpath, size, bs, seconds):
    path = os.path.join(dirpath, "fio.test")
    res = {}
    for name, extra in (("qd32", ["--ioengine=libaio", "--iodepth=32", "--numjobs=1"]),
                        ("sync2", ["--ioengine=psync", "--numjobs=2"])):
        out = subprocess.run(
            ["fio", "--name=cold", f"--filename={path}", f"--size={size}",
             "--rw=randread", f"--bs={bs}", "--direct=1", "--time_based",
             f"--runtime={seconds}", "--group_reporting", "--output-format=json"]
            + extra, capture_output=True, text=True, check=True).stdout
        j = json.loads(out)
        res[name] = j["jobs"][0]["read"]["iops"]
    os.unlink(path)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", action="append", default=[],
                    help="name=path of a basalt binary; repeat to compare")
    ap.add_argument("--limit-mb", type=int, default=512)
    ap.add_argument("--ratios", default="4",
                    help="data set sizes over the limit, comma separated, run in "
                         "increasing order on one growing data set (ignored with --keys)")
    ap.add_argument("--value", type=int, default=8000, help="value bytes")
    ap.add_argument("--keys", type=int, default=0)
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fio-seconds", type=int, default=10)
    ap.add_argument("--dir", default=None, help="parent of the data directory")
    ap.add_argument("--mix", action="store_true",
                    help="90/10: a tenth of the clients SET random keys (a ninth as many "
                         "requests as the GETs) while the others GET")
    ap.add_argument("--exec-gets", type=int, default=0,
                    help="instead of redis-benchmark, --clients processes send --requests "
                         "transactions (MULTI, this many GETs of random keys, EXEC); "
                         "GET/s then counts transactions and the pipeline depth is ignored")
    ap.add_argument("--script", action="store_true",
                    help="each request is EVAL of a script that GETs the random key")
    ap.add_argument("--command", default=None,
                    help="instead of GET, this command (words split on spaces; redis-benchmark "
                         "puts a random key number for __rand_int__), e.g. "
                         "'GETRANGE key:__rand_int__ 0 99' or 'STRLEN key:__rand_int__'")
    ap.add_argument("--segmented", action="store_true",
                    help="write each value with SETRANGE (kept in 512-byte segments) instead of SET")
    ap.add_argument("--hash-fields", type=int, default=0,
                    help="store each key as a hash of this many fields sharing the value's "
                         "bytes, and read with HGETALL instead of GET")
    ap.add_argument("--json", default=None)
    ap.add_argument("--perf-dir", default=None,
                    help="record `perf` system-wide (cpu-clock, call graphs) and count "
                         "io_uring tracepoints for the first seconds of each run, into "
                         "this folder (one NAME-PP-rR.data/.stat per run)")
    ap.add_argument("--perf-seconds", type=float, default=4.0)
    ap.add_argument("--engines", default=None, metavar="BASALT_BENCH",
                    help="instead of the servers: run this basalt-bench binary's engine "
                         "benchmark (Basalt's engine and RocksDB, --threads threads, "
                         "fillrandom then readrandom, overwrite and a 90/10 mix) inside "
                         "the cgroup on --ratios[0] times the limit")
    ap.add_argument("--threads", type=int, default=32,
                    help="engine benchmark threads (with --engines)")
    ap.add_argument("--block-cache-mb", type=int, default=64,
                    help="RocksDB block cache (with --engines)")
    ap.add_argument("--basalt-residency", default="check", choices=["check", "in-place"],
                    help="Basalt engine's residency check (with --engines)")
    a = ap.parse_args()
    if a.engines:
        return engines(a)
    if not a.binary:
        sys.exit("--binary name=path is required (or --engines)")
    if os.geteuid() != 0:
        sys.exit("needs root (memory cgroup, drop_caches)")
    for tool in ("redis-benchmark", "redis-cli", "fio"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install -y redis-tools fio")
    binaries = [b.split("=", 1) for b in a.binary]
    limit = a.limit_mb << 20
    if a.keys:
        steps = [a.keys]
    else:
        steps = sorted(int(float(r) * limit / a.value) for r in a.ratios.split(","))
    pipelines = [int(p) for p in a.pipelines.split(",")]
    work = tempfile.mkdtemp(prefix="basalt-cold-", dir=a.dir)
    data = os.path.join(work, "data")
    cg = Cgroup(f"basalt-cold-{os.getpid()}", limit)
    results = []
    try:
        bs = (a.value + 4095) // 4096 * 4096
        disk = fio(work, "2G", bs, a.fio_seconds)
        print(f"fio randread bs={bs} O_DIRECT: QD32 {disk['qd32']:.0f} IOPS, "
              f"2 sync readers {disk['sync2']:.0f} IOPS", flush=True)
        loaded = 0
        for keys in steps:
            t0 = time.time()
            load(binaries[0][1], data, loaded, keys, a.value, a.hash_fields, a.segmented)
            loaded = keys
            size = sum(os.path.getsize(os.path.join(r, f))
                       for r, _, fs in os.walk(data) for f in fs)
            ratio = size / limit
            print(f"loaded {keys} keys x {a.value} B ({time.time() - t0:.0f}s): "
                  f"{size / 2**30:.2f} GiB on disk, limit {a.limit_mb} MiB "
                  f"({ratio:.1f}x)", flush=True)
            runs = {name: {p: [] for p in pipelines} for name, _ in binaries}
            for r in range(a.rounds):
                order = binaries if r % 2 == 0 else binaries[::-1]
                for name, path in order:
                    for pl in pipelines:
                        drop_caches()
                        port = free_port()
                        p = start(path, port, data, cg)
                        perf = start_perf(a.perf_dir, f"{name}-P{pl}-r{r + 1}",
                                          a.perf_seconds)
                        try:
                            res = get_run(port, keys, a.requests, a.clients, pl, data, a.mix,
                                          a.value, a.hash_fields, a.exec_gets, a.script,
                                          a.command)
                        finally:
                            for q in perf:
                                q.wait()
                            stop(p, port)
                        runs[name][pl].append(res)
                        sets = f" + {res['set_rps']:.0f} SET/s" if a.mix else ""
                        print(f"round {r + 1} {name} P{pl}: {res['rps']:.0f} GET/s{sets} "
                              f"p50 {res['p50']:.2f} p99 {res['p99']:.2f} ms, hot probe "
                              f"p50 {res['probe_p50']:.2f} p99 {res['probe_p99']:.2f} "
                              f"max {res['probe_max']:.1f} ms, "
                              f"disk {res['disk_kb_per_get']:.1f} KiB/GET, "
                              f"{res['disk_read_ms']:.3f} ms/read", flush=True)
            results.append({"keys": keys, "disk_bytes": size, "ratio": ratio, "runs": runs})
        print()
        setcol = " SET/s |" if a.mix else ""
        print("| data/limit | binary | P | GET/s |" + setcol + " x fio QD32 | p50 ms | p99 ms "
              "| hot p50 ms | hot p99 ms | hot max ms | disk KiB/GET | disk ms/read |")
        print("|---:|---|---:|---:|" + ("---:|" if a.mix else "")
              + "---:|---:|---:|---:|---:|---:|---:|---:|")
        for step in results:
            for name, _ in binaries:
                for pl in pipelines:
                    rs = step["runs"][name][pl]
                    med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
                    sets = f"| {med['set_rps']:.0f} " if a.mix else ""
                    print(f"| {step['ratio']:.1f}x | {name} | {pl} | {med['rps']:.0f} {sets}"
                          f"| {med['rps'] / disk['qd32']:.2f} | {med['p50']:.2f} "
                          f"| {med['p99']:.2f} | {med['probe_p50']:.2f} "
                          f"| {med['probe_p99']:.2f} | {med['probe_max']:.1f} "
                          f"| {med['disk_kb_per_get']:.1f} | {med['disk_read_ms']:.3f} |")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"value": a.value, "limit_mb": a.limit_mb, "fio": disk,
                           "steps": results}, f, indent=1)
    finally:
        cg.remove()
        shutil.rmtree(work, ignore_errors=True)


def engines(a):
    """The engine benchmark inside the memory cgroup: both engines, one process."""
    if os.geteuid() != 0:
        sys.exit("needs root (memory cgroup)")
    limit = a.limit_mb << 20
    keys = a.keys or int(float(a.ratios.split(",")[0]) * limit / a.value)
    work = tempfile.mkdtemp(prefix="basalt-cold-engines-", dir=a.dir)
    cg = Cgroup(f"basalt-cold-{os.getpid()}", limit)
    try:
        procs = os.path.join(cg.path, "cgroup.procs")
        cmd = [a.engines, "engine", "--keys", str(keys), "--value-size", str(a.value),
               "--threads", str(a.threads), "--rounds", str(a.rounds), "--dir", work,
               "--rocksdb-block-cache-mb", str(a.block_cache_mb), "--basalt-sync", "everysec",
               "--basalt-residency", a.basalt_residency]
        if a.json:
            cmd += ["--json", a.json]
        print(f"{keys} keys x {a.value} B ({keys * a.value / limit:.1f}x the "
              f"{a.limit_mb} MiB limit): {' '.join(cmd)}", flush=True)
        subprocess.run(["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"] + cmd, check=True)
        print(f"cgroup peak memory: {cg.usage() >> 20} MiB", flush=True)
    finally:
        cg.remove()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
