#!/usr/bin/env bash
# blk.sh <bin|redis> [consumers] [n]: blocked-consumer throughput. `consumers`
# clients loop on BLPOP q 0 (redis-benchmark) while 4 producers pipeline
# RPUSH q x (P=16); prints the elements popped per second (the consumers'
# rate) and the server's CPU per element. Fresh server, unpinned.
set -e
source "$(dirname "$0")/lib.sh"
b=$1; c=${2:-20}; n=${3:-200000}
start_server "$b"
read u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
timeout 300 redis-benchmark -p $port -c $c -n $n --csv BLPOP q 0 >/tmp/blk.$$ 2>/dev/null &
cons=$!
sleep 0.3
timeout 300 redis-benchmark -p $port -c 4 -n $n -P 16 -q RPUSH q x >/dev/null 2>&1
wait $cons
read u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
rps=$(tail -1 /tmp/blk.$$ | cut -d, -f2 | tr -d '"'); rm -f /tmp/blk.$$
python3 -c "print('%-24s BLPOP c=%s %10s pops/s  cpu %.2f us/pop' % ('$(basename $b)','$c','$rps',(($u1-$u0)+($s1-$s0))/$(getconf CLK_TCK)/$n*1e6))"
stop_server
