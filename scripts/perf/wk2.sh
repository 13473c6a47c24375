#!/usr/bin/env bash
# wk2.sh redis|<bin> test n : which tasks are woken during a P1 run
set -e
source "$(dirname "$0")/lib.sh"
b=$1; t=$2; n=$3
start_server "$b"
perf record -a -e sched:sched_wakeup -o /tmp/basalt-perf-wk2.data timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d 100 -c 50 -P 1 -q 2>/dev/null | tr '\r' '\n' | grep "per second" | tail -1
perf script -i /tmp/basalt-perf-wk2.data -F comm,trace 2>/dev/null | awk '{for(i=1;i<=NF;i++) if($i ~ /^comm=/) {print $1, "->", $i}}' | sed 's/comm=//' | sort | uniq -c | sort -rn | head -12
stop_server
