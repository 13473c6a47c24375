#!/usr/bin/env bash
# sort_by.sh <bin>: SORT s BY weight_* LIMIT 0 10 over 1,000 members, --read-residency check
set -e
source "$(dirname "$0")/lib.sh"
FLAGS="--read-residency check" start_server "$1"
python3 - $port <<'PY'
import redis,sys
r=redis.Redis(port=int(sys.argv[1]))
p=r.pipeline(transaction=False)
for i in range(1000):
    p.sadd("s", i); p.set(f"weight_{i}", (i*7919)%1000)
p.execute()
PY
redis-benchmark -p $port -n 20000 -c 10 -q SORT s BY 'weight_*' LIMIT 0 10 2>/dev/null | tr '\r' '\n' | grep "per second" | tail -1
stop_server
