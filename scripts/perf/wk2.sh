#!/usr/bin/env bash
# wk2.sh redis|<bin> test n : which tasks are woken during a P1 run
set -e
b=$1; t=$2; n=$3
port=$((20000 + RANDOM % 20000)); dir=$(mktemp -d /tmp/basalt-perf.XXXX)
if [[ $b == redis ]]; then redis-server --port $port --dir $dir --appendonly yes --appendfsync everysec --save '' >/dev/null 2>&1 &
else $b --port $port --dir $dir --http-port 0 $FLAGS >/dev/null 2>&1 & fi
pid=$!
for i in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p $port ping >/dev/null 2>&1 || { echo "$0: server on port $port did not answer" >&2; kill $pid 2>/dev/null; exit 1; }
perf record -a -e sched:sched_wakeup -o /tmp/basalt-perf-wk2.data timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d 100 -c 50 -P 1 -q 2>/dev/null | tr '\r' '\n' | grep "per second" | tail -1
perf script -i /tmp/basalt-perf-wk2.data -F comm,trace 2>/dev/null | awk '{for(i=1;i<=NF;i++) if($i ~ /^comm=/) {print $1, "->", $i}}' | sed 's/comm=//' | sort | uniq -c | sort -rn | head -12
kill $pid; wait $pid 2>/dev/null || true; rm -rf $dir
