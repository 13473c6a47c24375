#!/usr/bin/env bash
# usage: p1c.sh redis|basalt[:flags] test P n -> rps, server cpu/op, client cpu/op, client epoll_wait/op
set -e
source "$(dirname "$0")/lib.sh"
kind=$1; t=$2; P=$3; n=$4; bin=${BIN:-target/release/basalt}
name=${kind%%:*}; FLAGS=""; [[ $kind == *:* ]] && FLAGS=${kind#*:}
[[ $name == redis ]] && b=redis || b=$bin
start_server "$b"
if [[ $t == get ]]; then timeout 600 redis-benchmark -p $port -t set -n 1000000 -r 1000000 -d 100 -c 50 -P 16 -q >/dev/null; fi
cpu() { awk '{print $14, $15}' /proc/$pid/stat; }
read u0 s0 < <(cpu)
perf stat -x, -o /tmp/basalt-perf-pstat.$$ -e syscalls:sys_enter_epoll_wait,task-clock timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d 100 -c 50 -P $P -q 2>/dev/null | tr '\r' '\n' | grep -i "requests per second" | tail -1 | sed 's/.*: \([0-9.]*\) requests.*/\1/' > /tmp/basalt-perf-rps.$$
read u1 s1 < <(cpu)
rps=$(cat /tmp/basalt-perf-rps.$$)
ep=$(grep epoll_wait /tmp/basalt-perf-pstat.$$ | cut -d, -f1); tc=$(grep task-clock /tmp/basalt-perf-pstat.$$ | cut -d, -f1)
tck=$(getconf CLK_TCK)
python3 -c "u=($u1-$u0)/$tck; s=($s1-$s0)/$tck; print('%-22s %s P%s %9s rps  srv %.2f us/op  cli %.2f us/op  cli_epoll %.3f/op' % ('$kind','$t','$P','$rps',(u+s)/$n*1e6, $tc*1e3/$n, $ep/$n))"
stop_server; rm -f /tmp/basalt-perf-pstat.$$ /tmp/basalt-perf-rps.$$
