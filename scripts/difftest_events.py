#!/usr/bin/env python3
"""Differential tester, part 2: Basalt vs redis-server for what difftest.py
does not cover -- keyspace notifications, MULTI/EXEC/WATCH, Pub/Sub reply
formats, expiry edge cases and blocking commands.

Usage: python3 scripts/difftest_events.py [--redis PORT] [--basalt PORT]
           [--areas notify,multi,pubsub,expire,block] [--seeds N] [--start S]
           [--len L] [--max-examples K] [--out FILE]

Both servers must be running, fresh, e.g.
  redis-server --port 16379 --bind 127.0.0.1 --save '' --appendonly no --dir "$(mktemp -d)" &
  target/release/basalt --port 16380 --dir "$(mktemp -d)" --http-port 0 &

Areas (each runs --seeds random sequences, plus a few scripted checks):
  notify  CONFIG SET notify-keyspace-events <flags>; a second connection
          PSUBSCRIBEs __key*__:* and SUBSCRIBEs a marker channel; after every
          command the main connection PUBLISHes a marker and the subscriber
          reads up to it, so the (channel, message) list per command is exact.
          Expired events are checked separately (short PX, wait, GET).
  multi   random MULTI/EXEC/DISCARD/WATCH/UNWATCH sequences with queue-time
          and run-time errors, nested MULTI, WATCH inside MULTI, and a second
          connection touching (or not really touching) watched keys.
  pubsub  two subscriber connections (RESP2/RESP3, HELLO/RESET switch them)
          and a publisher; every subscriber action is followed by
          PING <sentinel> and all frames up to the sentinel are compared.
  expire  EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT NX/XX/GT/LT, overflow values,
          SET EX/PX/EXAT/PXAT, GETEX, PERSIST, TTL family; time values
          compared loosely (TTL>0, EXPIRETIME within 2 s).
  block   BLPOP/BRPOP/BLMOVE/BRPOPLPUSH/BLMPOP/BZPOPMIN/BZPOPMAX/BZMPOP with
          short, invalid and blocking timeouts; a command that is still
          blocked after 0.4 s is served by a push from another connection.
          Plus scripted multi-client serving scenarios.
Differences are shrunk (drop one step at a time while the same kind of
difference stays at the last step) and printed; all go to --out as JSON.
"""
import argparse
import json
import os
import random
import re
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import difftest as dt  # noqa: E402
from difftest import Conn, fmt, canon, normalize, cmdstr, kind_of, KEYS, MEMBERS  # noqa: E402

SIDES = ("redis", "basalt")


def enc(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode("latin-1")
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def send(c, args):
    c.s.sendall(enc(args))


class Buf:
    """Minimal buffered reader over a socket (readline/read like a file) that,
    unlike socket.makefile, survives a timed-out wait."""

    def __init__(self, sock):
        self.s = sock
        self.buf = bytearray()

    def _fill(self):
        data = self.s.recv(65536)
        if not data:
            raise ConnectionError("connection closed")
        self.buf += data

    def readline(self):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i + 1])
                del self.buf[:i + 1]
                return line
            self._fill()

    def read(self, n):
        while len(self.buf) < n:
            self._fill()
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def close(self):
        pass


