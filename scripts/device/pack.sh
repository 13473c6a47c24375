#!/bin/bash
# Packs what a run on a lent multi-core machine (the `device` tool: no
# network there) needs into .dev/devpkg.tar.xz, under the 64 MiB the tool
# carries: the release basalt binary (debug info stripped, symbols kept for
# perf), and redis-server, redis-cli, redis-benchmark, fio and (where this
# machine has it) perf from this machine with every library
# they load except the C library's own (the far side has a newer glibc).
# Run it here, from the repository root, after `cargo build --release`;
# then call the device with carry [".dev"] and the command
# `bash scripts/device/run.sh STAGE` (see that file).
set -eu
for tool in redis-server redis-cli redis-benchmark fio; do
  command -v $tool >/dev/null || { echo "$tool missing: apt-get install -y redis-server redis-tools fio"; exit 1; }
done
[ -x target/release/basalt ] || { echo "build first: cargo build --release -p basalt-server"; exit 1; }
pkg=$(mktemp -d)
mkdir -p $pkg/bin $pkg/lib .dev
tools="redis-server redis-cli redis-benchmark fio"
command -v perf >/dev/null && tools="$tools perf"
# basalt-bench (issue 22's `families` stage) when it was built: stripped,
# about 11 MB (RocksDB is linked in statically).
bench=target/release/basalt-bench
for tool in $tools $([ -x $bench ] && echo $bench); do
  path=$(command -v $tool)
  cp "$path" $pkg/bin/
  ldd "$path" | awk '/=>/ {print $1, $3}'
done | sort -u | grep -v -E '^(libc|libm|libpthread|libdl|librt)\.so' | while read -r name path; do
  cp -L "$path" "$pkg/lib/$name"
done
cp target/release/basalt $pkg/bin/basalt
strip --strip-debug $pkg/bin/basalt
[ -f $pkg/bin/basalt-bench ] && strip $pkg/bin/basalt-bench
tar cf - -C $pkg bin lib | xz -T2 -6 > .dev/devpkg.tar.xz
rm -rf $pkg
ls -l .dev/devpkg.tar.xz
