#!/usr/bin/env bash
# cs.sh redis|<bin> test n: voluntary/involuntary context switches per request, per thread
set -e
b=$1; t=$2; n=$3
port=$((20000 + RANDOM % 20000)); dir=$(mktemp -d /tmp/basalt-perf.XXXX)
if [[ $b == redis ]]; then redis-server --port $port --dir $dir --appendonly yes --appendfsync everysec --save '' >/dev/null 2>&1 &
else $b --port $port --dir $dir --http-port 0 $FLAGS >/dev/null 2>&1 & fi
pid=$!
for i in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p $port ping >/dev/null 2>&1 || { echo "$0: server on port $port did not answer" >&2; kill $pid 2>/dev/null; exit 1; }
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
kill $pid; wait $pid 2>/dev/null || true; rm -rf $dir /tmp/basalt-perf-cs0.$$ /tmp/basalt-perf-cs1.$$
