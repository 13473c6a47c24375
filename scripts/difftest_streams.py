#!/usr/bin/env python3
"""Streams against redis-server: fixed cases, then random sequences.

Usage: python3 scripts/difftest_streams.py --redis 16379 --basalt 16380 [--seeds N] [-v]

Each case runs on freshly flushed servers and compares every reply byte for
byte (reply types, error texts). Only explicit ids are used where a reply
shows them (`*` ids carry the server's clock). The random part issues XADD
(explicit and `ms-*` ids, MAXLEN/MINID trims with `=`), XRANGE, XREVRANGE
(with COUNT and exclusive bounds), XDEL, XTRIM, XLEN, TYPE, DEL and
wrong-type calls over two stream keys and a string.

Covered so far: XADD, XLEN, XRANGE, XREVRANGE, XDEL, XTRIM (the commands
Basalt serves; see docs/compatibility.md). Approximate trims (`~`) are
left out of the comparison: Redis trims whole radix-tree nodes, Basalt
exactly, and both are within what `~` allows.
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from difftest import Conn, fmt  # noqa: E402  (raw RESP2/RESP3 client)

CASES = [
    ("xadd explicit ids", [
        ["XADD", "s", "1-1", "a", "1"], ["XADD", "s", "1-1", "a", "1"], ["XADD", "s", "0-0", "a", "1"],
        ["XADD", "s", "1", "a", "1"], ["XADD", "s", "2", "a", "1"], ["XADD", "s", "abc", "a", "1"],
        ["XADD", "s", "5-*", "a", "1"], ["XADD", "s", "5-*", "b", "2"], ["XADD", "s", "4-*", "b", "2"],
        ["XADD", "s", "-1", "a", "1"], ["XADD", "s", "1-", "a", "1"], ["XADD", "s", "1-x", "a", "1"],
        ["XLEN", "s"], ["XRANGE", "s", "-", "+"]]),
    ("xadd arity and options", [
        ["XADD", "s", "1-1", "a"], ["XADD", "s", "1-1", "a", "1", "b"], ["XADD", "s"],
        ["XADD", "s", "NOMKSTREAM", "1-1", "a", "1"], ["EXISTS", "s"],
        ["XADD", "s", "LIMIT", "5", "1-1", "a", "1"], ["XADD", "s", "MAXLEN", "-1", "1-1", "a", "1"],
        ["XADD", "s", "MAXLEN", "=", "2", "LIMIT", "5", "1-1", "a", "1"],
        ["XADD", "s", "MAXLEN", "x", "1-1", "a", "1"], ["XADD", "s", "MINID", "x", "1-1", "a", "1"],
        ["XADD", "s", "MAXLEN", "1", "1-1", "a", "1"], ["XADD", "s", "MAXLEN", "1", "2-1", "b", "2"],
        ["XRANGE", "s", "-", "+"], ["XADD", "s", "MINID", "5", "3-1", "c", "3"], ["XLEN", "s"],
        ["XADD", "s", "NOMKSTREAM", "9-1", "d", "4"], ["XRANGE", "s", "-", "+"]]),
    ("xadd 0-* and exhausted", [
        ["XADD", "s", "0-*", "a", "1"], ["XADD", "s", "0-*", "a", "1"],
        ["XADD", "s", "18446744073709551615-18446744073709551615", "a", "1"],
        ["XADD", "s", "*", "a", "1"], ["XADD", "s", "18446744073709551615-*", "a", "1"],
        ["XADD", "t", "18446744073709551615-*", "a", "1"], ["XADD", "t", "18446744073709551615-*", "a", "1"]]),
    ("xrange bounds and count", [
        ["XADD", "s", "1-1", "a", "1"], ["XADD", "s", "1-2", "b", "2"], ["XADD", "s", "2-0", "c", "3"],
        ["XADD", "s", "3-5", "d", "4", "e", "5"],
        ["XRANGE", "s", "-", "+"], ["XRANGE", "s", "1", "1"], ["XRANGE", "s", "1-2", "3"],
        ["XRANGE", "s", "(1-1", "+"], ["XRANGE", "s", "-", "(3-5"], ["XRANGE", "s", "(-", "+"],
        ["XRANGE", "s", "-", "(+"], ["XRANGE", "s", "(0-0", "(18446744073709551615-18446744073709551615"],
        ["XRANGE", "s", "3", "1"], ["XRANGE", "s", "-", "+", "COUNT", "2"], ["XRANGE", "s", "-", "+", "COUNT", "0"],
        ["XRANGE", "s", "-", "+", "COUNT", "-1"], ["XRANGE", "s", "-", "+", "COUNT"],
        ["XRANGE", "s", "-", "+", "COUNT", "x"], ["XRANGE", "s", "-", "+", "LIMIT", "1"],
        ["XRANGE", "s", "x", "+"], ["XREVRANGE", "s", "+", "-"], ["XREVRANGE", "s", "+", "-", "COUNT", "1"],
        ["XREVRANGE", "s", "3", "1-2"], ["XREVRANGE", "s", "(3-5", "(1-1"], ["XRANGE", "nosuch", "-", "+"],
        ["XREVRANGE", "nosuch", "+", "-"], ["XLEN", "nosuch"]]),
    ("xdel and xtrim", [
        ["XADD", "s", "1-1", "a", "1"], ["XADD", "s", "2-1", "b", "2"], ["XADD", "s", "3-1", "c", "3"],
        ["XADD", "s", "4-1", "d", "4"], ["XDEL", "s", "2-1", "9-9"], ["XDEL", "s", "2-1"], ["XDEL", "s", "x"],
        ["XDEL", "s", "1-1", "x"], ["XLEN", "s"], ["XDEL", "nosuch", "1-1"], ["XTRIM", "s", "MAXLEN", "1"],
        ["XRANGE", "s", "-", "+"], ["XTRIM", "s", "MAXLEN", "5"], ["XTRIM", "s", "MINID", "9"], ["XLEN", "s"],
        ["EXISTS", "s"], ["TYPE", "s"], ["XADD", "s", "4-1", "e", "5"], ["XADD", "s", "5-1", "e", "5"],
        ["XTRIM", "s"], ["XTRIM", "s", "MAXLEN"], ["XTRIM", "s", "FOO", "1"], ["XTRIM", "s", "MAXLEN", "1", "x"],
        ["XTRIM", "s", "MAXLEN", "=", "0"], ["XTRIM", "nosuch", "MAXLEN", "0"], ["XLEN", "s"],
        ["XTRIM", "s", "MAXLEN", "=", "1", "LIMIT", "1"], ["XTRIM", "s", "MINID", "-1"]]),
    ("xread", [
        ["XADD", "s", "1-1", "a", "1"], ["XADD", "s", "2-1", "b", "2"], ["XADD", "t", "5-1", "c", "3"],
        ["XREAD", "STREAMS", "s", "0"], ["XREAD", "COUNT", "1", "STREAMS", "s", "t", "0", "0"],
        ["XREAD", "STREAMS", "s", "t", "1-1", "5-1"], ["XREAD", "STREAMS", "s", "$"],
        ["XREAD", "COUNT", "0", "STREAMS", "s", "1"], ["XREAD", "COUNT", "-5", "STREAMS", "s", "0"],
        ["XREAD", "STREAMS", "nosuch", "0"], ["XREAD", "STREAMS", "s", "t", "0"], ["XREAD", "STREAMS", "s", "x"],
        ["XREAD", "STREAMS"], ["XREAD", "COUNT", "STREAMS", "s", "0"], ["XREAD", "FOO", "STREAMS", "s", "0"],
        ["XREAD", "GROUP", "g", "c", "STREAMS", "s", "0"], ["XREAD", "NOACK", "STREAMS", "s", "0"],
        ["XREAD", "BLOCK", "-1", "STREAMS", "s", "0"], ["XREAD", "BLOCK", "x", "STREAMS", "s", "0"],
        ["XREAD", "BLOCK", "10", "STREAMS", "s", "0"], ["SET", "str", "x"], ["XREAD", "STREAMS", "s", "str", "0", "0"],
        ["XREAD", "STREAMS", "str", "s", "x", "0"], ["COMMAND", "GETKEYS", "XREAD", "COUNT", "2", "STREAMS", "a", "b", "0", "0"],
        ["XREAD", "BLOCK", "100", "STREAMS", "s", "$"]]),
    ("consumer groups", [
        ["XADD", "s", "1-1", "a", "1"], ["XADD", "s", "2-1", "b", "2"], ["XADD", "s", "3-1", "c", "3"],
        ["XGROUP", "CREATE", "s", "g", "0"], ["XGROUP", "CREATE", "s", "g", "0"], ["XGROUP", "CREATE", "nos", "g", "0"],
        ["XGROUP", "CREATE", "nos", "g", "$", "MKSTREAM"], ["XLEN", "nos"], ["TYPE", "nos"],
        ["XGROUP", "CREATE", "s", "g2", "x"], ["XGROUP", "CREATE", "s", "g3", "$", "ENTRIESREAD", "-5"],
        ["XGROUP", "CREATE", "s", "g3", "$", "FOO"], ["XGROUP", "CREATE", "s"], ["XGROUP", "FOO"],
        ["XGROUP", "HELP"], ["XGROUP", "CREATECONSUMER", "s", "g", "c1"], ["XGROUP", "CREATECONSUMER", "s", "g", "c1"],
        ["XGROUP", "CREATECONSUMER", "s", "nog", "c1"], ["XGROUP", "CREATECONSUMER", "nos2", "g", "c1"],
        ["XREADGROUP", "GROUP", "g", "c2", "COUNT", "1", "STREAMS", "s", ">"],
        ["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "0"], ["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "1-1"],
        ["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "(1-1"], ["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "5"],
        ["XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">"], ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s"],
        ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$"], ["XREADGROUP", "COUNT", "1", "STREAMS", "s", ">"],
        ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "t", ">"], ["XPENDING", "s", "g"],
        ["XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", ">"], ["XPENDING", "s", "g"], ["XPENDING", "s", "nog"],
        ["XPENDING", "nos2", "g"], ["XPENDING", "s", "g", "-", "+", "x"], ["XPENDING", "s", "g", "-", "+", "-1"],
        ["XPENDING", "s", "g", "-", "+"], ["XPENDING", "s", "g", "IDLE", "x", "-", "+", "10"],
        ["XACK", "s", "g", "1-1", "9-9"], ["XACK", "s", "g", "x"], ["XACK", "s", "nog", "2-1"], ["XACK", "nos2", "g", "2-1"],
        ["XPENDING", "s", "g"], ["XDEL", "s", "2-1"], ["XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", "0"],
        ["XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", ">"], ["XREADGROUP", "GROUP", "g", "c3", "BLOCK", "10", "STREAMS", "s", ">"],
        ["XREADGROUP", "GROUP", "g", "c4", "NOACK", "STREAMS", "s", ">"], ["XGROUP", "SETID", "s", "g", "0"],
        ["XREADGROUP", "GROUP", "g", "c4", "STREAMS", "s", ">"], ["XPENDING", "s", "g"],
        ["XGROUP", "DELCONSUMER", "s", "g", "c4"], ["XGROUP", "DELCONSUMER", "s", "g", "nobody"], ["XPENDING", "s", "g"],
        ["XGROUP", "SETID", "s", "nog", "0"], ["XGROUP", "SETID", "s", "g3", "1-1", "ENTRIESREAD", "1"],
        ["XGROUP", "DESTROY", "s", "g"], ["XGROUP", "DESTROY", "s", "g"], ["XGROUP", "DESTROY", "nos2", "g"],
        ["XPENDING", "s", "g"], ["COMMAND", "GETKEYS", "XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "b", ">", ">"]]),
    ("xclaim and xautoclaim", [
        ["XADD", "s", "1-1", "f", "1"], ["XADD", "s", "2-1", "f", "2"], ["XADD", "s", "3-1", "f", "3"],
        ["XADD", "s", "4-1", "f", "4"], ["XGROUP", "CREATE", "s", "g", "0"],
        ["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">"], ["XDEL", "s", "2-1"],
        ["XCLAIM", "s", "g", "b", "0", "1-1", "2-1", "9-9"], ["XPENDING", "s", "g"],
        ["XCLAIM", "s", "g", "c", "0", "1-1", "3-1", "JUSTID"], ["XPENDING", "s", "g"],
        ["XADD", "s", "5-1", "f", "5"], ["XCLAIM", "s", "g", "c", "0", "5-1", "FORCE", "JUSTID"],
        ["XCLAIM", "s", "g", "c", "0", "6-1", "FORCE"], ["XCLAIM", "s", "g", "c", "x", "1-1"],
        ["XCLAIM", "s", "g", "c", "0", "1-1", "IDLE", "x"], ["XCLAIM", "s", "g", "c", "0", "1-1", "FOO"],
        ["XCLAIM", "s", "nog", "c", "0", "1-1"], ["XCLAIM", "nos", "g", "c", "0", "1-1"],
        ["XCLAIM", "s", "g", "c", "0", "x"], ["XCLAIM", "s", "g", "c", "0", "1-1", "RETRYCOUNT", "x"],
        ["XCLAIM", "s", "g", "c", "0", "1-1", "TIME", "x"], ["XCLAIM", "s", "g", "c", "3600000", "1-1"],
        ["XAUTOCLAIM", "s", "g", "d", "0", "0", "COUNT", "2"], ["XAUTOCLAIM", "s", "g", "d", "0", "0", "COUNT", "0"],
        ["XAUTOCLAIM", "s", "g", "d", "0", "0", "JUSTID"], ["XAUTOCLAIM", "s", "nog", "d", "0", "0"],
        ["XAUTOCLAIM", "s", "g", "d", "3600000", "0"], ["XAUTOCLAIM", "s", "g", "d", "0", "(1-1"],
        ["XAUTOCLAIM", "s", "g", "d", "0", "x"], ["XAUTOCLAIM", "s", "g", "d", "0", "0", "FOO"],
        ["XDEL", "s", "3-1"], ["XAUTOCLAIM", "s", "g", "e", "0", "-", "COUNT", "10"], ["XPENDING", "s", "g"],
        ["XCLAIM", "s", "g", "c", "0", "1-1", "RETRYCOUNT", "7", "LASTID", "9-9", "JUSTID"],
        ["XREADGROUP", "GROUP", "g", "z", "STREAMS", "s", ">"], ["XPENDING", "s", "g"]]),
    ("xsetid", [
        ["XADD", "s", "1-1", "f", "1"], ["XADD", "s", "2-1", "f", "2"], ["XADD", "s", "3-1", "f", "3"],
        ["XSETID", "s", "2-1"], ["XSETID", "s", "5-1"], ["XADD", "s", "4-1", "f", "4"], ["XADD", "s", "5-*", "f", "5"],
        ["XSETID", "s", "9-1", "ENTRIESADDED", "1"], ["XSETID", "s", "9-1", "ENTRIESADDED", "-1"],
        ["XSETID", "s", "9-1", "ENTRIESADDED", "5", "MAXDELETEDID", "10-1"],
        ["XSETID", "s", "9-1", "ENTRIESADDED", "5", "MAXDELETEDID", "2-1"], ["XSETID", "s", "8-1"],
        ["XSETID", "s", "1-1"], ["XSETID", "nos", "1-1"], ["XSETID", "s", "x"], ["XSETID", "s", "9-1", "FOO"],
        ["XSETID", "s", "9-1", "ENTRIESADDED"], ["XSETID", "s", "+"], ["XADD", "s", "8-1", "f", "6"],
        ["XADD", "s", "9-1", "f", "6"], ["XADD", "s", "9-*", "f", "6"], ["XDEL", "s", "9-2"], ["XSETID", "s", "9-1"],
        ["SET", "str", "x"], ["XSETID", "str", "1-1"], ["XRANGE", "s", "-", "+"],
        ["XADD", "z", "1-1", "f", "1"], ["XADD", "z", "2-1", "f", "1"], ["XADD", "z", "3-1", "f", "1"],
        ["XDEL", "z", "3-1"], ["XSETID", "z", "2-5"], ["XADD", "z", "2-6", "f", "1"], ["XADD", "z", "2-*", "f", "1"]]),
    ("xinfo", [
        ["XGROUP", "CREATE", "e", "g", "$", "MKSTREAM"], ["XINFO", "STREAM", "e"], ["XINFO", "GROUPS", "e"],
        ["XADD", "s", "1-1", "f", "1"], ["XADD", "s", "2-1", "f", "2"], ["XADD", "s", "3-1", "f", "3"],
        ["XGROUP", "CREATE", "s", "a", "0"], ["XGROUP", "CREATE", "s", "b", "$"], ["XGROUP", "CREATE", "s", "c", "2-1"],
        ["XINFO", "GROUPS", "s"], ["XREADGROUP", "GROUP", "a", "x", "COUNT", "1", "STREAMS", "s", ">"],
        ["XINFO", "GROUPS", "s"], ["XDEL", "s", "2-1"], ["XINFO", "GROUPS", "s"], ["XINFO", "STREAM", "s"],
        ["XREADGROUP", "GROUP", "a", "x", "STREAMS", "s", ">"], ["XREADGROUP", "GROUP", "c", "y", "STREAMS", "s", ">"],
        ["XINFO", "GROUPS", "s"], ["XADD", "s", "4-1", "f", "4"], ["XINFO", "GROUPS", "s"],
        ["XGROUP", "SETID", "s", "a", "0"], ["XINFO", "GROUPS", "s"], ["XGROUP", "SETID", "s", "b", "1-1", "ENTRIESREAD", "1"],
        ["XINFO", "GROUPS", "s"], ["XTRIM", "s", "MAXLEN", "1"], ["XINFO", "GROUPS", "s"], ["XINFO", "STREAM", "s"],
        ["XSETID", "s", "9-9", "ENTRIESADDED", "10", "MAXDELETEDID", "5-5"], ["XINFO", "STREAM", "s"], ["XINFO", "GROUPS", "s"],
        ["XINFO", "STREAM", "nos"], ["XINFO", "GROUPS", "nos"], ["XINFO", "CONSUMERS", "s", "nog"],
        ["XINFO", "CONSUMERS", "nos", "g"], ["XINFO", "FOO"], ["XINFO", "HELP"], ["XINFO", "STREAM", "s", "x"],
        ["XINFO", "GROUPS"], ["SET", "str", "x"], ["XINFO", "STREAM", "str"]]),
    ("types and generic commands", [
        ["SET", "str", "x"], ["XADD", "str", "1-1", "a", "1"], ["XRANGE", "str", "-", "+"], ["XLEN", "str"],
        ["XDEL", "str", "1-1"], ["XTRIM", "str", "MAXLEN", "0"], ["XADD", "s", "1-1", "a", "1"],
        ["TYPE", "s"], ["OBJECT", "ENCODING", "s"], ["LPUSH", "s", "x"], ["GET", "s"],
        ["RENAME", "s", "s2"], ["XRANGE", "s2", "-", "+"], ["XADD", "s2", "1-1", "z", "z"],
        ["COPY", "s2", "s3"], ["XADD", "s3", "2-1", "b", "2"], ["XRANGE", "s3", "-", "+"], ["XLEN", "s2"],
        ["DEL", "s2"], ["XLEN", "s2"], ["SCAN", "0", "TYPE", "stream"]]),
]


def run_case(r, b, cmds, verbose, name, proto=2):
    diffs = 0
    for conn in (r, b):
        conn.call("HELLO", str(proto))
        conn.call("FLUSHALL")
    for cmd in cmds:
        rr, bb = r.call(*cmd), b.call(*cmd)
        if rr != bb:
            diffs += 1
            print(f"DIFF {name}: {' '.join(cmd)}\n  redis : {fmt(rr)}\n  basalt: {fmt(bb)}")
        elif verbose:
            print(f"  ok {' '.join(cmd)} -> {fmt(rr)}")
    return diffs


def random_sequence(rng, n, groups=True):
    keys = ["s", "t"]
    out = []
    for _ in range(n):
        k = rng.choice(keys + ["str"])
        op = rng.random()
        ms = rng.randint(0, 30)
        if op < 0.35:
            id_ = rng.choice([f"{ms}-{rng.randint(0, 3)}", f"{ms}-*", str(ms)])
            trim = []
            if rng.random() < 0.2:
                trim = [rng.choice(["MAXLEN", "MINID"]), "=", str(rng.randint(0, 8))]
            fields = []
            for _ in range(rng.randint(1, 2)):
                fields += [rng.choice(["a", "b", "f" * rng.randint(1, 40)]), str(rng.randint(0, 99))]
            out.append(["XADD", k] + trim + [id_] + fields)
        elif op < 0.5:
            lo = rng.choice(["-", str(ms), f"({ms}-1", f"{ms}-2"])
            hi = rng.choice(["+", str(ms + rng.randint(0, 10)), f"({ms + 5}"])
            c = ["COUNT", str(rng.randint(-1, 5))] if rng.random() < 0.4 else []
            out.append(["XRANGE", k, lo, hi] + c)
        elif op < 0.6:
            out.append(["XREVRANGE", k, "+", "-"] + (["COUNT", str(rng.randint(0, 4))] if rng.random() < 0.5 else []))
        elif op < 0.72:
            out.append(["XDEL", k] + [f"{rng.randint(0, 30)}-{rng.randint(0, 3)}" for _ in range(rng.randint(1, 3))])
        elif op < 0.8:
            out.append(["XTRIM", k, rng.choice(["MAXLEN", "MINID"]), "=", str(rng.randint(0, 12))])
        elif op < 0.83:
            out.append([rng.choice(["XLEN", "TYPE", "EXISTS"]), k])
        elif op < 0.96 and groups:
            g = rng.choice(["g1", "g2"])
            c = rng.choice(["c1", "c2", "c3"])
            pick = rng.random()
            if pick < 0.15:
                out.append(["XGROUP", "CREATE", k, g, rng.choice(["0", "$", f"{ms}-0"])] + (["MKSTREAM"] if rng.random() < 0.5 else []))
            elif pick < 0.25:
                out.append(["XGROUP", "CREATE", k, g, "0", "MKSTREAM"])
            elif pick < 0.45:
                out.append(["XREADGROUP", "GROUP", g, c] + (["COUNT", str(rng.randint(1, 3))] if rng.random() < 0.6 else [])
                           + (["NOACK"] if rng.random() < 0.1 else []) + ["STREAMS", k, rng.choice([">", ">", "0", f"{ms}-0"])])
            elif pick < 0.6:
                out.append(["XACK", k, g] + [f"{rng.randint(0, 30)}-{rng.randint(0, 3)}" for _ in range(rng.randint(1, 3))])
            elif pick < 0.66:
                out.append(["XPENDING", k, g])
            elif pick < 0.7:
                out.append(["XINFO", rng.choice(["STREAM", "GROUPS"]), k])
            elif pick < 0.8:
                out.append(["XCLAIM", k, g, c, "0", f"{rng.randint(0, 30)}-{rng.randint(0, 3)}"] + (["JUSTID"] if rng.random() < 0.5 else [])
                           + (["FORCE"] if rng.random() < 0.2 else []))
            elif pick < 0.88:
                out.append(["XAUTOCLAIM", k, g, c, "0", "0", "COUNT", str(rng.randint(1, 4))] + (["JUSTID"] if rng.random() < 0.5 else []))
            elif pick < 0.94:
                out.append(["XGROUP", rng.choice(["DELCONSUMER", "CREATECONSUMER"]), k, g, c])
            else:
                out.append(["XGROUP", rng.choice(["DESTROY", "SETID"]), k, g] + (["0"] if rng.random() < 0.5 else []))
        elif op < 0.98:
            out.append(["SET", "str", "v"])
        else:
            out.append(["DEL", k])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redis", type=int, default=16379)
    ap.add_argument("--basalt", type=int, default=16380)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--len", type=int, default=60)
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    r, b = Conn(args.redis), Conn(args.basalt)
    total = 0
    diffs = 0
    # The fixed cases in RESP2 and RESP3 (XREAD, XREADGROUP and XINFO
    # reply maps in RESP3); the random sequences in RESP2.
    for proto in (2, 3):
        for name, cmds in CASES:
            total += 1
            diffs += run_case(r, b, cmds, args.v, f"{name} (RESP{proto})", proto) > 0
    for seed in range(args.seeds):
        total += 1
        cmds = random_sequence(random.Random(seed), args.len)
        d = run_case(r, b, cmds, False, f"seed {seed}")
        if d:
            diffs += 1
            print(f"(seed {seed} diverged; later replies of the sequence may differ as a result)")
    print(f"{total} sequences, {diffs} differ")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
