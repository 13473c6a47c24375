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
categories, tips, key specs, subcommand names and their order) and each
COMMAND DOCS field (summary, since, group, complexity, doc_flags,
deprecated_since, replaced_by, history, arguments), then the same for every
subcommand row of a container (`config|set`: the row inside COMMAND INFO
config, COMMAND INFO config|set, the `subcommands` map of COMMAND DOCS
config and COMMAND DOCS config|set). It then compares COMMAND LIST (with
`container|sub` names) and its FILTERBY forms, COMMAND COUNT, 63 GETKEYS
cases, and INFO commandstats / errorstats / latencystats (rows and percentile
labels) / LATENCY HISTOGRAM after the same commands
on both servers (subcommands counted as `config|get`), and lists the
commands only one server has. Differences that are intended are listed in
KNOWN and UNIMPLEMENTED_SUBCOMMANDS below (with the reason) and reported as
such; anything else is a failure (exit 1).

The second form writes the data Basalt serves for the Redis commands it
has (crates/basalt-server/src/commands/redis_commands.json), in a tagged
JSON form that keeps RESP3 types (`{"%": pairs}` a map, `{"~": items}` a
set, `{"+": s}` a simple string): for each command its COMMAND DOCS
(without subcommands), and COMMAND INFO's tips and key specs; for a
container also its flags, first/last/step, ACL categories and its
subcommands' names in Redis's order; and for each of those subcommands
(`name|sub`) its whole COMMAND INFO row (arity, flags, first/last/step,
ACL categories, tips, key specs) and its COMMAND DOCS.
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


def sub_rows(reply):
    """A COMMAND INFO row's subcommand rows, in the order sent."""
    subs = reply[9]
    return subs["~"] if isinstance(subs, dict) else subs


