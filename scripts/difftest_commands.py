#!/usr/bin/env python3
"""COMMAND INFO / COMMAND DOCS side by side: Basalt vs redis-server 7.0.

Usage:
  python3 scripts/difftest_commands.py [--redis PORT] [--basalt PORT] [--verbose]
  python3 scripts/difftest_commands.py --write-data PATH [--redis PORT] [--basalt PORT]

Both servers must be running, e.g.
  redis-server --port 16793 --save '' --appendonly no --dir "$(mktemp -d)" &
  target/release/basalt --port 16781 --dir "$(mktemp -d)" --http-port 0 &

The first form walks every command both servers have and compares, over
RESP3, each COMMAND INFO field (arity, flags, first/last key and step, ACL
categories, tips, key specs, subcommand names) and each COMMAND DOCS field
(summary, since, group, complexity, doc_flags, deprecated_since,
replaced_by, history, arguments), then lists the commands only one server
has. Differences that are intended are listed in KNOWN below (with the
reason) and reported as such; anything else is a failure (exit 1).

The second form writes the data Basalt serves for the Redis commands it
has (crates/basalt-server/src/commands/redis_commands.json): for each, its
COMMAND DOCS (without subcommands), and COMMAND INFO's tips and
key specs, in a tagged JSON form that keeps RESP3 types (see `tagged`).
"""
import argparse
import json
import socket
import sys


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.s.makefile("rb")
        self.call("HELLO", "3")

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a.encode() if isinstance(a, str) else a
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.f.readline()
        if not line:
            raise EOFError("connection closed")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return {"+": rest.decode()}
        if t == b"-":
            return {"-": rest.decode()}
        if t == b":":
            return int(rest)
        if t == b"_":
            return None
        if t == b",":
            return {",": rest.decode()}
        if t == b"#":
            return rest == b"t"
        if t in (b"$", b"="):
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode("utf-8", "replace")
        if t in (b"*", b"~", b">"):
            n = int(rest)
            items = [self.read() for _ in range(n)]
            return {"~": items} if t == b"~" else items
        if t == b"%":
            n = int(rest)
            return {"%": [[self.read(), self.read()] for _ in range(n)]}
        raise ValueError("unexpected reply type %r" % line)


def as_map(v):
    """A tagged RESP3 map as a dict (keys are strings)."""
    return {k: val for k, val in v["%"]} if isinstance(v, dict) and "%" in v else {}


def plain(v):
    """A tagged value with the type tags removed (for comparison)."""
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        if "%" in v:
            return {json.dumps(plain(k)): plain(x) for k, x in v["%"]}
        if "~" in v:
            return sorted(json.dumps(plain(x)) for x in v["~"])
        return next(iter(v.values()))
    return v


def info_fields(reply):
    name, arity, flags, first, last, step, cats, tips, specs, subs = reply
    return {
        "arity": arity,
        "flags": plain(flags),
        "first/last/step": [first, last, step],
        "acl categories": plain(cats),
        "tips": plain(tips),
        "key specs": plain(specs),
        "subcommands": sorted(s[0] for s in (subs["~"] if isinstance(subs, dict) else subs)),
    }


DOC_FIELDS = [
    "summary",
    "since",
    "group",
    "complexity",
    "doc_flags",
    "deprecated_since",
    "replaced_by",
    "history",
    "arguments",
]

# (command, field) -> why Basalt differs on purpose.
CONTAINER_FLAGS = (
    "Basalt has no subcommand table: the container's flags carry what its "
    "subcommands need (refused in scripts, admin, allowed while loading)"
)
KNOWN = {
    ("*", "subcommands"): "Basalt's containers dispatch their subcommands in code; COMMAND INFO lists none",
    ("*", "subcommands(docs)"): "no subcommand docs (see above)",
    ("client", "flags"): CONTAINER_FLAGS,
    ("config", "flags"): CONTAINER_FLAGS,
    ("function", "flags"): CONTAINER_FLAGS,
    ("script", "flags"): CONTAINER_FLAGS,
    ("object", "flags"): CONTAINER_FLAGS,
    ("object", "first/last/step"): "OBJECT's subcommands take their key at 2; without a subcommand table the container says so",
}


# COMMAND GETKEYS / GETKEYSANDFLAGS cases compared reply for reply.
GETKEYS_CASES = [
    "get k", "set k v", "set k v get", "set k v nx get", "mset a 1 b 2", "del a b c",
    "lmove a b left right", "rpoplpush a b", "blmove a b left right 0",
    "zunionstore d 2 a b", "zunionstore d 2x a b", "zunion 2 a b", "zinterstore d 1 a",
    "sintercard 2 a b", "lmpop 2 a b left", "blmpop 0 2 a b left", "zmpop 1 a min",
    "eval s 0", "eval s 2 a b c", "evalsha s 1 a", "fcall f 1 k", "fcall_ro f 0",
    "xread streams a b 0 0", "xread count 1 streams a 0", "xreadgroup group g c streams a >",
    "sort k", "sort k store d", "sort k by w get g store d", "sort_ro k by w",
    "bitfield k get u8 0", "bitfield k set u8 0 1", "bitfield k overflow sat incrby u8 0 1",
    "bitfield_ro k get u8 0", "bitop and d a b", "georadius k 0 0 1 m store d",
    "georadius k 0 0 1 m", "geosearchstore d s fromlonlat 0 0 byradius 1 m",
    "copy a b", "rename a b", "smove a b m", "pfmerge d a b", "pfcount a b",
    "object encoding k", "xgroup create k g $", "memory usage k", "memory usage k samples 5",
    "ping", "get", "nosuch k", "hset h f v", "xadd s * f v", "watch a b", "touch a",
    "restore k 0 p", "dump k", "getex k persist", "lpos k e rank 1", "object",
    "object nosuch k", "object freq k", "xinfo stream k", "xgroup setid k g 0", "config get x",
]


