#!/usr/bin/env bash
# clprof.sh redis|basalt[:flags] test n : perf record the client (redis-benchmark) at P1
set -e
kind=$1; t=$2; n=$3; bin=${BIN:-target/release/basalt}
port=$((20000 + RANDOM % 20000)); dir=$(mktemp -d /tmp/basalt-perf.XXXX)
name=${kind%%:*}; flags=""; [[ $kind == *:* ]] && flags=${kind#*:}
if [[ $name == redis ]]; then
  redis-server --port $port --dir $dir --appendonly yes --appendfsync everysec --save '' --daemonize no >/dev/null 2>&1 &
else
  $bin --port $port --dir $dir --http-port 0 $flags >/dev/null 2>&1 &
fi
pid=$!
for i in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p $port ping >/dev/null 2>&1 || { echo "$0: server on port $port did not answer" >&2; kill $pid 2>/dev/null; exit 1; }
perf record -g -e cpu-clock -F 4000 -o /tmp/basalt-perf-cl.$name.data timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d 100 -c 50 -P 1 -q 2>/dev/null | tr '\r' '\n' | grep -i "per second" | tail -1
kill $pid; wait $pid 2>/dev/null || true; rm -rf $dir
