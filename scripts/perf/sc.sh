#!/usr/bin/env bash
# sc.sh redis|<bin> test n P: server syscalls per request at full speed (perf stat -p)
set -e
b=$1; t=$2; n=$3; P=${4:-1}
port=$((20000 + RANDOM % 20000)); dir=$(mktemp -d /tmp/basalt-perf.XXXX)
if [[ $b == redis ]]; then redis-server --port $port --dir $dir --appendonly yes --appendfsync everysec --save '' >/dev/null 2>&1 &
else $b --port $port --dir $dir --http-port 0 $FLAGS >/dev/null 2>&1 & fi
pid=$!
for i in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p $port ping >/dev/null 2>&1 || { echo "$0: server on port $port did not answer" >&2; kill $pid 2>/dev/null; exit 1; }
perf stat -x, -o /tmp/basalt-perf-sc.$$ -e syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_sched_yield,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_read,syscalls:sys_enter_write,context-switches -p $pid &
sp=$!; sleep 0.2
timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d 100 -c 50 -P $P -q 2>/dev/null | tr '\r' '\n' | grep "per second" | tail -1
kill -INT $sp; wait $sp 2>/dev/null || true
awk -F, -v n=$n '$1 ~ /^[0-9]/ {printf "  %-36s %.4f/req\n", $3, $1/n}' /tmp/basalt-perf-sc.$$
kill $pid; wait $pid 2>/dev/null || true; rm -rf $dir /tmp/basalt-perf-sc.$$
