#!/usr/bin/env bash
# hot_get.sh BIN_A BIN_B ROUNDS: A/B of two basalt binaries, alternating, a
# fresh server (port 16383, unpinned) per run: one hot key's GET at P=16
# (no -r: every GET reads key:__rand_int__), then random SET and GET at
# P=16 over 1 M keys. Prints requests per second.
set -e
for r in $(seq 1 "$3"); do for b in "$1" "$2"; do
  dir=$(mktemp -d)
  "$b" --port 16383 --http-port 0 --dir "$dir" --appendfsync everysec >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 50); do redis-cli -p 16383 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p 16383 set key:__rand_int__ "$(head -c 100 /dev/zero | tr '\0' x)" >/dev/null
  hot=$(redis-benchmark -p 16383 -t get -n 4000000 -P 16 -c 50 -q 2>&1 | tr '\r' '\n' | grep "per second" | tail -1 | awk '{print $2}')
  rnd=$(redis-benchmark -p 16383 -t set,get -n 4000000 -r 1000000 -P 16 -c 50 -q -d 100 2>&1 | tr '\r' '\n' | grep "per second" | awk '{print $1 $2}' | tr '\n' ' ')
  echo "$(basename "$b") hot-GET:$hot $rnd"
  kill "$pid"; wait "$pid" 2>/dev/null || true; rm -rf "$dir"
done; done
