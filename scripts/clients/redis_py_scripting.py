#!/usr/bin/env python3
"""Real client, real server: redis-py's scripting users against Basalt.

Starts the Basalt binary on an ephemeral 127.0.0.1 port in a temporary
directory (or uses --port), then runs, unchanged, what applications do:

  * redis-py's Lock (its Lua scripts via EVALSHA, falling back to EVAL on
    NOSCRIPT): acquire, extend, reacquire, release, ownership checks,
    timeout expiry, blocking acquire, and contention between threads (a
    non-atomic read-modify-write guarded by the lock must lose no update);
  * a token-bucket rate limiter registered with register_script;
  * scripts inside a pipeline, and Script objects after SCRIPT FLUSH;
  * a function library called through FCALL / FCALL_RO.

Every loop is bounded in count and time. Exit status 0 when all pass.

Usage: python3 scripts/clients/redis_py_scripting.py [--binary PATH] [--port N]
(CI: `pip install redis==8.1.0` first; see .ci/run.)
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import redis
from redis.exceptions import LockError, LockNotOwnedError

CHECKS = []


def check(name):
    def wrap(f):
        CHECKS.append((name, f))
        return f
    return wrap


@check("lock: acquire, owned, extend, reacquire, release")
def lock_basics(r):
    lock = r.lock("res:basic", timeout=5)
    assert lock.acquire(blocking=False)
    assert lock.owned() and lock.locked()
    assert not r.lock("res:basic", timeout=5).acquire(blocking=False), "held by another"
    assert lock.extend(10)
    assert 10_000 < r.pttl("res:basic") <= 15_000, r.pttl("res:basic")
    assert lock.extend(3, replace_ttl=True)
    assert r.pttl("res:basic") <= 3_000
    assert lock.reacquire()
    assert 4_000 < r.pttl("res:basic") <= 5_000
    lock.release()
    assert not lock.locked()
    try:
        lock.release()
        raise AssertionError("releasing an unlocked lock must fail")
    except LockError:
        pass


@check("lock: another owner's token cannot release or extend")
def lock_not_owned(r):
    lock = r.lock("res:owned", timeout=5)
    assert lock.acquire(blocking=False)
    r.set("res:owned", "someone-else", px=5000)
    for op in (lambda: lock.extend(5), lock.reacquire, lock.release):
        try:
            op()
            raise AssertionError("an operation on a stolen lock succeeded")
        except LockNotOwnedError:
            pass
    assert r.get("res:owned") == b"someone-else"


@check("lock: expires after its timeout, blocking acquire waits for it")
def lock_timeout(r):
    first = r.lock("res:ttl", timeout=0.3)
    assert first.acquire(blocking=False)
    second = r.lock("res:ttl", timeout=5, blocking_timeout=3, sleep=0.02)
    started = time.monotonic()
    assert second.acquire(), "the lock never expired"
    waited = time.monotonic() - started
    assert 0.1 < waited < 3, waited
    assert not first.owned() and second.owned()
    second.release()
    third = r.lock("res:ttl", timeout=5, blocking_timeout=0.2, sleep=0.02)
    holder = r.lock("res:ttl", timeout=5)
    assert holder.acquire(blocking=False)
    assert not third.acquire(), "blocking_timeout elapsed while held"
    holder.release()


@check("lock: 8 threads x 40 guarded increments lose nothing")
def lock_contention(r):
    r.delete("counter")
    threads, rounds = 8, 40
    errors = []
    deadline = time.monotonic() + 60

    def work():
        c = redis.Redis(connection_pool=r.connection_pool)
        try:
            for _ in range(rounds):
                if time.monotonic() > deadline:
                    errors.append("deadline")
                    return
                with c.lock("res:counter", timeout=10, blocking_timeout=30, sleep=0.001):
                    v = int(c.get("counter") or 0)
                    c.set("counter", v + 1)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(90)
    assert not errors, errors
    assert int(r.get("counter")) == threads * rounds, r.get("counter")


TOKEN_BUCKET = """
-- KEYS[1] bucket; ARGV: capacity, refill per second, now (ms), cost
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + (now - ts) * rate / 1000)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / rate * 1000) + 1000)
return {allowed, tostring(tokens)}
"""


@check("rate limiter: a token bucket script allows, refuses, refills")
def token_bucket(r):
    limit = r.register_script(TOKEN_BUCKET)
    now = 1_000_000
    results = [limit(keys=["rl:user"], args=[5, 10, now, 1])[0] for _ in range(7)]
    assert results == [1, 1, 1, 1, 1, 0, 0], results
    # 300 ms later: 3 tokens back.
    later = [limit(keys=["rl:user"], args=[5, 10, now + 300, 1])[0] for _ in range(4)]
    assert later == [1, 1, 1, 0], later
    assert r.hget("rl:user", "tokens") is not None and r.pttl("rl:user") > 0
    # After SCRIPT FLUSH the Script object reloads itself (NOSCRIPT -> EVAL).
    r.script_flush()
    assert limit(keys=["rl:other"], args=[1, 1, now, 1])[0] == 1


@check("pipeline: 500 EVALSHA and EVAL in one round trip")
def pipeline(r):
    incr = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    r.delete("p:n")
    with r.pipeline(transaction=False) as p:
        for i in range(250):
            incr(keys=["p:n"], args=[1], client=p)
            p.eval("return redis.call('GET', KEYS[1])", 1, "p:n")
        replies = p.execute()
    assert replies[-2] == 250 and replies[-1] == b"250", replies[-2:]
    with r.pipeline(transaction=True) as p:
        p.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, "p:tx", "v")
        p.get("p:tx")
        assert p.execute() == [b"OK", b"v"]


@check("functions: FUNCTION LOAD, FCALL, FCALL_RO, LIST, DELETE")
def functions(r):
    r.function_flush()
    code = (
        "#!lua name=counters\n"
        "redis.register_function('bump', function(keys, args)\n"
        "  return redis.call('INCRBY', keys[1], args[1]) end)\n"
        "redis.register_function{function_name='peek', callback=function(keys)\n"
        "  return redis.call('GET', keys[1]) end, flags={'no-writes'}}\n"
    )
    assert r.function_load(code) in (b"counters", "counters")
    assert r.fcall("bump", 1, "f:n", 5) == 5
    assert r.fcall_ro("peek", 1, "f:n") == b"5"
    libs = r.function_list()
    assert libs and libs[0][1] in (b"counters", "counters"), libs
    r.function_delete("counters")
    try:
        r.fcall("bump", 1, "f:n", 1)
        raise AssertionError("a deleted function ran")
    except redis.ResponseError as e:
        assert "Function not found" in str(e)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/debug/basalt")
    ap.add_argument("--port", type=int, help="use a running server instead")
    args = ap.parse_args()
    proc, tmp = None, None
    port = args.port
    if port is None:
        tmp = tempfile.mkdtemp(prefix="basalt-redis-py-")
        port = free_port()
        proc = subprocess.Popen(
            [args.binary, "--port", str(port), "--http-port", "0", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port, socket_timeout=30)
        deadline = time.monotonic() + 30
        while True:
            try:
                r.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        failed = 0
        for name, f in CHECKS:
            r.flushall()
            try:
                f(r)
                print(f"ok    {name}")
            except Exception as e:  # noqa: BLE001 - reported
                failed += 1
                print(f"FAIL  {name}: {e!r}")
        print(f"{len(CHECKS) - failed}/{len(CHECKS)} passed (redis-py {redis.__version__})")
        return 1 if failed else 0
    finally:
        if proc:
            proc.terminate()
            proc.wait(10)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