def info_fields(reply):
    name, arity, flags, first, last, step, cats, tips, specs, subs = reply
    return {
        "name": name,
        "arity": arity,
        "flags": plain(flags),
        "first/last/step": [first, last, step],
        "acl categories": plain(cats),
        "tips": plain(tips),
        "key specs": plain(specs),
        # Sorted: Redis lists a container's subcommands in the order of its
        # dict, whose hash seed is random per process (two redis-server runs
        # answer two orders), so only the set can be compared.
        "subcommands": sorted(s[0] for s in sub_rows(reply)),
        # Redis sends a container's subcommands as an array, and an empty
        # set for a command without any.
        "subcommands type": "array" if isinstance(subs, list) else "set",
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
KNOWN = {}

# Subcommands Redis 7.0.15 has that Basalt does not run (it answers
# "unknown subcommand"): COMMAND INFO/DOCS/LIST leave them out.
UNIMPLEMENTED_SUBCOMMANDS = {
    "config|rewrite": "Basalt has no redis.conf to rewrite (CONFIG REWRITE is missing)",
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
        if name not in redis_names or "|" in name:
            continue
        info = redis.call("COMMAND", "INFO", name)[0]
        docs = as_map(redis.call("COMMAND", "DOCS", name)).get(name)
        entry = {"tips": info[7], "key_specs": info[8]}
        if docs:
            entry["docs"] = {"%": [[k, v] for k, v in docs["%"] if k != "subcommands"]}
        subs = sub_rows(info)
        if subs:
            # A container: Redis's own row for it (Basalt's table keeps the
            # flags its code needs), and its subcommands in Redis's order.
            entry["flags"] = info[2]
            entry["keys"] = info[3:6]
            entry["acl_categories"] = info[6]
            entry["subcommands"] = [s[0].split("|", 1)[1] for s in subs]
        data[name] = entry
        # Subcommands: the whole COMMAND INFO row and the docs (COMMAND
        # GETKEYS also finds a container's keys through them).
        sub_docs = as_map(as_map(docs).get("subcommands"))
        for sub in subs:
            data[sub[0]] = {
                "arity": sub[1],
                "flags": sub[2],
                "keys": sub[3:6],
                "acl_categories": sub[6],
                "tips": sub[7],
                "key_specs": sub[8],
                "docs": sub_docs[sub[0]],
            }
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    print("wrote %d commands and subcommands to %s" % (len(data), path))


def doc_diffs(rd, bd):
    """(field, redis, basalt) for each COMMAND DOCS field that differs."""
    rd, bd = as_map(rd), as_map(bd)
    return [(k, plain(rd.get(k)), plain(bd.get(k))) for k in DOC_FIELDS if plain(rd.get(k)) != plain(bd.get(k))]


def info_diffs(r, b, prefix=""):
    """(field, redis, basalt) for each COMMAND INFO field that differs."""
    if r is None or b is None:
        return [] if r is b else [(prefix + "row", r and r[0], b and b[0])]
    ri, bi = info_fields(r), info_fields(b)
    return [(prefix + k, ri[k], bi[k]) for k in ri if ri[k] != bi[k]]


# COMMAND LIST FILTERBY cases; each compared over the names both servers have.
LIST_FILTERS = [
    ("pattern", "config*"), ("pattern", "CONFIG|S*"), ("pattern", "*|get"), ("pattern", "x*"),
    ("pattern", "*|*"), ("aclcat", "dangerous"), ("aclcat", "fast"), ("aclcat", "admin"),
    ("aclcat", "keyspace"), ("aclcat", "read"), ("aclcat", "slow"), ("aclcat", "scripting"),
    ("module", "nosuch"),
]

# Names COMMAND INFO / COMMAND DOCS answer (or not) beyond plain commands.
ODD_NAMES = [
    "config|get", "CONFIG|SET", "Object|Freq", "config|nosuch", "get|x", "object|", "|",
    "object|freq|x", "config|", "|get", "nosuch|get",
]

# Commands run on both servers (after CONFIG RESETSTAT) before INFO
# commandstats and LATENCY HISTOGRAM are compared (calls, rejected_calls
# and failed_calls per row; the calls and row names of the histograms).
STATS_CASES = [
    "config get hz", "config get maxmemory", "config", "config nosuch", "config get",
    "config set no-such-parameter 1", "object encoding difftest:nokey", "object",
    "object freq", "client id", "client getname", "slowlog len", "slowlog get 1",
    "latency histogram nosuch", "command count", "command info get", "command getkeys get k",
    "xinfo stream difftest:nokey", "memory usage difftest:nokey", "pubsub numpat",
    "script exists abc", "client nosuch", "get difftest:nokey",
]


def stats_rows(conn):
    rows = {}
    for line in conn.call("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, fields = line[len("cmdstat_"):].split(":", 1)
            f = dict(kv.split("=") for kv in fields.split(","))
            rows[name] = "calls=%s rejected_calls=%s failed_calls=%s" % (f["calls"], f["rejected_calls"], f["failed_calls"])
    return rows


def error_rows(conn):
    """INFO errorstats as {code: count}, with total_error_replies as "total"."""
    rows = {}
    for line in conn.call("INFO", "errorstats").splitlines():
        if line.startswith("errorstat_"):
            code, count = line[len("errorstat_"):].split(":", 1)
            rows[code] = count
    for line in conn.call("INFO", "stats").splitlines():
        if line.startswith("total_error_replies:"):
            rows["total"] = line.split(":", 1)[1]
    return rows


def latency_rows(conn):
    """INFO latencystats as {command: "p50,p99,p99.9"}: the rows and the
    percentile labels (the values are run times, which differ)."""
    rows = {}
    for line in conn.call("INFO", "latencystats").splitlines():
        if line.startswith("latency_percentiles_usec_"):
            name, fields = line[len("latency_percentiles_usec_"):].split(":", 1)
            rows[name] = ",".join(kv.split("=")[0] for kv in fields.split(",") if kv)
    return rows


def histogram_rows(conn, *names):
    return {k: as_map(v)["calls"] for k, v in as_map(conn.call("LATENCY", "HISTOGRAM", *names)).items()}


def stats_diff(redis, basalt):
    out = []
    for c in (redis, basalt):
        c.call("CONFIG", "RESETSTAT")
        for case in STATS_CASES:
            c.call(*case.split())
    r, b = stats_rows(redis), stats_rows(basalt)
    for name in sorted(set(r) | set(b)):
        if r.get(name) != b.get(name):
            out.append(("INFO commandstats", "cmdstat_" + name, "redis %s / basalt %s" % (r.get(name), b.get(name))))
    r, b = error_rows(redis), error_rows(basalt)
    if r != b:
        out.append(("INFO errorstats", "rows", "redis %s / basalt %s" % (json.dumps(r), json.dumps(b))))
    r, b = latency_rows(redis), latency_rows(basalt)
    if r != b:
        out.append(("INFO latencystats", "rows", "redis %s / basalt %s" % (json.dumps(r), json.dumps(b))))
    for c in (redis, basalt):
        c.call("CONFIG", "SET", "latency-tracking-info-percentiles", "0 12.5 99.99 100")
    r, b = latency_rows(redis), latency_rows(basalt)
    for c in (redis, basalt):
        c.call("CONFIG", "SET", "latency-tracking-info-percentiles", "50 99 99.9")
    if r != b:
        out.append(("INFO latencystats (0 12.5 99.99 100)", "rows", "redis %s / basalt %s" % (json.dumps(r), json.dumps(b))))
    for names in ([], ["config"], ["config|get", "nosuch", "client"], ["CONFIG|SET"]):
        r, b = histogram_rows(redis, *names), histogram_rows(basalt, *names)
        if r != b:
            out.append(("LATENCY HISTOGRAM %s" % " ".join(names), "rows", "redis %s / basalt %s" % (json.dumps(r), json.dumps(b))))
    return out


def diff(redis, basalt, verbose):
    rl, bl = set(command_names(redis)), set(command_names(basalt))
    rn = {n for n in rl if "|" not in n}
    bn = {n for n in bl if "|" not in n}
    both = sorted(rn & bn)
    failures, known = [], []

    def found(name, field, want, got):
        why = KNOWN.get((name, field)) or KNOWN.get(("*", field))
        row = (name, field, "redis %s / basalt %s" % (json.dumps(want)[:300], json.dumps(got)[:300]))
        (known if why else failures).append(row + ((why,) if why else ()))

    r_count = redis.call("COMMAND", "COUNT")
    b_count = basalt.call("COMMAND", "COUNT")
    if b_count != len(bn):
        found("*", "count", "COMMAND COUNT = top-level commands in LIST (%d)" % len(bn), b_count)
    if r_count != len(rn):
        found("*", "count(redis)", "COMMAND COUNT = top-level commands in LIST (%d)" % len(rn), r_count)
    all_b = basalt.call("COMMAND")
    if len(all_b) != len(bn):
        found("*", "COMMAND rows", len(bn), len(all_b))
    sub_count = 0
    for name in both:
        rinfo = redis.call("COMMAND", "INFO", name)[0]
        binfo = basalt.call("COMMAND", "INFO", name)[0]
        rdocs = as_map(as_map(redis.call("COMMAND", "DOCS", name)).get(name))
        bdocs = as_map(as_map(basalt.call("COMMAND", "DOCS", name)).get(name))
        # Basalt leaves out the subcommands it does not run.
        skipped = [s for s in info_fields(rinfo)["subcommands"] if s in UNIMPLEMENTED_SUBCOMMANDS]
        for s in skipped:
            if s in info_fields(binfo)["subcommands"]:
                found(s, "row", "not run by Basalt, so not listed", "listed")
            else:
                known.append((s, "row", "only redis lists it", UNIMPLEMENTED_SUBCOMMANDS[s]))
        rows_r = [row for row in sub_rows(rinfo) if row[0] not in skipped]
        rinfo = rinfo[:9] + [rows_r if isinstance(rinfo[9], list) else rinfo[9]]
        for field, want, got in info_diffs(rinfo, binfo) + doc_diffs(rdocs, bdocs):
            found(name, field, want, got)
        rsub_docs = {k: v for k, v in as_map(rdocs.get("subcommands")).items() if k not in skipped}
        bsub_docs = as_map(bdocs.get("subcommands"))
        if sorted(rsub_docs) != sorted(bsub_docs):
            found(name, "subcommands(docs)", sorted(rsub_docs), sorted(bsub_docs))
        # Each subcommand row: inside the container's row, asked by its
        # full name, and its docs both ways.
        brows = {row[0]: row for row in sub_rows(binfo)}
        for row in rows_r:
            sub = row[0]
            sub_count += 1
            for field, want, got in info_diffs(row, brows.get(sub)):
                found(sub, field, want, got)
            direct_r = redis.call("COMMAND", "INFO", sub)[0]
            direct_b = basalt.call("COMMAND", "INFO", sub)[0]
            for field, want, got in info_diffs(direct_r, direct_b, "COMMAND INFO %s: " % sub):
                found(sub, field, want, got)
            if direct_r != row:
                found(sub, "redis: INFO by full name = row in container", row, direct_r)
            if direct_b != brows.get(sub):
                found(sub, "INFO by full name = row in container", brows.get(sub), direct_b)
            for field, want, got in doc_diffs(rsub_docs.get(sub), bsub_docs.get(sub)):
                found(sub, field, want, got)
            d_r = redis.call("COMMAND", "DOCS", sub)
            d_b = basalt.call("COMMAND", "DOCS", sub)
            if plain(d_r) != plain(d_b):
                found(sub, "COMMAND DOCS %s" % sub, plain(d_r), plain(d_b))
    # COMMAND LIST: every name both have, subcommands included.
    want = {n for n in rl if n.split("|")[0] in bn and n not in UNIMPLEMENTED_SUBCOMMANDS}
    got = {n for n in bl if n.split("|")[0] in rn}
    if want != got:
        found("COMMAND LIST", "names", sorted(want - got), sorted(got - want))
    for what, arg in LIST_FILTERS:
        r = set(plain(redis.call("COMMAND", "LIST", "FILTERBY", what, arg))) & bl
        b = set(plain(basalt.call("COMMAND", "LIST", "FILTERBY", what, arg))) & rl
        if r != b:
            found("COMMAND LIST FILTERBY %s %s" % (what, arg), "names", sorted(r - b), sorted(b - r))
    for name in ODD_NAMES:
        for sub in ("INFO", "DOCS"):
            r, b = redis.call("COMMAND", sub, name), basalt.call("COMMAND", sub, name)
            if plain(r) != plain(b):
                found("COMMAND %s %s" % (sub, name), "reply", plain(r), plain(b))
    for case, sub, text in getkeys_diff(redis, basalt):
        failures.append(("COMMAND %s %s" % (sub, case), "reply", text))
    failures.extend(stats_diff(redis, basalt))
    print("redis %d commands, basalt %d, both %d" % (r_count, b_count, len(both)))
    print("subcommand rows compared: %d (each in its container's INFO and DOCS, and by full name)" % sub_count)
    print("COMMAND LIST names: redis %d, basalt %d; FILTERBY cases: %d" % (len(rl), len(bl), len(LIST_FILTERS)))
    print("COMMAND GETKEYS/GETKEYSANDFLAGS cases: %d" % len(GETKEYS_CASES))
    print("INFO commandstats / errorstats / latencystats / LATENCY HISTOGRAM after %d commands" % len(STATS_CASES))
    print("only in basalt: %s" % " ".join(sorted(bn - rn)))
    only_redis = sorted(rn - bn)
    print("only in redis (%d): %s" % (len(only_redis), " ".join(only_redis)))
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
