#!/usr/bin/env python3
"""python-rq on Basalt: 200 jobs through a burst worker.

rq records job results with XADD and reads them with XREVRANGE, so this is
what issue 20 found failing (0 of 200 jobs before streams).

Setup (a virtual environment; rq is not needed by `cargo test`):
  python3 -m venv /tmp/rqenv && /tmp/rqenv/bin/pip install rq redis
  /tmp/rqenv/bin/python scripts/clients/rq_smoke.py --binary target/release/basalt [--group]

Starts the binary on an ephemeral port in a temporary directory, enqueues
200 jobs, runs `rq worker --burst` (it exits when the queue is empty, 120 s
at most) and checks every job's result. Exit status 0 when all 200 are right.

--group: the same against a 3-node Raft group, through a follower, with a
worker that waits in BLPOP for jobs (`--max-jobs 200`, not `--burst`); half
of the jobs are enqueued while it waits.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from servers import start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/release/basalt")
    ap.add_argument("--group", action="store_true", help="a 3-node group, through a follower")
    args = ap.parse_args()
    from redis import Redis
    from rq import Queue
    tmp = tempfile.mkdtemp(prefix="basalt-rq-")
    with open(os.path.join(tmp, "rqjobs.py"), "w") as f:
        f.write("def add(x, y):\n    return x + y\n")
    sys.path.insert(0, tmp)
    from rqjobs import add  # noqa: E402 - written above
    port, stop = start(args.binary, os.path.join(tmp, "data"), group=args.group)
    try:
        r = Redis(port=port)
        q = Queue(connection=r)
        jobs = [q.enqueue(add, i, i) for i in range(100 if args.group else 200)]
        mode = ["--max-jobs", "200"] if args.group else ["--burst"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "rq.cli", "worker", *mode, "--url", f"redis://127.0.0.1:{port}"],
            cwd=tmp, env=dict(os.environ, PYTHONPATH=tmp),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if args.group:
            # The worker drains the first 100 and waits in BLPOP.
            time.sleep(3)
            jobs += [q.enqueue(add, i, i) for i in range(100, 200)]
        try:
            _, err = worker.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, err = worker.communicate()
        ok = sum(1 for i, j in enumerate(jobs) if j.latest_result() is not None and j.return_value() == 2 * i)
        print(f"{ok}/200 jobs")
        if ok < 200:
            print(err.decode()[-2000:])
        return 0 if ok == 200 else 1
    finally:
        stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
