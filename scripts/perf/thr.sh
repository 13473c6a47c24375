#!/usr/bin/env bash
# thr.sh <bin> <prefill-test> <test> <n> [P]: per-thread server CPU during the test (unpinned)
set -e
source "$(dirname "$0")/lib.sh"
b=$1; pre=$2; t=$3; n=$4; P=${5:-16}
start_server "$b"
[[ -n $pre ]] && timeout 600 redis-benchmark -p $port -t $pre -n $n -r 1000000 -d 100 -c 50 -P 16 -q >/dev/null 2>&1
snap() { for f in /proc/$pid/task/*; do echo "$(cat $f/comm | tr ' ' _) $(awk '{print $14+$15}' $f/stat)"; done | sort; }
snap > /tmp/basalt-perf-thr0.$$
rps=$(timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d 100 -c 50 -P $P --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
snap > /tmp/basalt-perf-thr1.$$
echo "$t P$P $rps rps"
python3 - /tmp/basalt-perf-thr0.$$ /tmp/basalt-perf-thr1.$$ $n <<'PY'
import sys,collections
def rd(p):
    d=collections.Counter()
    for l in open(p):
        k,v=l.split(); d[k]+=int(v)
    return d
a,b=rd(sys.argv[1]),rd(sys.argv[2]); n=int(sys.argv[3])
tot=0
for k in sorted(b):
    dv=b[k]-a.get(k,0); tot+=dv
    if dv: print('  %-22s %.2f us/op' % (k, dv/100/n*1e6))
print('  %-22s %.2f us/op' % ('total', tot/100/n*1e6))
PY
stop_server; rm -f /tmp/basalt-perf-thr0.$$ /tmp/basalt-perf-thr1.$$
