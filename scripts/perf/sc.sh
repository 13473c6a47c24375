#!/usr/bin/env bash
# sc.sh redis|<bin> test n P: server syscalls per request at full speed (perf stat -p)
set -e
source "$(dirname "$0")/lib.sh"
b=$1; t=$2; n=$3; P=${4:-1}
start_server "$b"
perf stat -x, -o /tmp/basalt-perf-sc.$$ -e syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_sched_yield,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_read,syscalls:sys_enter_write,context-switches -p $pid &
sp=$!; sleep 0.2
timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d 100 -c 50 -P $P -q 2>/dev/null | tr '\r' '\n' | grep "per second" | tail -1
kill -INT $sp; wait $sp 2>/dev/null || true
awk -F, -v n=$n '$1 ~ /^[0-9]/ {printf "  %-36s %.4f/req\n", $3, $1/n}' /tmp/basalt-perf-sc.$$
stop_server; rm -f /tmp/basalt-perf-sc.$$
