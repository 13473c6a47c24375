# Sourced by the scripts here.
# start_server <bin|redis> [cpu]: a fresh server on a random port in a
# temporary directory (Redis with the AOF everysec, as the benchmark runs
# it; Basalt with $FLAGS), pinned to `cpu` if given. Sets port, dir, pid;
# exits if it does not answer within 5 s.
start_server() {
  local b=$1 pin=()
  [[ -n $2 ]] && pin=(taskset -c "$2")
  port=$((20000 + RANDOM % 20000)); dir=$(mktemp -d /tmp/basalt-perf.XXXX)
  if [[ $b == redis ]]; then
    "${pin[@]}" redis-server --port $port --dir $dir --appendonly yes --appendfsync everysec --save '' >/dev/null 2>&1 &
  else
    "${pin[@]}" $b --port $port --dir $dir --http-port 0 $FLAGS >/dev/null 2>&1 &
  fi
  pid=$!
  for i in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p $port ping >/dev/null 2>&1 || { echo "$0: server on port $port did not answer" >&2; kill $pid 2>/dev/null; exit 1; }
}

# stop_server: stops it and removes its directory.
stop_server() {
  kill $pid; wait $pid 2>/dev/null || true; rm -rf $dir
}