class XConn(Conn):
    def connect(self):
        self.s = socket.create_connection((self.host, self.port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = Buf(self.s)


def read_to(c, timeout):
    """Read one frame, or return None if none starts within timeout."""
    if not c.f.buf:
        ready, _, _ = select.select([c.s], [], [], timeout)
        if not ready:
            return None
    return c.read()


def b2s(x):
    return x.decode("latin-1") if isinstance(x, bytes) else x


def flat(r):
    """Parsed frame -> plain python (type kept for scalars)."""
    t, v = r
    if isinstance(v, list):
        if t in ("%", "|"):
            return [t, [[flat(a), flat(b)] for a, b in v]]
        return [t, [flat(x) for x in v]]
    return [t, b2s(v)]


def is_err(r):
    return r is not None and r[0] == "-"


class Divergence(Exception):
    pass


# ====================================================================== generic driver

class Area:
    name = "?"

    def __init__(self, rport, bport):
        self.ports = {"redis": rport, "basalt": bport}
        self.ncmds = 0

    def conn(self, side, proto=2):
        c = XConn(self.ports[side])
        if proto == 3:
            c.call("HELLO", "3")
        return c

    # subclasses: gen(r) -> seq ; run(seq) -> list of (i, kind, detail) ; stop at first
    # state-changing divergence
    def reproduces(self, seq, kind):
        try:
            divs = self.run(seq, shrinking=True)
        except Exception:
            return False
        return any(d[0] == len(seq[1]) - 1 and d[1] == kind for d in divs)

    def shrink(self, seq, kind):
        head, steps = seq
        changed = True
        while changed:
            changed = False
            i = 0
            while i < len(steps) - 1:
                cand = (head, steps[:i] + steps[i + 1:])
                if self.reproduces(cand, kind):
                    steps = cand[1]
                    changed = True
                else:
                    i += 1
        return (head, steps)


def drive(area, seeds, start, length, max_examples, kinds, log):
    nseq = ndiv = 0
    t0 = time.time()
    for seed in range(start, start + seeds):
        r = random.Random(seed * 7919 + sum(area.name.encode()))
        seq = area.gen(r, length)
        nseq += 1
        try:
            divs = area.run(seq)
        except Exception as e:
            divs = [(len(seq[1]) - 1, (area.name, "EXC", type(e).__name__), repr(e))]
        if not divs:
            continue
        ndiv += 1
        for (i, kind, detail) in divs:
            kinds.setdefault(kind, [])
            if len(kinds[kind]) >= max_examples:
                continue
            full = (seq[0], seq[1][:i + 1])
            small = area.shrink(full, kind) if kind[1] != "EXC" else full
            try:
                trace = area.trace(small)
            except Exception as e:
                trace = ["trace failed: %r" % e]
            kinds[kind].append({"seed": seed, "head": small[0], "trace": trace})
            log("=== NEW %s  seed=%d head=%s" % (" | ".join(map(str, kind)), seed, small[0]))
            for line in trace:
                log("   " + line)
    dtm = time.time() - t0
    log("[%s] ran %d sequences (%d diverged), %d commands/actions per server, %.1fs" %
        (area.name, nseq, ndiv, area.ncmds, dtm))
    return nseq


# ====================================================================== 1. notifications

FLAGSETS = ["KEA", "KEA", "KEA", "Elg$", "Kx", "Ez", "Eh", "Ks", "KEn", "Em", "AKE", "Kg", "E$lshzxe",
            "KEAm", "KEAn", "El", "Kt"]
MARK = "__mark__"
WITH_SORT = False
dt.UNORDERED.add("SPOP")   # SPOP key count: a set reply


def gen_extra(r):
    k = dt.key
    c = r.choice(["RENAME", "RENAMENX", "COPY", "MOVE", "EXPIRE", "PEXPIRE", "EXPIREAT", "PERSIST", "DEL",
                  "UNLINK", "LMOVE", "BLMOVE", "ZINTERSTORE", "SINTERSTORE", "SETRANGE", "INCRBYFLOAT",
                  "GETDEL", "GETEX", "SETK", "HINCRBYFLOAT", "LTRIM", "LSET", "SPOP", "ZPOPMIN", "ZMPOP",
                  "LPOPC", "BLPOP", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZMPOP", "SELECT", "SWAP",
                  "FLUSHDB", "SETEX", "INCR", "APPEND", "SMOVE", "ZREMRANGEBYSCORE", "HDEL", "LINSERT",
                  "SORTSTORE", "SUNIONSTORE", "ZUNIONSTORE", "ZRANGESTORE", "LPUSH", "HSET", "ZADD",
                  "SADD", "SET"])
    if c == "RENAME" or c == "RENAMENX":
        return [c, k(r), k(r)]
    if c == "COPY":
        a = ["COPY", k(r), k(r)]
        if r.random() < 0.5:
            a.append("REPLACE")
        if r.random() < 0.3:
            a += ["DB", r.choice(["0", "1"])]
        return a
    if c == "MOVE":
        return ["MOVE", k(r), r.choice(["1", "1", "0"])]
    if c in ("EXPIRE", "PEXPIRE"):
        a = [c, k(r), r.choice(["0", "-5", "100000", "200000"])]
        if r.random() < 0.3:
            a.append(r.choice(["NX", "XX", "GT", "LT"]))
        return a
    if c == "EXPIREAT":
        return [c, k(r), r.choice(["1", "99999999999", "0"])]
    if c in ("PERSIST", "GETDEL"):
        return [c, k(r)]
    if c in ("DEL", "UNLINK"):
        return [c] + dt.keys(r, 1, 3)
    if c == "LMOVE":
        return [c, k(r), k(r), r.choice(["LEFT", "RIGHT"]), r.choice(["LEFT", "RIGHT"])]
    if c == "BLMOVE":
        return [c, k(r), k(r), r.choice(["LEFT", "RIGHT"]), r.choice(["LEFT", "RIGHT"]), "0.01"]
    if c == "BRPOPLPUSH":
        return [c, k(r), k(r), "0.01"]
    if c == "BLPOP":
        return [r.choice(["BLPOP", "BRPOP"])] + dt.keys(r, 1, 2) + ["0.01"]
    if c == "BZPOPMIN":
        return [r.choice(["BZPOPMIN", "BZPOPMAX"])] + dt.keys(r, 1, 2) + ["0.01"]
    if c == "BLMPOP":
        ks = dt.keys(r, 1, 2)
        return ["BLMPOP", "0.01", str(len(ks))] + ks + [r.choice(["LEFT", "RIGHT"]), "COUNT", r.choice(["1", "3"])]
    if c == "BZMPOP":
        ks = dt.keys(r, 1, 2)
        return ["BZMPOP", "0.01", str(len(ks))] + ks + [r.choice(["MIN", "MAX"]), "COUNT", r.choice(["1", "3"])]
    if c == "ZINTERSTORE" or c == "ZUNIONSTORE":
        ks = dt.keys(r, 1, 2)
        return [c, k(r), str(len(ks))] + ks
    if c in ("SINTERSTORE", "SUNIONSTORE"):
        return [c, k(r)] + dt.keys(r, 1, 2)
    if c == "ZRANGESTORE":
        return [c, k(r), k(r), "0", r.choice(["-1", "0", "5"])]
    if c == "SETRANGE":
        return [c, k(r), r.choice(["0", "2"]), r.choice(["", "xy"])]
    if c == "INCRBYFLOAT":
        return [c, k(r), r.choice(["1.5", "0", "abc"])]
    if c == "GETEX":
        return [c, k(r)] + r.choice([[], ["PERSIST"], ["EX", "100000"], ["PX", "0"], ["EXAT", "1"]])
    if c == "SETK":
        return ["SET", k(r), r.choice(["v", "1"])] + r.choice([["KEEPTTL"], ["GET"], ["KEEPTTL", "GET"], ["NX"],
                                                                ["XX", "GET"], ["EX", "100000", "GET"]])
    if c == "HINCRBYFLOAT":
        return [c, k(r), r.choice(["a", "b"]), r.choice(["1.5", "0", "abc"])]
    if c == "LTRIM":
        return [c, k(r), r.choice(["0", "1", "5"]), r.choice(["-1", "0", "-5"])]
    if c == "LSET":
        return [c, k(r), r.choice(["0", "-1", "5"]), "z"]
    if c == "SPOP":
        return [c, k(r)] + r.choice([[], ["100"], ["0"]])   # bare SPOP: runner checks SCARD<=1
    if c == "ZPOPMIN":
        return [r.choice(["ZPOPMIN", "ZPOPMAX"]), k(r)] + r.choice([[], ["2"], ["0"]])
    if c == "ZMPOP":
        ks = dt.keys(r, 1, 2)
        return ["ZMPOP", str(len(ks))] + ks + [r.choice(["MIN", "MAX"])] + r.choice([[], ["COUNT", "5"]])
    if c == "LPOPC":
        return [r.choice(["LPOP", "RPOP"]), k(r), r.choice(["1", "2", "0", "10"])]
    if c == "SELECT":
        return ["SELECT", r.choice(["0", "0", "1"])]
    if c == "SWAP":
        return ["SWAPDB", "0", "1"]
    if c == "FLUSHDB":
        return [r.choice(["FLUSHDB", "FLUSHDB", "FLUSHALL"])] if r.random() < 0.3 else ["DBSIZE"]
    if c == "SETEX":
        return [r.choice(["SETEX", "PSETEX"]), k(r), r.choice(["100000", "0"]), "v"]
    if c == "INCR":
        return [r.choice(["INCR", "DECR"]), k(r)]
    if c == "APPEND":
        return [c, k(r), r.choice(["", "ab"])]
    if c == "SMOVE":
        return [c, k(r), k(r), r.choice(["a", "b"])]
    if c == "ZREMRANGEBYSCORE":
        return [c, k(r), "-inf", r.choice(["1", "+inf", "(0"])]
    if c == "HDEL":
        return [c, k(r)] + r.sample(["a", "b", "c"], r.randint(1, 3))
    if c == "LINSERT":
        return [c, k(r), "BEFORE", r.choice(["a", "b"]), "n"]
    if c == "SORTSTORE":   # SORT is not implemented by Basalt: only with --sort
        return ["SORT", k(r), "ALPHA", "STORE", k(r)] if WITH_SORT and r.random() < 0.3 else ["TYPE", k(r)]
    if c == "LPUSH":
        return [r.choice(["LPUSH", "RPUSH", "LPUSHX"]), k(r)] + r.sample(["a", "b", "c"], r.randint(1, 3))
    if c == "HSET":
        return [r.choice(["HSET", "HSETNX"]), k(r), r.choice(["a", "b"]), "1"]
    if c == "ZADD":
        return ["ZADD", k(r)] + r.choice([[], ["INCR"], ["NX"], ["XX"], ["GT"]]) + [r.choice(["1", "2"]), r.choice(["a", "b"])]
    if c == "SADD":
        return ["SADD", k(r)] + r.sample(["a", "b", "c"], r.randint(1, 2))
    return ["SET", k(r), r.choice(["a", "1"])]


def ev_name(ch, msg):
    if ch.startswith("__keyspace@"):
        return "ks%s:%s" % (ch[11:ch.index("__:")], msg)
    if ch.startswith("__keyevent@"):
        return "ke%s:%s" % (ch[11:ch.index("__:")], ch[ch.index("__:") + 3:])
    return "?%s:%s" % (ch, msg)


class NotifyArea(Area):
    name = "notify"

    def gen(self, r, length):
        flags = r.choice(FLAGSETS)
        proto = r.choice([2, 2, 3])
        subproto = r.choice([2, 2, 3])
        fams = list(dt.FAMILIES)
        steps = []
        for _ in range(r.randint(5, length)):
            if r.random() < 0.45:
                steps.append(gen_extra(r))
            else:
                steps.append(dt.gen_cmd(r, r.sample(fams, 2)))
            if r.random() < 0.06:
                steps.append(["MULTI"])
            elif r.random() < 0.06:
                steps.append([r.choice(["EXEC", "EXEC", "DISCARD"])])
        return ((flags, proto, subproto), steps)

    def setup(self, head):
        flags, proto, subproto = head
        self.m, self.s = {}, {}
        for side in SIDES:
            m = self.conn(side)
            assert m.call("CONFIG", "SET", "notify-keyspace-events", "") == ("+", b"OK")
            m.call("FLUSHALL")
            rep = m.call("CONFIG", "SET", "notify-keyspace-events", flags)
            assert rep == ("+", b"OK"), (side, rep)
            if proto == 3:
                m.call("HELLO", "3")
            s = self.conn(side, subproto)
            s.call("PSUBSCRIBE", "__key*__:*")
            s.call("SUBSCRIBE", MARK)
            self.m[side], self.s[side] = m, s
        self.n = 0
        self.in_multi, self.queued = False, []

    def teardown(self):
        for d in (self.m, self.s):
            for c in d.values():
                c.close()

    def events(self, side):
        """Publish a marker on the main connection and collect the subscriber's
        frames up to it."""
        self.n += 1
        tag = str(self.n)
        m, s = self.m[side], self.s[side]
        m.call("PUBLISH", MARK, tag)
        out = []
        while True:
            f = read_to(s, 5)
            if f is None:
                out.append(("TIMEOUT",))
                return out
            if f[0] in ("*", ">") and isinstance(f[1], list):
                v = [b2s(x[1]) for x in f[1]]
                if v[0] == "message" and v[1] == MARK and v[2] == tag:
                    return out
                if v[0] == "pmessage":
                    out.append((v[2], v[3]))
                    continue
            out.append(("FRAME", fmt(f)))

    def step(self, cmd):
        c = cmd[0].upper()
        if c == "SPOP" and len(cmd) == 2:
            # bare SPOP picks a random member: only when the set has <= 1
            if self.in_multi:
                cmd = cmd + ["100"]
            else:
                t = self.m["redis"].call("TYPE", cmd[1])
                if t[1] == b"set" and self.m["redis"].call("SCARD", cmd[1])[1] not in (b"0", b"1"):
                    cmd = cmd + ["100"]
        self.ncmds += 1
        res = {}
        was = self.in_multi
        for side in SIDES:
            rep = self.m[side].call(*cmd)
            if side == "redis":
                if c == "MULTI" and rep == ("+", b"OK"):
                    self.in_multi, self.queued = True, []
                elif c in ("EXEC", "DISCARD") and was:
                    self.in_multi = False
                elif was and rep == ("+", b"QUEUED"):
                    self.queued.append(cmd)
            # inside MULTI the marker PUBLISH would be queued too: events of queued
            # commands are collected after EXEC
            res[side] = (rep, [] if self.in_multi else self.events(side))
        return cmd, res

    def norm(self, cmd, rep):
        if cmd[0].upper() == "EXEC":
            return MultiArea.norm(cmd, rep, self.queued)
        return normalize(cmd, rep)

    def run(self, seq, shrinking=False, trace=None):
        head, steps = seq
        self.setup(head)
        divs = []
        try:
            for i, cmd in enumerate(steps):
                cmd, res = self.step(cmd)
                (rr, re_), (br, be) = res["redis"], res["basalt"]
                if trace is not None:
                    trace.append((cmd, rr, re_, br, be))
                if self.norm(cmd, rr) != self.norm(cmd, br):
                    divs.append((i, ("notify-reply",) + kind_of(cmd, rr, br), (fmt(rr), fmt(br))))
                    if not dt.benign(cmd, rr, br):
                        return divs
                if cmd[0].upper() == "EXEC":
                    self.queued = []
                if re_ != be:
                    kr = tuple(ev_name(*e) if len(e) == 2 else e[0] for e in re_)
                    kb = tuple(ev_name(*e) if len(e) == 2 else e[0] for e in be)
                    divs.append((i, ("notify-events", cmd[0].upper(), kr, kb), (re_, be)))
            return divs
        finally:
            self.teardown()

    def trace(self, seq):
        tr = []
        self.run(seq, trace=tr)
        out = []
        for cmd, rr, re_, br, be in tr:
            same = rr == br and re_ == be
            out.append("%s %s -> %s %s" % (" " if same else "!", cmdstr(cmd), fmt(rr),
                                           " ".join("%s/%s" % e for e in re_)))
            if not same:
                out.append("     basalt: %s %s" % (fmt(br), " ".join("/".join(e) for e in be)))
        return out

    def scripted(self, log):
        """Flag canonicalisation and expired events (timing-dependent: done here)."""
        nd = 0
        m = {s: self.conn(s) for s in SIDES}
        for fl in ["KEA", "AKE", "Elg$", "Kx", "Ez", "Eh", "", "A", "KA", "EKsmn", "Q", "KEAQ", "gggK",
                   "KEd", "Et", "$lshzxegtdKE", "KEAmn", "kea", "e", "K E"]:
            reps = {s: m[s].call("CONFIG", "SET", "notify-keyspace-events", fl) for s in SIDES}
            gets = {s: m[s].call("CONFIG", "GET", "notify-keyspace-events") for s in SIDES}
            self.ncmds += 2
            if reps["redis"] != reps["basalt"] or gets["redis"] != gets["basalt"]:
                nd += 1
                log("! CONFIG SET notify-keyspace-events %r: redis %s %s / basalt %s %s" % (
                    fl, fmt(reps["redis"]), fmt(gets["redis"]), fmt(reps["basalt"]), fmt(gets["basalt"])))
        for c in m.values():
            c.close()
        # expired events: PX 100 then wait, then GET (lazy) and collect
        cases = [
            ("KEA", [["SET", "e1", "v", "PX", "100"]], [["GET", "e1"]]),
            ("KEAm", [["SET", "e1", "v", "PX", "100"]], [["GET", "e1"]]),
            ("Ex", [["HSET", "e2", "f", "v"], ["PEXPIRE", "e2", "100"]], [["EXISTS", "e2"]]),
            ("KEA", [["RPUSH", "e3", "a"], ["PEXPIRE", "e3", "100"]], [["LPUSH", "e3", "b"]]),
            ("KEA", [["SET", "e4", "v", "PX", "100"]], [["SET", "e4", "w"]]),
            ("KEA", [["SET", "e5", "v", "PX", "100"], ["SET", "e6", "v", "PX", "100"]], [["DBSIZE"]]),
        ]
        for flags, pre, post in cases:
            res = {}
            self.setup((flags, 2, 2))
            try:
                for side in SIDES:
                    out = []
                    for c in pre:
                        out.append((fmt(self.m[side].call(*c)), self.events(side)))
                    res[side] = out
                time.sleep(0.35)   # > PX, and active expiry (10 Hz) has likely run on both
                for side in SIDES:
                    for c in post:
                        res[side].append((fmt(self.m[side].call(*c)), self.events(side)))
                self.ncmds += len(pre) + len(post)
            finally:
                self.teardown()
            if res["redis"] != res["basalt"]:
                nd += 1
                log("! expired case flags=%s %s then %s\n     redis : %s\n     basalt: %s" %
                    (flags, pre, post, res["redis"], res["basalt"]))
        log("[notify scripted] %d differences" % nd)


# ====================================================================== 2. MULTI/EXEC

WATCH_TOUCH = [
    ["SET", "k0", "x"], ["SET", "k0", "x"], ["DEL", "k0"], ["DEL", "nokey"], ["EXPIRE", "k0", "100000"],
    ["EXPIRE", "nokey", "100"], ["PERSIST", "k0"], ["SADD", "k1", "a"], ["SADD", "k1", "a"],
    ["SREM", "k1", "zz"], ["LPUSH", "k2", "a"], ["LPOP", "k2"], ["HSET", "k3", "a", "1"], ["HSET", "k3", "a", "1"],
    ["HDEL", "k3", "nope"], ["ZADD", "k4", "1", "a"], ["ZADD", "k4", "1", "a"], ["INCR", "k5"],
    ["FLUSHALL"], ["FLUSHDB"], ["RENAME", "k0", "k1"], ["GET", "k0"], ["APPEND", "k0", ""],
    ["SETRANGE", "k0", "0", ""], ["SELECT", "1"], ["SWAPDB", "0", "1"], ["MOVE", "k0", "1"],
    ["COPY", "k1", "k0", "REPLACE"], ["LTRIM", "k2", "0", "-1"], ["ZREM", "k4", "zz"], ["SPOP", "k1", "0"],
    ["GETEX", "k0"], ["GETEX", "k0", "PERSIST"], ["EXPIRE", "k0", "100000", "NX"], ["SET", "k0", "y", "NX"],
]


def gen_multi_cmd(r):
    x = r.random()
    if x < 0.08:
        return [r.choice(["NOSUCHCMD", "FOO"]), "a"]
    if x < 0.13:
        return r.choice([["PING"], ["ECHO", "hi"], ["SELECT", "1"], ["SELECT", "0"], ["SELECT", "99"],
                         ["DBSIZE"], ["GET"], ["SET", "k0"], ["INCR", "k0", "k1"], ["LPUSH", "k0"]])
    if x < 0.18:
        return r.choice([["BLPOP", "k2", "0"], ["BZPOPMIN", "k4", "0"], ["BLMOVE", "k2", "k3", "LEFT", "LEFT", "0"],
                         ["BLMPOP", "0", "1", "k2", "LEFT"], ["BRPOP", "k2", "abc"]])   # only inside MULTI
    return dt.gen_cmd(r, r.sample(list(dt.FAMILIES), 2))


BLOCKING = {"BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP"}


def is_blocking(c):
    """Whether `c` is a blocking command (not BITCOUNT and the like, which
    also start with B)."""
    return c[0].upper() in BLOCKING and len(c) > 1


class MultiArea(Area):
    name = "multi"
    exec_arity = False

    def gen(self, r, length):
        proto = r.choice([2, 3])
        steps = []
        in_multi = False
        for _ in range(r.randint(4, length)):
            x = r.random()
            if x < 0.12:
                steps.append(("c", ["MULTI"]))
                in_multi = True
            elif x < 0.22:
                steps.append(("c", [r.choice(["EXEC", "EXEC", "EXEC", "DISCARD"])] +
                              (["x"] if self.exec_arity and r.random() < 0.05 else [])))
                in_multi = False
            elif x < 0.30:
                steps.append(("c", ["WATCH"] + dt.keys(r, 0 if r.random() < 0.05 else 1, 2)))
            elif x < 0.33:
                steps.append(("c", ["UNWATCH"]))
            elif x < 0.45:
                steps.append(("o", r.choice(WATCH_TOUCH) if r.random() < 0.7 else dt.gen_cmd(r, list(dt.FAMILIES))))
            else:
                c = gen_multi_cmd(r)
                if is_blocking(c) and not in_multi:
                    # Would wait outside MULTI: read its key instead.
                    c = ["TYPE", c[1]]
                steps.append(("c", c))
        if r.random() < 0.7:
            steps.append(("c", ["EXEC"]))
        return (proto, steps)

    def run(self, seq, shrinking=False, trace=None):
        proto, steps = seq
        cs, os_ = {}, {}
        for side in SIDES:
            cs[side] = self.conn(side, proto)
            cs[side].call("FLUSHALL")
            os_[side] = self.conn(side, proto)
        divs = []
        in_multi = False
        queued = []
        try:
            for i, (who, cmd) in enumerate(steps):
                c = cmd[0].upper()
                if c.startswith("B") and c != "BITCOUNT" and not in_multi:
                    cmd = ["TYPE", cmd[1]]     # would block outside MULTI
                conns = cs if who == "c" else os_
                self.ncmds += 1
                rr = conns["redis"].call(*cmd)
                br = conns["basalt"].call(*cmd)
                if who == "c":
                    if c == "MULTI" and rr == ("+", b"OK"):
                        in_multi, queued = True, []
                    elif c in ("EXEC", "DISCARD") and in_multi and not (len(cmd) > 1):
                        in_multi = False
                    elif c in ("EXEC", "DISCARD") and len(cmd) > 1:
                        if rr[0] == "-" and rr[1].startswith(b"EXECABORT"):
                            in_multi = False
                    elif in_multi and rr == ("+", b"QUEUED"):
                        queued.append(cmd)
                nr, nb = self.norm(cmd, rr, queued), self.norm(cmd, br, queued)
                if trace is not None:
                    trace.append((who, cmd, rr, br, nr == nb))
                if nr != nb:
                    divs.append((i, ("multi",) + kind_of(cmd, rr, br), (fmt(rr), fmt(br))))
                    return divs
                if c == "EXEC" and not (len(cmd) > 1):
                    queued = []
            # final state
            for k in KEYS:
                for cmd in (["TYPE", k], ["TTL", k]):
                    rr, br = cs["redis"].call(*cmd), cs["basalt"].call(*cmd)
                    if normalize(cmd, rr) != normalize(cmd, br) and not in_multi:
                        divs.append((len(steps) - 1, ("multi-state", cmd[0]), (fmt(rr), fmt(br))))
                        return divs
            return divs
        finally:
            for d in (cs, os_):
                for c_ in d.values():
                    c_.close()

    @staticmethod
    def norm(cmd, rep, queued):
        if cmd[0].upper() == "EXEC" and rep[0] in ("*",) and isinstance(rep[1], list) and len(rep[1]) == len(queued):
            return ("exec", tuple(normalize(q, x) for q, x in zip(queued, rep[1])))
        return normalize(cmd, rep)

    def trace(self, seq):
        tr = []
        self.run(seq, trace=tr)
        out = ["proto=%d" % seq[0]]
        for who, cmd, rr, br, same in tr:
            out.append("%s [%s] %s -> %s" % (" " if same else "!", who, cmdstr(cmd), fmt(rr)))
            if not same:
                out.append("     basalt: %s" % fmt(br))
        return out


# ====================================================================== 3. Pub/Sub

CHANS = ["c1", "c2", "c3", "x.y"]
PATS = ["c*", "x.*", "*", "c[12]", "nomatch*", "c?"]


class PubSubArea(Area):
    name = "pubsub"

    def gen(self, r, length):
        steps = []
        for _ in range(r.randint(5, length)):
            who = r.choice(["s1", "s2", "s1", "s2", "p"])
            if who == "p":
                x = r.random()
                if x < 0.5:
                    a = ["PUBLISH", r.choice(CHANS + ["zz"]), r.choice(["m", "", "hello world"])]
                elif x < 0.65:
                    a = ["PUBSUB", "CHANNELS"] + ([r.choice(PATS)] if r.random() < 0.5 else [])
                elif x < 0.8:
                    a = ["PUBSUB", "NUMSUB"] + r.sample(CHANS + ["zz"], r.randint(0, 3))
                elif x < 0.88:
                    a = ["PUBSUB", "NUMPAT"]
                elif x < 0.92:
                    a = r.choice([["PUBSUB", "BOGUS"], ["PUBSUB"], ["PUBSUB", "NUMPAT", "x"], ["PUBLISH", "c1"],
                                  ["PUBSUB", "channels", "a", "b"]])
                elif self.shard:
                    a = r.choice([["SPUBLISH", "c1", "m"], ["PUBSUB", "SHARDCHANNELS"], ["PUBSUB", "SHARDNUMSUB", "c1"]])
                else:
                    a = ["PUBSUB", "NUMSUB"]
            else:
                x = r.random()
                if x < 0.25:
                    a = ["SUBSCRIBE"] + [r.choice(CHANS) for _ in range(r.randint(0 if r.random() < 0.05 else 1, 3))]
                elif x < 0.42:
                    a = ["UNSUBSCRIBE"] + [r.choice(CHANS + ["zz"]) for _ in range(r.randint(0, 2))]
                elif x < 0.57:
                    a = ["PSUBSCRIBE"] + [r.choice(PATS) for _ in range(r.randint(0 if r.random() < 0.05 else 1, 2))]
                elif x < 0.7:
                    a = ["PUNSUBSCRIBE"] + [r.choice(PATS + ["zz"]) for _ in range(r.randint(0, 2))]
                elif x < 0.75:
                    a = r.choice([["PING"], ["PING", "hi"], ["PING", "a", "b"]])
                elif x < 0.82:
                    a = r.choice([["GET", "c1"], ["SET", "c1", "v"], ["ECHO", "e"], ["PUBLISH", "c1", "self"],
                                  ["QUIT_NOT"], ["CLIENT", "SETNAME", "x"], ["PUBSUB", "NUMPAT"]])
                    if a == ["QUIT_NOT"]:
                        a = ["DBSIZE"]
                elif x < 0.88:
                    a = ["HELLO", r.choice(["2", "3"])]
                elif x < 0.93:
                    a = ["RESET"]
                elif self.shard:
                    a = r.choice([["SSUBSCRIBE", "c1"], ["SUNSUBSCRIBE"], ["SUNSUBSCRIBE", "c1"]])
                else:
                    a = ["PING", "x"]
            steps.append((who, a))
        head = (r.choice([2, 3]), r.choice([2, 3]))
        return (head, steps)

    strict = False
    shard = False

    @staticmethod
    def kindof(f):
        if f[0] in ("*", ">") and isinstance(f[1], list) and f[1] and f[1][0][0] == "$":
            return b2s(f[1][0][1])
        return None

    def loosen(self, frames, loose_unsub):
        """Redis delivers a message matching several patterns in dict order, and
        UNSUBSCRIBE without arguments walks a dict: sort such runs (keeping the
        counts in order) unless --strict-order."""
        if self.strict:
            return [f if isinstance(f, str) else fmt(f) for f in frames]
        out, i = [], 0
        while i < len(frames):
            f = frames[i]
            k = None if isinstance(f, str) else self.kindof(f)
            if k in ("pmessage",) or (loose_unsub and k in ("unsubscribe", "punsubscribe")):
                j = i
                while j < len(frames) and not isinstance(frames[j], str) and self.kindof(frames[j]) == k \
                        and frames[j][0] == f[0]:
                    j += 1
                run = frames[i:j]
                if k == "pmessage":
                    out.append("sorted" + repr(sorted(fmt(x) for x in run)))
                else:
                    out.append("%s%s %s names=%s counts=%s" % (f[0], len(run), k, sorted(fmt(x[1][1]) for x in run),
                                                              [fmt(x[1][2]) for x in run]))
                i = j
            else:
                out.append(f if isinstance(f, str) else fmt(f))
                i += 1
        return out

    def sync(self, c, tag, loose_unsub=False, limit=50):
        """PING <tag> and read all frames up to its reply."""
        send(c, ["PING", tag])
        out = []
        while len(out) < limit:
            f = read_to(c, 5)
            if f is None:
                out.append("TIMEOUT")
                return out
            done = (f[0] == "$" and f[1] == tag.encode()) or \
                   (f[0] == "*" and isinstance(f[1], list) and len(f[1]) == 2 and f[1][1] == ("$", tag.encode()))
            out.append(("SYNC" + ("*" if f[0] == "*" else "")) if done else f)
            if done:
                break
        return self.loosen(out, loose_unsub)

    def norm_reply(self, a, f):
        c = a[0].upper()
        if c == "PUBSUB" and len(a) > 1 and a[1].upper() == "CHANNELS" and f[0] == "*" and isinstance(f[1], list):
            return "*unordered" + repr(sorted(fmt(x) for x in f[1]))
        if c == "HELLO" and f[0] in ("%", "*") and isinstance(f[1], list):
            if f[0] == "%":
                return "HELLO-map keys=%s proto=%s" % ([b2s(k[1]) for k, v in f[1]],
                                                        [fmt(v) for k, v in f[1] if k[1] == b"proto"])
            return "HELLO-arr keys=%s" % [b2s(f[1][i][1]) for i in range(0, len(f[1]), 2)]
        return fmt(f)

    def run(self, seq, shrinking=False, trace=None):
        (p1, p2), steps = seq
        C = {}
        for side in SIDES:
            C[side] = {"s1": self.conn(side, p1), "s2": self.conn(side, p2), "p": self.conn(side)}
        C["redis"]["p"].call("FLUSHALL")
        C["basalt"]["p"].call("FLUSHALL")
        divs = []
        n = 0
        try:
            for i, (who, a) in enumerate(steps):
                self.ncmds += 1
                res = {}
                for side in SIDES:
                    cc = C[side]
                    out = []
                    if who == "p":
                        out.append(self.norm_reply(a, cc["p"].call(*a)))
                    else:
                        send(cc[who], a)
                        # the reply frames are read by the sync below, except for HELLO
                        # whose map we want normalised: read the first frame if it is one
                        if a[0] == "HELLO":
                            f = read_to(cc[who], 5)
                            out.append("TIMEOUT" if f is None else self.norm_reply(a, f))
                    # the acting subscriber first: its command has then run before the
                    # other subscriber's PING (e.g. PUBLISH from a RESP3 subscriber)
                    order = ("s2", "s1") if who == "s2" else ("s1", "s2")
                    got = {}
                    for j, s in enumerate(order):
                        lu = who == s and a[0].upper() in ("UNSUBSCRIBE", "PUNSUBSCRIBE") and len(a) == 1
                        got[s] = self.sync(cc[s], "sync-%d" % (n + j), lu)
                    out += [("s1", got["s1"]), ("s2", got["s2"])]
                    res[side] = out
                n += 2
                same = res["redis"] == res["basalt"]
                if trace is not None:
                    trace.append((who, a, res["redis"], res["basalt"], same))
                if not same:
                    divs.append((i, ("pubsub", who[0], a[0].upper() + (" " + a[1].upper() if a[0].upper() == "PUBSUB" and len(a) > 1 else "")),
                                 (res["redis"], res["basalt"])))
                    return divs
            return divs
        finally:
            for side in SIDES:
                for c_ in C[side].values():
                    c_.close()

    def trace(self, seq):
        tr = []
        self.run(seq, trace=tr)
        out = ["protos s1=%d s2=%d" % seq[0]]
        for who, a, rr, br, same in tr:
            out.append("%s [%s] %s -> %s" % (" " if same else "!", who, cmdstr(a), rr))
            if not same:
                out.append("     basalt: %s" % (br,))
        return out


# ====================================================================== 4. expiry

REL = ["1000", "100000", "-1", "-100", "0", "9223372036854775807", "-9223372036854775808",
       "9223372036854775806", "9223372036854775", "9223372036854776", "92233720368547758",
       "9223372036854775808", "abc", "1.5", "", " 100", "+100", "0100", "1e3", "100000000000"]


def gen_expire_cmd(r, now):
    k = r.choice(["k0", "k1", "k2"])
    ABS = [str(now + 10000), str(now + 20000), str(now - 100), "1", "0", "-1", str(now + 10000) + "000",
           "9223372036854775807", "9223372036854775", "99999999999", "abc"]
    c = r.choice(["SET", "SET", "SETOPT", "EXPIRE", "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "TTL", "PTTL",
                  "EXPIRETIME", "PEXPIRETIME", "PERSIST", "GETEX", "SETEX", "PSETEX", "GET", "RENAME", "COPY",
                  "HSET", "DEL", "EXISTS"])
    if c == "SET":
        return ["SET", k, "v"] + r.choice([[], ["KEEPTTL"], ["EX", "100000"], ["PX", "100000000"]])
    if c == "SETOPT":
        o = r.choice(["EX", "PX", "EXAT", "PXAT", "ex"])
        v = r.choice(REL + ABS)
        if o.upper() in ("EX", "PX") and v in ("1", "1000"):
            v = "1000000"      # no key may expire while a sequence runs
        a = ["SET", k, "v", o, v]
        if r.random() < 0.3:
            a.append(r.choice(["KEEPTTL", "GET", "NX", "XX", "EX"]))
        return a
    if c in ("EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"):
        if c.endswith("AT"):
            v = r.choice(ABS + REL[:5])
            if c == "PEXPIREAT" and r.random() < 0.5 and v.isdigit() and len(v) == 10:
                v += "000"
        else:
            v = r.choice(REL)
            if c == "PEXPIRE" and v in ("1000", "100000") and r.random() < 0.5:
                v += "000"
            if v in ("1000",) and c == "PEXPIRE":
                v = "1000000"
        a = [c, k, v]
        for _ in range(r.choice([0, 1, 1, 1, 2])):
            a.append(r.choice(["NX", "XX", "GT", "LT", "gt", "BAD"]))
        return a
    if c in ("TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME", "PERSIST", "GET", "DEL", "EXISTS"):
        return [c, r.choice([k, k, "missing"])]
    if c == "GETEX":
        return ["GETEX", k] + r.choice([[], ["PERSIST"], ["EX", r.choice(REL)], ["PX", r.choice(REL[1:])],
                                        ["EXAT", r.choice(ABS)], ["PXAT", r.choice(ABS)], ["PERSIST", "EX", "100"]])
    if c in ("SETEX", "PSETEX"):
        v = r.choice(REL)
        if c == "PSETEX" and v in ("1000",):
            v = "1000000"
        return [c, k, v, "v"]
    if c == "RENAME":
        return ["RENAME", k, r.choice(["k0", "k1", "k2"])]
    if c == "COPY":
        return ["COPY", k, r.choice(["k0", "k1", "k2"]), "REPLACE"]
    if c == "HSET":
        return ["HSET", k, "f", "v"]


def norm_time(cmd, rep):
    c = cmd[0].upper()
    if rep[0] == ":" and c in ("TTL", "PTTL") and int(rep[1]) > 0:
        return ("ttl>0",)
    if rep[0] == ":" and c in ("EXPIRETIME", "PEXPIRETIME") and int(rep[1]) > 0:
        v = int(rep[1])
        return ("abs", v // (1000 if c == "EXPIRETIME" else 1000000))   # ~1000 s buckets
    return canon(rep)


class ExpireArea(Area):
    name = "expire"

    def gen(self, r, length):
        now = int(time.time())
        return (r.choice([2, 2, 3]), [gen_expire_cmd(r, now) for _ in range(r.randint(4, length))])

    def run(self, seq, shrinking=False, trace=None):
        proto, steps = seq
        cs = {s: self.conn(s, proto) for s in SIDES}
        for c in cs.values():
            c.call("FLUSHALL")
        divs = []
        try:
            for i, cmd in enumerate(steps):
                self.ncmds += 1
                rr, br = cs["redis"].call(*cmd), cs["basalt"].call(*cmd)
                same = norm_time(cmd, rr) == norm_time(cmd, br)
                if not same and cmd[0].upper() in ("EXPIRETIME", "PEXPIRETIME") and rr[0] == br[0] == ":":
                    d = abs(int(rr[1]) - int(br[1]))
                    same = d <= (2 if cmd[0].upper() == "EXPIRETIME" else 2000)
                if trace is not None:
                    trace.append((cmd, rr, br, same))
                if not same:
                    divs.append((i, ("expire",) + kind_of(cmd, rr, br), (fmt(rr), fmt(br))))
                    if not (rr[0] == "-" and br[0] == "-") and cmd[0].upper() not in dt.READONLY:
                        return divs
            for k in ("k0", "k1", "k2"):
                for cmd in (["TYPE", k], ["TTL", k], ["PEXPIRETIME", k]):
                    rr, br = cs["redis"].call(*cmd), cs["basalt"].call(*cmd)
                    same = norm_time(cmd, rr) == norm_time(cmd, br) or (
                        cmd[0] == "PEXPIRETIME" and rr[0] == br[0] == ":" and abs(int(rr[1]) - int(br[1])) <= 2000)
                    if not same:
                        divs.append((len(steps) - 1, ("expire-state", cmd[0]), (fmt(rr), fmt(br))))
                        return divs
            return divs
        finally:
            for c in cs.values():
                c.close()

    def trace(self, seq):
        tr = []
        self.run(seq, trace=tr)
        out = ["proto=%d" % seq[0]]
        for cmd, rr, br, same in tr:
            out.append("%s %s -> %s" % (" " if same else "!", cmdstr(cmd), fmt(rr)))
            if not same:
                out.append("     basalt: %s" % fmt(br))
        return out


# ====================================================================== 5. blocking

TIMEOUTS = ["0.05", "0.05", "0.01", "0.05", "-1", "abc", "1e20", "", "-0.5", "0x10", "inf", "nan", "1e-3",
            "9223372036854775807", "9223372036854775.807", "0", "1", "0.0", "-0", " 1", "1e400", "3.0e-2",
            "-inf", "0.001", "1e-9", "+0.05", ".05", "5e-2", "9223372036854775", "9223372036854776"]
LISTK = ["l0", "l1", "l2"]
ZK = ["z0", "z1"]


def gen_block_cmd(r):
    x = r.random()
    if x < 0.35:
        c = r.choice(["LPUSH", "RPUSH", "ZADD", "ZADD", "SET", "DEL", "LPUSH"])
        if c in ("LPUSH", "RPUSH"):
            return [c, r.choice(LISTK + ["z0"])] + r.sample(["a", "b", "c"], r.randint(1, 3))
        if c == "ZADD":
            return ["ZADD", r.choice(ZK + ["l0"]), r.choice(["1", "2", "-1"]), r.choice(["a", "b", "c"])]
        if c == "SET":
            return ["SET", r.choice(LISTK + ZK), "s"]
        return ["DEL"] + r.sample(LISTK + ZK, 2)
    t = r.choice(TIMEOUTS)
    c = r.choice(["BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP"])
    if c in ("BLPOP", "BRPOP"):
        return [c] + r.sample(LISTK, r.randint(1, 2)) + [t]
    if c in ("BZPOPMIN", "BZPOPMAX"):
        return [c] + r.sample(ZK, r.randint(1, 2)) + [t]
    if c == "BLMOVE":
        return [c, r.choice(LISTK), r.choice(LISTK + ZK), r.choice(["LEFT", "RIGHT", "UP"]),
                r.choice(["LEFT", "RIGHT"]), t]
    if c == "BRPOPLPUSH":
        return [c, r.choice(LISTK), r.choice(LISTK), t]
    if c in ("BLMPOP", "BZMPOP"):
        ks = r.sample(LISTK if c == "BLMPOP" else ZK, r.randint(1, 2))
        nk = str(len(ks)) if r.random() < 0.85 else r.choice(["0", "-1", "5", "abc"])
        a = [c, t, nk] + ks + [r.choice(["LEFT", "RIGHT", "BAD"] if c == "BLMPOP" else ["MIN", "MAX", "BAD"])]
        if r.random() < 0.4:
            a += ["COUNT", r.choice(["1", "2", "5", "0", "-1", "abc"])]
        return a


def block_src(cmd):
    """First source key of a blocking command and its push command."""
    c = cmd[0].upper()
    if c in ("BLMPOP", "BZMPOP"):
        k = cmd[3] if len(cmd) > 3 else "l0"
    else:
        k = cmd[1]
    if c.startswith("BZ"):
        return ["ZADD", k, "7", "pushed"]
    return ["RPUSH", k, "pushed"]


class BlockArea(Area):
    name = "block"

    def gen(self, r, length):
        return (r.choice([2, 2, 3]), [gen_block_cmd(r) for _ in range(r.randint(4, length))])

    def run(self, seq, shrinking=False, trace=None):
        proto, steps = seq
        cs = {s: self.conn(s, proto) for s in SIDES}
        hs = {s: self.conn(s) for s in SIDES}
        for c in cs.values():
            c.call("FLUSHALL")
        divs = []
        try:
            for i, cmd in enumerate(steps):
                self.ncmds += 1
                res = {}
                blocking = cmd[0].upper().startswith("B")
                for side in SIDES:
                    c = cs[side]
                    if not blocking:
                        res[side] = c.call(*cmd)
                        continue
                    send(c, cmd)
                    f = read_to(c, 0.4)
                    if f is None:
                        pr = hs[side].call(*block_src(cmd))
                        f2 = read_to(c, 3)
                        res[side] = ("BLOCKED", fmt(pr), fmt(f2) if f2 else "STILL-BLOCKED")
                        if f2 is None:
                            c.close()
                            cs[side] = c = self.conn(side, proto)
                    else:
                        res[side] = f
                rr, br = res["redis"], res["basalt"]
                if rr[0] == "BLOCKED" or br[0] == "BLOCKED":
                    same = rr == br
                else:
                    same = normalize(cmd, rr) == normalize(cmd, br)
                if trace is not None:
                    trace.append((cmd, rr, br, same))
                if not same:
                    fr = rr if rr[0] == "BLOCKED" else fmt(rr)
                    fb = br if br[0] == "BLOCKED" else fmt(br)
                    if rr[0] == "BLOCKED" or br[0] == "BLOCKED":
                        kind = ("block", cmd[0].upper(), "blocked" if rr[0] == "BLOCKED" else fmt(rr)[:1],
                                "blocked" if br[0] == "BLOCKED" else fmt(br)[:1])
                    else:
                        kind = ("block",) + kind_of(cmd, rr, br)
                    divs.append((i, kind, (fr, fb)))
                    if not (rr[0] == "-" and br[0] == "-"):
                        return divs
            for k in LISTK + ZK:
                for cmd in (["TYPE", k], ["DUMPX", k]):
                    if cmd[0] == "DUMPX":
                        t = cs["redis"].call("TYPE", k)[1]
                        cmd = {b"list": ["LRANGE", k, "0", "-1"], b"zset": ["ZRANGE", k, "0", "-1", "WITHSCORES"],
                               b"string": ["GET", k]}.get(t)
                        if not cmd:
                            continue
                    rr, br = cs["redis"].call(*cmd), cs["basalt"].call(*cmd)
                    if rr != br:
                        divs.append((len(steps) - 1, ("block-state", cmd[0]), (fmt(rr), fmt(br))))
                        return divs
            return divs
        finally:
            for d in (cs, hs):
                for c in d.values():
                    c.close()

    def trace(self, seq):
        tr = []
        self.run(seq, trace=tr)
        out = ["proto=%d" % seq[0]]
        for cmd, rr, br, same in tr:
            out.append("%s %s -> %s" % (" " if same else "!", cmdstr(cmd), rr if rr[0] == "BLOCKED" else fmt(rr)))
            if not same:
                out.append("     basalt: %s" % (br if br[0] == "BLOCKED" else fmt(br),))
        return out

    # ------------------------------------------------------------ scripted multi-client scenarios
    SCENARIOS = [
        # (name, [(conn, cmd, expect_block)]) conns: a, b (blockers), p (pusher); events via KEA subscriber
        ("fifo two blockers", [("a", ["BLPOP", "q", "5"], 1), ("b", ["BLPOP", "q", "5"], 1),
                               ("p", ["RPUSH", "q", "x", "y", "z"], 0)]),
        ("one push serves one", [("a", ["BLPOP", "q", "5"], 1), ("b", ["BRPOP", "q", "5"], 1),
                                 ("p", ["RPUSH", "q", "x"], 0), ("p", ["RPUSH", "q", "y"], 0)]),
        ("blmove served", [("a", ["BLMOVE", "q", "d", "RIGHT", "LEFT", "5"], 1), ("p", ["LPUSH", "q", "x", "y"], 0),
                           ("p", ["LRANGE", "d", "0", "-1"], 0), ("p", ["LRANGE", "q", "0", "-1"], 0)]),
        ("blmove chain", [("a", ["BLMOVE", "q", "d", "LEFT", "LEFT", "5"], 1), ("b", ["BLPOP", "d", "5"], 1),
                          ("p", ["RPUSH", "q", "x"], 0), ("p", ["EXISTS", "q", "d"], 0)]),
        ("bzpopmin served", [("a", ["BZPOPMIN", "z", "5"], 1), ("p", ["ZADD", "z", "2", "b", "1", "a"], 0),
                             ("p", ["ZRANGE", "z", "0", "-1"], 0)]),
        ("bzmpop count", [("a", ["BZMPOP", "5", "1", "z", "MAX", "COUNT", "2"], 1),
                          ("p", ["ZADD", "z", "1", "a", "2", "b", "3", "c"], 0)]),
        ("blmpop count", [("a", ["BLMPOP", "5", "2", "q", "r", "RIGHT", "COUNT", "5"], 1), ("p", ["RPUSH", "r", "1", "2"], 0)]),
        ("push inside multi then pop", [("a", ["BLPOP", "q", "5"], 1), ("p", ["MULTI"], 0), ("p", ["RPUSH", "q", "x"], 0),
                                        ("p", ["LPOP", "q"], 0), ("p", ["EXEC"], 0), ("p", ["RPUSH", "q", "y"], 0)]),
        ("wrong type then right", [("a", ["BLPOP", "q", "5"], 1), ("p", ["SET", "q", "s"], 0), ("p", ["DEL", "q"], 0),
                                   ("p", ["RPUSH", "q", "x"], 0)]),
        ("blmove dst wrong type", [("p", ["SET", "d", "s"], 0), ("a", ["BLMOVE", "q", "d", "LEFT", "LEFT", "5"], 1),
                                   ("p", ["RPUSH", "q", "x"], 0), ("p", ["LRANGE", "q", "0", "-1"], 0)]),
        ("zadd to list blocker", [("a", ["BLPOP", "q", "5"], 1), ("p", ["ZADD", "q", "1", "a"], 0), ("p", ["DEL", "q"], 0),
                                  ("p", ["LPUSH", "q", "x"], 0)]),
        ("rename into blocked key", [("a", ["BLPOP", "q", "5"], 1), ("p", ["RPUSH", "t", "x"], 0),
                                     ("p", ["RENAME", "t", "q"], 0)]),
        ("lmove into blocked key", [("a", ["BRPOP", "q", "5"], 1), ("p", ["RPUSH", "t", "x"], 0),
                                    ("p", ["LMOVE", "t", "q", "LEFT", "LEFT"], 0)]),
        ("zunionstore into blocked key", [("a", ["BZPOPMAX", "z", "5"], 1), ("p", ["ZADD", "t", "1", "x"], 0),
                                          ("p", ["ZUNIONSTORE", "z", "1", "t"], 0)]),
        ("multi keys blocker", [("a", ["BLPOP", "q", "r", "5"], 1), ("p", ["RPUSH", "r", "x"], 0)]),
        ("two keys two blockers", [("a", ["BLPOP", "q", "5"], 1), ("b", ["BLPOP", "r", "5"], 1),
                                   ("p", ["MULTI"], 0), ("p", ["RPUSH", "r", "x"], 0), ("p", ["RPUSH", "q", "y"], 0),
                                   ("p", ["EXEC"], 0)]),
        ("serve order after multi (blmove chain)", [("a", ["BLMOVE", "q", "r", "RIGHT", "LEFT", "5"], 1),
                                                     ("b", ["BLPOP", "r", "5"], 1), ("p", ["MULTI"], 0),
                                                     ("p", ["RPUSH", "r", "x"], 0), ("p", ["RPUSH", "q", "y"], 0),
                                                     ("p", ["EXEC"], 0), ("p", ["LRANGE", "r", "0", "-1"], 0)]),
        ("serve order after multi (reverse block order)", [("b", ["BLPOP", "r", "5"], 1),
                                                            ("a", ["BLMOVE", "q", "r", "RIGHT", "LEFT", "5"], 1),
                                                            ("p", ["MULTI"], 0), ("p", ["RPUSH", "r", "x"], 0),
                                                            ("p", ["RPUSH", "q", "y"], 0), ("p", ["EXEC"], 0),
                                                            ("p", ["LRANGE", "r", "0", "-1"], 0)]),
        ("serve order after multi (q first)", [("a", ["BLMOVE", "q", "r", "RIGHT", "LEFT", "5"], 1),
                                               ("b", ["BLPOP", "r", "5"], 1), ("p", ["MULTI"], 0),
                                               ("p", ["RPUSH", "q", "y"], 0), ("p", ["RPUSH", "r", "x"], 0),
                                               ("p", ["EXEC"], 0), ("p", ["LRANGE", "r", "0", "-1"], 0)]),
        ("timeout resp", [("a", ["BLPOP", "q", "0.05"], 0), ("a", ["BZPOPMIN", "q", "0.05"], 0),
                          ("a", ["BLMOVE", "q", "d", "LEFT", "LEFT", "0.05"], 0), ("a", ["BRPOPLPUSH", "q", "d", "0.05"], 0),
                          ("a", ["BLMPOP", "0.05", "1", "q", "LEFT"], 0), ("a", ["BZMPOP", "0.05", "1", "q", "MIN"], 0)]),
    ]

    def scripted(self, log):
        nd = 0
        for proto in (2, 3):
            for name, steps in self.SCENARIOS:
                res = {}
                for side in SIDES:
                    c = {w: self.conn(side, proto) for w in ("a", "b", "p")}
                    c["p"].call("CONFIG", "SET", "notify-keyspace-events", "KEA")
                    c["p"].call("FLUSHALL")
                    sub = self.conn(side)
                    sub.call("PSUBSCRIBE", "__keyspace@0__:*")
                    sub.call("SUBSCRIBE", MARK)
                    out = []
                    pending = []
                    for w, cmd, blk in steps:
                        self.ncmds += 1
                        send(c[w], cmd)
                        f = read_to(c[w], 0.3 if blk else 3)
                        if blk:
                            out.append((w, cmdstr(cmd), "blocked" if f is None else fmt(f)))
                            if f is None:
                                pending.append(w)
                        else:
                            out.append((w, cmdstr(cmd), "TIMEOUT" if f is None else fmt(f)))
                            time.sleep(0.05)
                            for pw in list(pending):
                                g = read_to(c[pw], 0.2)
                                if g is not None:
                                    out.append(("served " + pw, fmt(g)))
                                    pending.remove(pw)
                    for pw in pending:
                        g = read_to(c[pw], 6)
                        out.append(("end " + pw, "TIMEOUT" if g is None else fmt(g)))
                    c["p"].call("PUBLISH", MARK, "end")
                    evs = []
                    while True:
                        f = read_to(sub, 3)
                        if f is None:
                            evs.append("TIMEOUT")
                            break
                        v = [b2s(x[1]) for x in f[1]]
                        if v[0] == "message":
                            break
                        if v[0] == "pmessage":
                            evs.append("%s:%s" % (v[2].split(":", 1)[1], v[3]))
                    out.append(("events", evs))
                    c["p"].call("CONFIG", "SET", "notify-keyspace-events", "")
                    for x in list(c.values()) + [sub]:
                        x.close()
                    res[side] = out
                if res["redis"] != res["basalt"]:
                    nd += 1
                    log("! scenario %r resp%d\n     redis : %s\n     basalt: %s" % (name, proto, res["redis"], res["basalt"]))
        log("[block scripted] %d differences (%d scenarios x 2 protocols)" % (nd, len(self.SCENARIOS)))


# ====================================================================== main

AREAS = {"notify": NotifyArea, "multi": MultiArea, "pubsub": PubSubArea, "expire": ExpireArea, "block": BlockArea}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redis", type=int, default=16379)
    ap.add_argument("--basalt", type=int, default=16380)
    ap.add_argument("--areas", default=",".join(AREAS))
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--len", type=int, default=20)
    ap.add_argument("--max-examples", type=int, default=1)
    ap.add_argument("--no-scripted", action="store_true")
    ap.add_argument("--sort", action="store_true", help="notify: include SORT ... STORE")
    ap.add_argument("--avoid-known", action="store_true",
                    help="block: drop timeouts that hit differences known when this was written "
                         "(hex floats, seconds in [9.2233703e15, 9.2233720e15])")
    ap.add_argument("--strict-order", action="store_true",
                    help="pubsub: compare unspecified orders (pattern matches, UNSUBSCRIBE-all) exactly")
    ap.add_argument("--shard", action="store_true", help="pubsub: include SSUBSCRIBE/SPUBLISH/PUBSUB SHARD*")
    ap.add_argument("--exec-arity", action="store_true", help="multi: include EXEC/DISCARD with an extra argument")
    ap.add_argument("--out", default="difftest-events-findings.json")
    args = ap.parse_args()

    def log(s):
        print(s)
        sys.stdout.flush()

    global WITH_SORT
    WITH_SORT = args.sort
    if args.avoid_known:
        for x in ("0x10", "9223372036854775", "9223372036854775.807"):
            while x in TIMEOUTS:
                TIMEOUTS.remove(x)
    kinds = {}
    for name in args.areas.split(","):
        area = AREAS[name](args.redis, args.basalt)
        PubSubArea.strict, PubSubArea.shard = args.strict_order, args.shard
        MultiArea.exec_arity = args.exec_arity
        if not args.no_scripted and hasattr(area, "scripted"):
            area.scripted(log)
        drive(area, args.seeds, args.start, args.len, args.max_examples, kinds, log)
    log("\n%d distinct kinds" % len(kinds))
    for k, v in sorted(kinds.items(), key=lambda kv: str(kv[0])):
        log("  %-80s first seed %s" % (" | ".join(map(str, k)), v[0]["seed"] if v else "-"))
    with open(args.out, "w") as f:
        json.dump({" | ".join(map(str, k)): v for k, v in kinds.items()}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