def getkeys_diff(redis, basalt):
    out = []
    for case in GETKEYS_CASES:
        for sub in ("GETKEYS", "GETKEYSANDFLAGS"):
            args = ["COMMAND", sub] + case.split()
            r, b = redis.call(*args), basalt.call(*args)
            if r != b:
                out.append((case, sub, "redis %s / basalt %s" % (json.dumps(r)[:300], json.dumps(b)[:300])))
    return out


def command_names(c):
    return sorted(plain(c.call("COMMAND", "LIST")))


def write_data(redis, basalt, path):
    names = command_names(basalt) if basalt else command_names(redis)
    redis_names = set(command_names(redis))
    data = {}
    for name in names:
        if name not in redis_names:
            continue
        info = redis.call("COMMAND", "INFO", name)[0]
        docs = as_map(redis.call("COMMAND", "DOCS", name)).get(name)
        entry = {"tips": info[7], "key_specs": info[8]}
        if docs:
            entry["docs"] = {
                "%": [
                    [k, v]
                    for k, v in docs["%"]
                    if k != "subcommands"
                ]
            }
        subs = [s[0] for s in (info[9]["~"] if isinstance(info[9], dict) else info[9])]
        if subs:
            entry["subcommands"] = sorted(s.split("|", 1)[1] for s in subs)
        data[name] = entry
        # Subcommands: arity, tips and key specs (COMMAND GETKEYS finds a
        # container's keys through its subcommand's specs).
        for sub in (info[9]["~"] if isinstance(info[9], dict) else info[9]):
            data[sub[0]] = {"arity": sub[1], "tips": sub[7], "key_specs": sub[8]}
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    print("wrote %d commands to %s" % (len(data), path))


def diff(redis, basalt, verbose):
    rn, bn = set(command_names(redis)), set(command_names(basalt))
    both = sorted(rn & bn)
    failures, known = [], []
    r_count = redis.call("COMMAND", "COUNT")
    b_count = basalt.call("COMMAND", "COUNT")
    if b_count != len(bn):
        failures.append(("*", "count", "COMMAND COUNT %d but LIST has %d" % (b_count, len(bn))))
    for name in both:
        ri = info_fields(redis.call("COMMAND", "INFO", name)[0])
        bi = info_fields(basalt.call("COMMAND", "INFO", name)[0])
        rd = as_map(as_map(redis.call("COMMAND", "DOCS", name)).get(name))
        bd = as_map(as_map(basalt.call("COMMAND", "DOCS", name)).get(name))
        diffs = [(k, ri[k], bi[k]) for k in ri if ri[k] != bi[k]]
        for k in DOC_FIELDS:
            if plain(rd.get(k)) != plain(bd.get(k)):
                diffs.append((k, plain(rd.get(k)), plain(bd.get(k))))
        if "subcommands" in rd and "subcommands" not in bd:
            diffs.append(("subcommands(docs)", "%d" % len(rd["subcommands"]["%"]), "none"))
        for field, want, got in diffs:
            why = KNOWN.get((name, field)) or KNOWN.get(("*", field))
            row = (name, field, "redis %s / basalt %s" % (json.dumps(want)[:300], json.dumps(got)[:300]))
            (known if why else failures).append(row + ((why,) if why else ()))
    for case, sub, text in getkeys_diff(redis, basalt):
        failures.append(("COMMAND %s %s" % (sub, case), "reply", text))
    print("redis %d commands, basalt %d, both %d" % (r_count, b_count, len(both)))
    print("COMMAND GETKEYS/GETKEYSANDFLAGS cases: %d" % len(GETKEYS_CASES))
    print("only in basalt: %s" % " ".join(sorted(bn - rn)))
    only_redis = sorted(n for n in rn - bn if "|" not in n)
    subs = len([n for n in rn - bn if "|" in n])
    print("only in redis (%d): %s" % (len(only_redis), " ".join(only_redis)))
    print("redis's COMMAND LIST also names %d subcommands (container|sub); Basalt's does not" % subs)
    print("known differences: %d" % len(known))
    if verbose:
        for k in known:
            print("  KNOWN %s %s: %s (%s)" % k)
    print("unexpected differences: %d" % len(failures))
    for f in failures:
        print("  DIFF %s %s: %s" % f[:3])
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redis", type=int, default=16793)
    ap.add_argument("--basalt", type=int, default=16781)
    ap.add_argument("--write-data")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    redis = Conn(a.redis)
    if a.write_data:
        try:
            basalt = Conn(a.basalt)
        except OSError:
            basalt = None
        write_data(redis, basalt, a.write_data)
        return 0
    return diff(redis, Conn(a.basalt), a.verbose)


if __name__ == "__main__":
    sys.exit(main())
