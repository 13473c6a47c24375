#!/usr/bin/env bash
# cs.sh redis|<bin> test n: voluntary/involuntary context switches per request, per thread
set -e
source "$(dirname "$0")/lib.sh"
b=$1; t=$2; n=$3
start_server "$b"
snap() { for f in /proc/$pid/task/*; do echo "$(cat $f/comm | tr ' ' _) $(awk '/^voluntary/{v=$2} /^nonvoluntary/{nv=$2} END{print v, nv}' $f/status)"; done; }
snap > /tmp/basalt-perf-cs0.$$
timeout 600 redis-benchmark -p $port -t $t -n $n -r 1000000 -d 100 -c 50 -P 1 -q 2>/dev/null | tr '\r' '\n' | grep "per second" | tail -1
snap > /tmp/basalt-perf-cs1.$$
python3 - /tmp/basalt-perf-cs0.$$ /tmp/basalt-perf-cs1.$$ $n <<'PY'
import sys,collections
def rd(p):
    d=collections.defaultdict(lambda:[0,0])
    for l in open(p):
        k,v,nv=l.split(); d[k][0]+=int(v); d[k][1]+=int(nv)
    return d
a,b=rd(sys.argv[1]),rd(sys.argv[2]); n=int(sys.argv[3])
for k in sorted(b):
    dv=b[k][0]-a[k][0]; dn=b[k][1]-a[k][1]
    if dv or dn: print('  %-20s vol %.4f/req  invol %.4f/req' % (k, dv/n, dn/n))
PY
stop_server; rm -f /tmp/basalt-perf-cs0.$$ /tmp/basalt-perf-cs1.$$
