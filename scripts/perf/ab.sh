#!/usr/bin/env bash
# ab.sh <bin|redis> <test> <P> <n> [prefill-test]: pinned (server CPU1, client CPU0), fresh server
set -e
source "$(dirname "$0")/lib.sh"
b=$1; t=$2; P=$3; n=$4; pre=$5
start_server "$b" 1
[[ -n $pre ]] && taskset -c 0 timeout 600 redis-benchmark -p $port -t $pre -n $n -r 1000000 -d ${D:-3} -c 50 -P 16 -q >/dev/null 2>&1
read u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
rps=$(taskset -c 0 timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d ${D:-3} -c 50 -P $P --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
read u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
python3 -c "print('%-28s %s P%s %10s rps  cpu %.2f us/op' % ('$(basename $b)','$t','$P','$rps',(($u1-$u0)+($s1-$s0))/$(getconf CLK_TCK)/$n*1e6))"
stop_server
