#!/bin/bash
# Runs on the lent multi-core machine, from the repository root, after
# scripts/device/pack.sh here (carry [".dev"]):
#   bash scripts/device/run.sh env      machine facts only
#   bash scripts/device/run.sh group    3-node group vs redis (issue 21), 4 client threads
#   bash scripts/device/run.sh group1   the same, SET only, one client thread
#   bash scripts/device/run.sh inflight the group alone, SET P=16, --raft-in-flight 4, 16, 64
#   bash scripts/device/run.sh inflight4 the same with 4 client threads (4 and 64), and a single node
#   bash scripts/device/run.sh apply    the group alone, SET P=16, 4 client threads, --raft-apply-threads
#                                        1, 4 and 8 alternating (twice), and a single node for the ratio
#   bash scripts/device/run.sh rounds   the group, SET P=16, 4 client threads, 4 and 1 apply threads, with
#                                        each node's basalt_raft_* means (where a write's time goes)
#   bash scripts/device/run.sh rthreads the group alone, SET P=1 and 16, 4 client threads, --raft-threads
#                                        1 and 4 alternating (twice), with CPU per request per node
#   bash scripts/device/run.sh mix      cold GETs with 10 % SETs at 4.1x a 512 MiB cgroup, one round
#   bash scripts/device/run.sh small    cold GETs of 1 KiB values at 4x a 512 MiB cgroup, one round
#   bash scripts/device/run.sh smallq   1 KiB cold GETs as in small: the default (32 reader threads), the
#                                        rings, 64 reader threads
#   bash scripts/device/run.sh sweep    cold GETs at 1x, 2x, 4x and 8x a 512 MiB cgroup, the default
#                                        binary, one round (issue 23's plot)
#   bash scripts/device/run.sh warm     single node SET/GET P=16 vs redis, one client thread
#   bash scripts/device/run.sh cold     cold GETs at 4.1x a 512 MiB cgroup, rings vs reader threads
#   bash scripts/device/run.sh coldqd   cold GETs at P=1, rings vs 32 and 64 reader threads, with the
#                                        disk's own mean read latency (is the gap the disk's queue?)
#   bash scripts/device/run.sh sched    scheduler wake-up delays of a single node and of a group under SET
#   bash scripts/device/run.sh schedfp  the same with a CPU profile of each, from a frame-pointer build
#                                        carried as .dev/basalt-fp (reports in $OUT/profile)
#   bash scripts/device/run.sh coldauto cold GETs, the default (io-uring auto) against the rings, one round
#   bash scripts/device/run.sh cpu      CPU per thread of a single node and of a group under SET
#   bash scripts/device/run.sh families issue 22's bitmap, HyperLogLog and geo commands vs redis, P=16,
#                                        3 rounds (needs basalt-bench built before pack.sh:
#                                        `cargo build --release -p basalt-bench`)
#   bash scripts/device/run.sh coldperf cold GETs at P=1, rings vs threads, one round each, with
#                                        a system-wide perf profile and io_uring tracepoint counts
# Output goes to $OUT/log.txt (the tool brings it back) and the terminal.
# Stages take 35-130 s each; the machine's first start costs about 35 s.
set -u
ROOT=$(pwd)
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
T0=$(date +%s)
mkdir -p /opt/dev/wrap && tar xJf .dev/devpkg.tar.xz -C /opt/dev || exit 1
for b in redis-server redis-cli redis-benchmark fio perf basalt-bench; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/opt/dev/lib exec /opt/dev/bin/%s "$@"\n' $b > /opt/dev/wrap/$b
done
printf '#!/bin/sh\nexec /opt/dev/bin/basalt --io-uring no "$@"\n' > /opt/dev/wrap/basalt-threads
# io-uring defaults to auto (the reader threads with more than 4 workers):
# the rings are asked for by name.
printf '#!/bin/sh\nexec /opt/dev/bin/basalt --io-uring yes "$@"\n' > /opt/dev/wrap/basalt-ring
chmod +x /opt/dev/wrap/*
export PATH=/opt/dev/wrap:$PATH PYTHONUNBUFFERED=1
# Temporary data on the machine's disk, not a tmpfs.
mkdir -p "$ROOT/.devtmp"
export TMPDIR=$ROOT/.devtmp
echo "== env"
nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
mount | grep -E "cgroup|on / " | head -3
for q in nr_requests scheduler; do echo "vda $q: $(cat /sys/block/vda/queue/$q 2>/dev/null)"; done
redis-server --version; fio --version; /opt/dev/bin/basalt --version
B=/opt/dev/bin/basalt
for stage in "$@"; do
  echo "== $stage $(date +%T)"
  case $stage in
    env) ;;
    families) timeout 400 basalt-bench families --basalt-bin $B --pipelines 16 --rounds 3 \
        --requests 2000000 --collections 0 --json "$O/families.json" ;;
    group) timeout 200 python3 scripts/bench_group.py --basalt $B --requests 100000 \
        --requests-pipelined 1000000 --rounds 3 --pipelines 1,16 --tests set,get --client-threads 4 ;;
    group1) timeout 150 python3 scripts/bench_group.py --basalt $B --requests 100000 \
        --requests-pipelined 1000000 --rounds 3 --pipelines 1,16 --tests set ;;
    inflight) for n in 4 16 64; do timeout 60 python3 scripts/bench_group.py --basalt $B \
        --requests 100000 --requests-pipelined 1000000 --rounds 3 --pipelines 16 --tests set \
        --group-only --group-flags "--raft-in-flight $n"; done ;;
    inflight4) for n in ${INFLIGHT:-4 64}; do timeout 60 python3 scripts/bench_group.py --basalt $B \
        --requests 100000 --requests-pipelined 2000000 --rounds 3 --pipelines 16 --tests set \
        --client-threads 4 --group-only --group-flags "--raft-in-flight $n"; done
        timeout 60 python3 scripts/bench_group.py --basalt $B --requests 100000 \
        --requests-pipelined 2000000 --rounds 3 --pipelines 16 --tests set --client-threads 4 \
        --single-only ;;
    apply) for r in 1 2; do for n in ${APPLY:-1 4 8}; do timeout 45 python3 scripts/bench_group.py \
        --basalt $B --requests 100000 --requests-pipelined 2000000 --rounds 2 --pipelines 16 \
        --tests set --client-threads 4 --group-only --group-flags "--raft-apply-threads $n"; done; done
        timeout 45 python3 scripts/bench_group.py --basalt $B --requests 100000 \
        --requests-pipelined 2000000 --rounds 3 --pipelines 16 --tests set --client-threads 4 \
        --single-only ;;
    rounds) for n in 4 1; do timeout 45 python3 scripts/bench_group.py --basalt $B --requests 100000 \
        --requests-pipelined 2000000 --rounds 2 --pipelines 16 --tests set --client-threads 4 \
        --group-only --raft-info --group-flags "--raft-apply-threads $n"; done ;;
    rthreads) for r in 1 2; do for n in 1 4; do timeout 60 python3 scripts/bench_group.py \
        --basalt $B --requests 100000 --requests-pipelined 2000000 --rounds 1 --pipelines 1,16 \
        --tests set --client-threads 4 --group-only --cpu --raft-info \
        --group-flags "--raft-threads $n"; done; done ;;
    mix) timeout 150 python3 scripts/bench_cold.py --binary auto=$B --limit-mb 512 --ratios 4 \
        --requests 200000 --rounds 1 --pipelines 1,16 --fio-seconds 3 --mix \
        --dir "$ROOT/.devtmp" ;;
    small) timeout 200 python3 scripts/bench_cold.py --binary auto=$B --limit-mb 512 --ratios 4 \
        --value 1024 --requests 300000 --rounds 1 --pipelines 1,16 --fio-seconds 3 \
        --dir "$ROOT/.devtmp" ;;
    smallq) printf '#!/bin/sh\nexec /opt/dev/bin/basalt --io-uring no --cold-readers 64 "$@"\n' \
          > /opt/dev/wrap/basalt-threads64 && chmod +x /opt/dev/wrap/basalt-threads64
        timeout 200 python3 scripts/bench_cold.py --binary auto=$B --binary ring=/opt/dev/wrap/basalt-ring \
        --binary threads64=/opt/dev/wrap/basalt-threads64 --limit-mb 512 --ratios 4 --value 1024 \
        --requests 300000 --rounds 1 --pipelines 1,16 --fio-seconds 3 --dir "$ROOT/.devtmp" ;;
    sweep) timeout 240 python3 scripts/bench_cold.py --binary auto=$B --limit-mb 512 \
        --ratios 1,2,4,8 --requests 200000 --rounds 1 --pipelines 1,16 --fio-seconds 3 \
        --dir "$ROOT/.devtmp" --json "$O/sweep.json" ;;
    warm) timeout 80 python3 scripts/bench_group.py --basalt $B --requests 100000 \
        --requests-pipelined 2000000 --rounds 3 --pipelines 16 --tests set,get --single-only ;;
    cold) timeout 240 python3 scripts/bench_cold.py --binary ring=/opt/dev/wrap/basalt-ring \
        --binary threads=/opt/dev/wrap/basalt-threads --limit-mb 512 --ratios 4 --requests 300000 \
        --rounds 3 --pipelines 1,16 --fio-seconds 5 --dir "$ROOT/.devtmp" --json "$O/cold.json" ;;
    coldperf) mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
        timeout 200 python3 scripts/bench_cold.py --binary ring=/opt/dev/wrap/basalt-ring \
        --binary threads=/opt/dev/wrap/basalt-threads --limit-mb 512 --ratios 4 --requests 300000 \
        --rounds 1 --pipelines 1 --fio-seconds 3 --dir "$ROOT/.devtmp" --perf-dir "$O/perf"
        for f in "$O"/perf/*.data; do
          perf report -i "$f" --stdio --no-children --sort comm 2>/dev/null | grep -v '^#' | head -30 > "${f%.data}.comm.txt"
          perf report -i "$f" --stdio --no-children --sort comm,dso,sym -g none 2>/dev/null | grep -v '^#' | head -70 > "${f%.data}.sym.txt"
          perf report -i "$f" --stdio --no-children --sort comm,sym -g caller,1,callee --percent-limit 2 2>/dev/null | head -400 > "${f%.data}.graph.txt"
          rm -f "$f"
        done ;;
    coldqd) printf '#!/bin/sh\nexec /opt/dev/bin/basalt --io-uring no --cold-readers 64 "$@"\n' \
          > /opt/dev/wrap/basalt-threads64 && chmod +x /opt/dev/wrap/basalt-threads64
        timeout 200 python3 scripts/bench_cold.py --binary ring=/opt/dev/wrap/basalt-ring \
        --binary threads=/opt/dev/wrap/basalt-threads --binary threads64=/opt/dev/wrap/basalt-threads64 \
        --limit-mb 512 --ratios 4 --requests 300000 --rounds 2 --pipelines 1 --fio-seconds 3 \
        --dir "$ROOT/.devtmp" ;;
    sched) timeout 120 python3 scripts/perf/group_sched.py $B --seconds 2 ;;
    schedfp) timeout 150 python3 scripts/perf/group_sched.py "$ROOT/.dev/basalt-fp" --seconds 2 \
        --profile "$O/profile" ;;
    coldauto) d=$(mktemp -d); $B --port 7399 --dir $d --http-port 0 >/dev/null 2>&1 & sleep 1
        redis-cli -p 7399 config get io-uring | tr '\n' ' '; redis-cli -p 7399 info stats | grep io_uring
        redis-cli -p 7399 shutdown nosave >/dev/null; rm -rf $d
        timeout 150 python3 scripts/bench_cold.py --binary auto=$B \
        --binary ring=/opt/dev/wrap/basalt-ring --limit-mb 512 --ratios 4 --requests 300000 \
        --rounds 1 --pipelines 1,16 --fio-seconds 3 --dir "$ROOT/.devtmp" ;;
    cpu) timeout 90 python3 scripts/perf/group_cpu.py $B ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "$stage rc=$? at $(( $(date +%s) - T0 )) s"
done
