#!/usr/bin/env python3
"""python-rq on Basalt: 200 jobs through a burst worker.

rq records job results with XADD and reads them with XREVRANGE, so this is
what issue 20 found failing (0 of 200 jobs before streams).

Setup (a virtual environment; rq is not needed by `cargo test`):
  python3 -m venv /tmp/rqenv && /tmp/rqenv/bin/pip install rq redis
  /tmp/rqenv/bin/python scripts/clients/rq_smoke.py --binary target/release/basalt

Starts the binary on an ephemeral port in a temporary directory, enqueues
200 jobs, runs `rq worker --burst` (it exits when the queue is empty, 120 s
at most) and checks every job's result. Exit status 0 when all 200 are right.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/release/basalt")
    args = ap.parse_args()
    from redis import Redis
    from rq import Queue
    tmp = tempfile.mkdtemp(prefix="basalt-rq-")
    with open(os.path.join(tmp, "rqjobs.py"), "w") as f:
        f.write("def add(x, y):\n    return x + y\n")
    sys.path.insert(0, tmp)
    from rqjobs import add  # noqa: E402 - written above
    port = free_port()
    server = subprocess.Popen(
        [args.binary, "--port", str(port), "--http-port", "0", "--dir", os.path.join(tmp, "data")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = Redis(port=port)
        deadline = time.monotonic() + 30
        while True:
            try:
                r.ping()
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        q = Queue(connection=r)
        jobs = [q.enqueue(add, i, i) for i in range(200)]
        worker = subprocess.run(
            [sys.executable, "-m", "rq.cli", "worker", "--burst", "--url", f"redis://127.0.0.1:{port}"],
            cwd=tmp, env=dict(os.environ, PYTHONPATH=tmp), capture_output=True, timeout=120)
        ok = sum(1 for i, j in enumerate(jobs) if j.latest_result() is not None and j.return_value() == 2 * i)
        print(f"{ok}/200 jobs")
        if ok < 200:
            print(worker.stderr.decode()[-2000:])
        return 0 if ok == 200 else 1
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
