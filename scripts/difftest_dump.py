#!/usr/bin/env python3
"""Differential test of DUMP / RESTORE between redis-server 7.0 and Basalt.

For random values of every type, size and encoding (small values in
Redis's listpack / intset / int encodings, large ones in its plain
encodings, integers, binary bytes, LZF-compressible strings, streams with
deletions and consumer groups), each value is built in redis-server, then
  redis DUMP  -> Basalt RESTORE -> contents compared with redis's key, and
  Basalt DUMP -> redis RESTORE  -> contents compared with redis's key.
Counts are reported per type / Redis encoding / variant and direction.

Usage:
  redis-server --port 16593 --save '' --appendonly no --daemonize yes
  cargo build --release -p basalt-server
  target/release/basalt --port 16581 --http-port 0 --dir "$(mktemp -d)" &
  python3 scripts/difftest_dump.py [--redis 16593] [--basalt 16581]
                                   [--rounds 20] [--seed 1] [--no-sanitize] [-v]
redis's sanitize-dump-payload is set to yes for the run (deep validation of
every payload Basalt sends it) unless --no-sanitize.
Exit status 1 if any comparison failed.
"""
import argparse
import random
import socket
import sys
from collections import defaultdict


class Conn:
    """A minimal RESP2 client: replies as bytes / ints / lists / errors."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest
        if t == b"-":
            return RedisError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ValueError("bad reply %r" % line)

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, int):
                a = str(a).encode()
            elif isinstance(a, str):
                a = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))

    def cmd(self, *args):
        self.send(*args)
        return self._read()

    def pipe(self, cmds):
        """Sends many commands at once and returns their replies."""
        data = []
        for c in cmds:
            out = [b"*%d\r\n" % len(c)]
            for a in c:
                if isinstance(a, int):
                    a = str(a).encode()
                elif isinstance(a, str):
                    a = a.encode()
                out.append(b"$%d\r\n%s\r\n" % (len(a), a))
            data.append(b"".join(out))
        self.s.sendall(b"".join(data))
        return [self._read() for _ in cmds]


class RedisError(str):
    pass


# ------------------------------------------------------------ values


def rbytes(rng, n, binary=False):
    if binary:
        return bytes(rng.getrandbits(8) for _ in range(n))
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789-_:"
    return bytes(rng.choice(alphabet) for _ in range(n))


def rint(rng):
    return str(rng.choice([
        rng.randint(0, 127), rng.randint(-4096, 4095), rng.randint(-32768, 32767),
        rng.randint(-(1 << 23), (1 << 23) - 1), rng.randint(-(1 << 31), (1 << 31) - 1),
        rng.randint(-(1 << 63), (1 << 63) - 1), 0, -1,
    ])).encode()


def relem(rng, maxlen=20, binary=None):
    """A collection element: an integer, a short string, or binary bytes."""
    r = rng.random()
    if r < 0.35:
        return rint(rng)
    if r < 0.45:
        return rng.choice([b"007", b"-0", b"+1", b" 1", b"1.5", b"", b"99999999999999999999"])
    return rbytes(rng, rng.randint(1, maxlen), binary if binary is not None else rng.random() < 0.3)


def rscore(rng):
    return rng.choice([
        str(rng.randint(-1000, 1000)), repr(rng.uniform(-1e6, 1e6)), "inf", "-inf",
        "1e300", "-1e-300", "0.1", str(rng.randint(-(1 << 53), 1 << 53)), "3.0",
    ])


def build(rng, r, key, kind, variant):
    """Creates `key` in redis (connection r); returns the commands used."""
    cmds = []
    if kind == "string":
        v = {
            "int8": lambda: str(rng.randint(-128, 127)).encode(),
            "int32": lambda: str(rng.randint(-(1 << 31), (1 << 31) - 1)).encode(),
            "int64": lambda: str(rng.randint(1 << 40, 1 << 62)).encode(),
            "short": lambda: rbytes(rng, rng.randint(0, 20)),
            "lzf": lambda: rbytes(rng, 4) * rng.randint(10, 5000),
            "binary": lambda: rbytes(rng, rng.randint(1, 3000), True),
            "big": lambda: rbytes(rng, rng.randint(100_000, 600_000)),
        }[variant]()
        cmds.append(["SET", key, v])
    elif kind == "list":
        n = {"small": rng.randint(1, 30), "ints": rng.randint(1, 200),
             "large": rng.randint(500, 5000), "bigelems": rng.randint(1, 20)}[variant]
        items = []
        for _ in range(n):
            if variant == "ints":
                items.append(rint(rng))
            elif variant == "bigelems":
                items.append(rbytes(rng, rng.randint(5000, 40000), rng.random() < 0.5))
            else:
                items.append(relem(rng))
        for i in range(0, len(items), 500):
            cmds.append(["RPUSH", key] + items[i:i + 500])
        if variant == "small" and rng.random() < 0.5:
            cmds.append(["LPUSH", key, relem(rng)])
    elif kind == "set":
        if variant == "intset":
            members = {rint(rng) for _ in range(rng.randint(1, 400))}
        elif variant == "bigints":
            members = {rint(rng) for _ in range(rng.randint(600, 2000))}
        elif variant == "small":
            members = {relem(rng) for _ in range(rng.randint(1, 50))}
        else:
            members = {relem(rng, 80) for _ in range(rng.randint(200, 3000))}
        members = list(members)
        for i in range(0, len(members), 500):
            cmds.append(["SADD", key] + members[i:i + 500])
    elif kind == "hash":
        n = {"small": rng.randint(1, 100), "longvalue": rng.randint(1, 10),
             "large": rng.randint(200, 3000)}[variant]
        pairs = {}
        for _ in range(n):
            f = relem(rng)
            if variant == "longvalue":
                pairs[f] = rbytes(rng, rng.randint(65, 5000), rng.random() < 0.5)
            else:
                pairs[f] = relem(rng, 60)
        flat = [x for kv in pairs.items() for x in kv]
        for i in range(0, len(flat), 1000):
            cmds.append(["HSET", key] + flat[i:i + 1000])
    elif kind == "zset":
        n = {"small": rng.randint(1, 120), "large": rng.randint(200, 3000),
             "longmember": rng.randint(1, 10)}[variant]
        flat = []
        for _ in range(n):
            m = rbytes(rng, rng.randint(65, 300)) if variant == "longmember" else relem(rng)
            flat += [rscore(rng), m]
        for i in range(0, len(flat), 1000):
            cmds.append(["ZADD", key] + flat[i:i + 1000])
    elif kind == "stream":
        n = {"small": rng.randint(1, 10), "large": rng.randint(150, 1500),
             "groups": rng.randint(5, 300), "empty": rng.randint(1, 5)}[variant]
        ms = rng.randint(1, 1 << 40)
        fields = [b"f1", b"f2", b"name"]
        ids = []
        for i in range(n):
            ms += rng.choice([0, 1, 1, 7, 1000])
            idv = b"%d-%d" % (ms, i)
            ids.append(idv)
            if rng.random() < 0.8:
                fv = [x for f in fields for x in (f, relem(rng, 40))]
            else:
                fv = [x for _ in range(rng.randint(1, 4)) for x in (relem(rng, 10), relem(rng, 40))]
            cmds.append(["XADD", key, idv] + fv)
        if variant in ("large", "groups") and ids:
            for idv in rng.sample(ids, rng.randint(0, len(ids) // 4)):
                cmds.append(["XDEL", key, idv])
        if variant == "empty":
            cmds.append(["XGROUP", "CREATE", key, "g0", "0"])
            for idv in ids:
                cmds.append(["XDEL", key, idv])
        if variant == "groups":
            for g in range(rng.randint(1, 3)):
                gname = b"group%d" % g
                cmds.append(["XGROUP", "CREATE", key, gname, "0"])
                for c in range(rng.randint(1, 3)):
                    cmds.append(["XREADGROUP", "GROUP", gname, b"c%d" % c, "COUNT",
                                 rng.randint(1, 40), "STREAMS", key, ">"])
                cmds.append(["XGROUP", "CREATECONSUMER", key, gname, b"idle"])
                for idv in rng.sample(ids, min(len(ids), 5)):
                    cmds.append(["XACK", key, gname, idv])
    r.pipe(cmds)
    if rng.random() < 0.2:
        r.cmd("PEXPIRE", key, rng.randint(100_000, 10_000_000))


VARIANTS = {
    "string": ["int8", "int32", "int64", "short", "lzf", "binary", "big"],
    "list": ["small", "ints", "large", "bigelems"],
    "set": ["intset", "bigints", "small", "large"],
    "hash": ["small", "longvalue", "large"],
    "zset": ["small", "large", "longmember"],
    "stream": ["small", "large", "groups", "empty"],
}


def snapshot(c, key):
    """Everything observable about `key` that DUMP / RESTORE carries."""
    t = c.cmd("TYPE", key)
    if t == b"string":
        return (t, c.cmd("GET", key))
    if t == b"list":
        return (t, c.cmd("LRANGE", key, 0, -1))
    if t == b"set":
        return (t, sorted(c.cmd("SMEMBERS", key)))
    if t == b"hash":
        flat = c.cmd("HGETALL", key)
        return (t, sorted(zip(flat[::2], flat[1::2])))
    if t == b"zset":
        flat = c.cmd("ZRANGE", key, 0, -1, "WITHSCORES")
        return (t, [(m, float(s)) for m, s in zip(flat[::2], flat[1::2])])
    if t == b"stream":
        info = c.cmd("XINFO", "STREAM", key)
        info = dict(zip(info[::2], info[1::2]))
        keep = {k: info.get(k) for k in (b"length", b"last-generated-id",
                                          b"max-deleted-entry-id", b"entries-added",
                                          b"recorded-first-entry-id", b"groups")}
        groups = []
        for g in c.cmd("XINFO", "GROUPS", key):
            g = dict(zip(g[::2], g[1::2]))
            name = g[b"name"]
            consumers = []
            for cons in c.cmd("XINFO", "CONSUMERS", key, name):
                cons = dict(zip(cons[::2], cons[1::2]))
                consumers.append((cons[b"name"], cons[b"pending"]))
            pel = [(p[0], p[1], p[3]) for p in c.cmd("XPENDING", key, name, "-", "+", 1 << 30)]
            groups.append((name, g[b"consumers"], g[b"pending"], g[b"last-delivered-id"],
                           g[b"entries-read"], g[b"lag"], sorted(consumers), pel))
        return (t, keep, c.cmd("XRANGE", key, "-", "+"), groups)
    return (t,)


def describe(a, b):
    if a == b:
        return ""
    if len(a) != len(b):
        return "different shapes"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            sx, sy = repr(x), repr(y)
            return "part %d differs: redis %s ... basalt %s" % (i, sx[:300], sy[:300])
    return "differs"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--redis", type=int, default=16593)
    ap.add_argument("--basalt", type=int, default=16581)
    ap.add_argument("--rounds", type=int, default=20, help="values per type and variant")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-sanitize", action="store_true",
                    help="leave redis's sanitize-dump-payload as it is (default: set it to"
                         " yes, so Basalt's payloads pass redis's deep validation)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    r, b = Conn(args.redis), Conn(args.basalt)
    for c in (r, b):
        c.cmd("FLUSHALL")
    if not args.no_sanitize:
        r.cmd("CONFIG", "SET", "sanitize-dump-payload", "yes")
    # (type/encoding/variant, direction) -> [ok, failed]
    counts = defaultdict(lambda: [0, 0])
    failures = []
    n = 0
    for kind, variants in VARIANTS.items():
        for variant in variants:
            for _ in range(args.rounds):
                n += 1
                key = "k%d" % n
                build(rng, r, key, kind, variant)
                enc = r.cmd("OBJECT", "ENCODING", key)
                label = "%s/%s/%s" % (kind, enc.decode() if enc else "?", variant)
                want = snapshot(r, key)
                pttl = r.cmd("PTTL", key)
                ttl = pttl + 60_000 if pttl > 0 else 0  # a margin, compared below
                # redis -> basalt
                payload = r.cmd("DUMP", key)
                got = b.cmd("RESTORE", key, ttl, payload, "REPLACE")
                why = ""
                if got != b"OK":
                    why = "RESTORE said %r" % (got,)
                else:
                    why = describe(want, snapshot(b, key))
                    if not why and ttl and not 0 < b.cmd("PTTL", key) <= ttl:
                        why = "TTL not carried"
                counts[(label, "redis->basalt")][0 if not why else 1] += 1
                if why:
                    failures.append((label, "redis->basalt", key, why))
                # basalt -> redis
                payload = b.cmd("DUMP", key)
                dst = key + ":back"
                why = ""
                if not isinstance(payload, bytes):
                    why = "DUMP said %r" % (payload,)
                else:
                    got = r.cmd("RESTORE", dst, ttl, payload, "REPLACE")
                    if got != b"OK":
                        why = "RESTORE said %r" % (got,)
                    else:
                        why = describe(want, snapshot(r, dst))
                        if not why and ttl and not 0 < r.cmd("PTTL", dst) <= ttl:
                            why = "TTL not carried"
                counts[(label, "basalt->redis")][0 if not why else 1] += 1
                if why:
                    failures.append((label, "basalt->redis", key, why))
                r.pipe([["DEL", key, dst]])
                b.cmd("DEL", key)
    width = max(len(l) for l, _ in counts)
    print("%-*s  %-14s %6s %6s" % (width, "type/encoding/variant", "direction", "ok", "failed"))
    total_ok = total_bad = 0
    for (label, d), (ok, bad) in sorted(counts.items()):
        total_ok += ok
        total_bad += bad
        print("%-*s  %-14s %6d %6d" % (width, label, d, ok, bad))
    print("total: %d ok, %d failed (%d values, seed %d)" % (total_ok, total_bad, n, args.seed))
    for f in failures[: (len(failures) if args.verbose else 10)]:
        print("FAIL %s %s key %s: %s" % f)
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
