#!/usr/bin/env bash
# clprof.sh redis|basalt[:flags] test n : perf record the client (redis-benchmark) at P1
set -e
source "$(dirname "$0")/lib.sh"
kind=$1; t=$2; n=$3; bin=${BIN:-target/release/basalt}
name=${kind%%:*}; FLAGS=""; [[ $kind == *:* ]] && FLAGS=${kind#*:}
[[ $name == redis ]] && b=redis || b=$bin
start_server "$b"
perf record -g -e cpu-clock -F 4000 -o /tmp/basalt-perf-cl.$name.data timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d 100 -c 50 -P 1 -q 2>/dev/null | tr '\r' '\n' | grep -i "per second" | tail -1
stop_server
