#!/usr/bin/env python3
"""Random command sequences run in MULTI/EXEC chunks against redis-server
and Basalt side by side, comparing every queued command's reply inside
EXEC (and, for the chunks sent outside a transaction, each reply).

Reuses scripts/difftest.py's generators and reply normalisation. Start the
two servers first, for example with Basalt reading everything through its
cold paths:

  redis-server --port 16379 --save "" &
  target/release/basalt --port 16380 --http-port 0 --dir /tmp/b \\
      --read-residency all-cold --data-file-size 64kb &
  python3 scripts/difftest_tx.py --families hash,string,list,keys --seeds 150 --len 120

Prints the first divergences, the totals and Basalt's cold-read counters.
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import difftest as d  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis", type=int, default=16379)
    ap.add_argument("--basalt", type=int, default=16380)
    ap.add_argument("--families", default="hash,string,list,keys")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--len", type=int, default=100)
    ap.add_argument("--max-examples", type=int, default=5)
    a = ap.parse_args()
    r, b = d.Conn(a.redis), d.Conn(a.basalt)
    fams = a.families.split(",")
    ncmd = ntx = divs = 0

    def diverged(kind, seed, what, x, y):
        nonlocal divs
        divs += 1
        if divs <= a.max_examples:
            print(kind, "seed", seed, what, x, y)

    for seed in range(a.seeds):
        rnd = random.Random(seed)
        r.call("FLUSHALL")
        b.call("FLUSHALL")
        seq = [d.gen_cmd(rnd, fams) for _ in range(a.len)]
        i = 0
        while i < len(seq):
            n = rnd.randint(1, 8)
            chunk = seq[i:i + n]
            i += n
            if rnd.random() < 0.3:
                # Outside a transaction: each command on its own.
                for cmd in chunk:
                    rr, br = r.call(*cmd), b.call(*cmd)
                    ncmd += 1
                    if d.normalize(cmd, rr) != d.normalize(cmd, br):
                        diverged("plain", seed, d.cmdstr(cmd), rr, br)
                continue
            ntx += 1
            r.call("MULTI")
            b.call("MULTI")
            for cmd in chunk:
                r.call(*cmd)
                b.call(*cmd)
                ncmd += 1
            rr, br = r.call("EXEC"), b.call("EXEC")
            if rr[0] == "*" and br[0] == "*" and len(rr[1]) == len(br[1]) == len(chunk):
                for cmd, x, y in zip(chunk, rr[1], br[1]):
                    if d.normalize(cmd, x) != d.normalize(cmd, y):
                        diverged("in EXEC", seed, d.cmdstr(cmd), x, y)
            elif d.canon(rr) != d.canon(br):
                diverged("EXEC", seed, [d.cmdstr(c) for c in chunk], rr, br)
    info = b.call("INFO", "stats")[1].decode()
    cold = [line for line in info.split("\r\n") if "staged" in line or "io_uring" in line]
    print(f"{ncmd} commands, {ntx} transactions, {divs} divergences; Basalt: {', '.join(cold)}")
    sys.exit(1 if divs else 0)


if __name__ == "__main__":
    main()
