#!/usr/bin/env python3
"""Differential test of SORT / SORT_RO against redis-server.

Each round fills a fresh keyspace on both servers with the same data (a
list, set, sorted set, string, hash or nothing under `src`; weight keys
`w_<elem>` that are numbers, words or missing; hashes `h_<elem>` with a
field `f`; objects `o_<elem>`; sometimes an existing `dst`), then sends
the same random SORT commands (BY, LIMIT, GET, ASC/DESC, ALPHA, STORE,
SORT_RO, stray options) to both and compares the replies, and after a
STORE the destination's contents, type and TTL.

A difference in order only (same elements) is counted as "order" and is
printed with -v: Redis leaves these to its hash tables (elements tied
under ALPHA BY, a set's elements under BY without `*`). Everything else is
"content" and printed always. Needs the `redis` package (pip install
redis). Usage:

    python3 scripts/difftest_sort.py --redis 16379 --basalt 16380 --seed 1 [-v]

It runs FLUSHALL on both servers.
"""
import argparse
import random

import redis


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", type=int, default=16379)
    ap.add_argument("--basalt", type=int, default=16380)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("-v", action="store_true", help="print order-only differences too")
    args = ap.parse_args()
    R = redis.Redis(port=args.redis)
    B = redis.Redis(port=args.basalt)
    rng = random.Random(args.seed)
    stats = {"commands": 0, "order": 0, "content": 0}

    def run(c, *a):
        try:
            return ("ok", c.execute_command(*a))
        except redis.ResponseError as e:
            return ("err", str(e))

    def both(context, *a):
        stats["commands"] += 1
        r, b = run(R, *a), run(B, *a)
        if r == b:
            return
        order_only = (r[0] == b[0] == "ok" and isinstance(r[1], list)
                      and sorted(r[1], key=repr) == sorted(b[1], key=repr))
        kind = "order" if order_only else "content"
        stats[kind] += 1
        if kind == "content" or args.v:
            print("DIFF", kind, context, a, "\n  redis ", r, "\n  basalt", b)

    for _ in range(args.rounds):
        for c in (R, B):
            c.flushall()
        n = rng.randint(0, 12)
        if rng.random() < 0.5:
            elems = [str(rng.randint(-30, 30)) for _ in range(n)]
        else:
            elems = [rng.choice([str(rng.randint(-20, 20)), "%.2f" % rng.uniform(-5, 5),
                                 rng.choice(["a", "b", "x1", "", " 3", "1e3", "inf", "-inf",
                                             "0x1p3", "007"])]) for _ in range(n)]
        kind = rng.choice(["list", "set", "zset", "string", "hash", "none"])
        scores = {m: rng.randint(0, 5) for m in elems}
        for c in (R, B):
            if kind == "list" and elems:
                c.rpush("src", *elems)
            if kind == "set" and elems:
                c.sadd("src", *elems)
            if kind == "zset" and elems:
                c.zadd("src", scores)
            if kind == "string":
                c.set("src", "v")
            if kind == "hash":
                c.hset("src", "f", "v")
        for m in set(elems):
            w = rng.choice([str(rng.randint(-5, 5)), "abc", None, "%.1f" % rng.uniform(0, 3)])
            h = rng.choice(["1", "2", "z", "10"]) if rng.random() < 0.7 else None
            for c in (R, B):
                if w is not None:
                    c.set("w_" + m, w)
                if h is not None:
                    c.hset("h_" + m, "f", h)
                c.set("o_" + m, "obj" + m)
        old_list, old_str = rng.random() < 0.3, rng.random() < 0.2
        for c in (R, B):
            if old_list:
                c.rpush("dst", "old")
            if old_str:
                c.set("dst", "str")
        for _ in range(8):
            cmd = ["SORT_RO" if rng.random() < 0.15 else "SORT", "src"]
            if rng.random() < 0.4:
                cmd += [rng.choice(["BY", "by"]),
                        rng.choice(["w_*", "h_*->f", "nosort", "h_*->", "w_*x", "#", "h_*->g"])]
            if rng.random() < 0.4:
                cmd += ["LIMIT", str(rng.randint(-2, 6)), str(rng.randint(-2, 6))]
            for _ in range(rng.choice([0, 0, 1, 2])):
                cmd += ["GET", rng.choice(["#", "o_*", "w_*", "h_*->f", "fixed", "h_*->"])]
            if rng.random() < 0.4:
                cmd += [rng.choice(["ASC", "DESC"])]
            if rng.random() < 0.4:
                cmd += ["ALPHA"]
            if rng.random() < 0.25:
                cmd += ["STORE", "dst"]
            if rng.random() < 0.05:
                cmd += [rng.choice(["LIMIT", "BY", "bogus", "GET"])]
            context = (kind, cmd)
            both(context, *cmd)
            if "STORE" in cmd:
                both(context, "LRANGE", "dst", 0, -1)
                both(context, "TYPE", "dst")
                both(context, "TTL", "dst")
    print("%(commands)d commands: %(content)d content differences, %(order)d order-only" % stats)


if __name__ == "__main__":
    main()
