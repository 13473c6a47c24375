#!/usr/bin/env python3
"""Celery with the Redis broker and result backend on Basalt: 100 tasks.

kombu's Redis transport uses EVALSHA (its unacked-messages mutex), so this
is what issue 19 found failing (0 of 100 tasks before scripting).

Setup (a virtual environment; Celery is not needed by `cargo test`):
  python3 -m venv /tmp/celenv
  /tmp/celenv/bin/pip install celery redis packaging
  /tmp/celenv/bin/python scripts/clients/celery_smoke.py --binary target/release/basalt [--group]

Starts the binary on an ephemeral port in a temporary directory, a Celery
worker (2 processes) against it, sends 100 `add` tasks and waits (60 s at
most) for their results. Exit status 0 when all 100 come back right.

--group: the same against a 3-node Raft group, through a follower (the
worker waits for tasks in BRPOP there; the results go through the log).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from servers import start

TASKS = '''
import os
from celery import Celery
url = "redis://127.0.0.1:" + os.environ["BASALT_PORT"]
app = Celery("tasks", broker=url + "/0", backend=url + "/1")
app.conf.broker_connection_retry_on_startup = True

@app.task
def add(x, y):
    return x + y
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/release/basalt")
    ap.add_argument("--group", action="store_true", help="a 3-node group, through a follower")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="basalt-celery-")
    port, stop = start(args.binary, os.path.join(tmp, "data"), group=args.group)
    env = dict(os.environ, BASALT_PORT=str(port), PYTHONPATH=tmp)
    with open(os.path.join(tmp, "tasks.py"), "w") as f:
        f.write(TASKS)
    worker = None
    try:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--loglevel=warning", "-c", "2"],
            cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sys.path.insert(0, tmp)
        os.environ["BASALT_PORT"] = str(port)
        from tasks import add  # noqa: E402 - written above
        results = [add.delay(i, i) for i in range(100)]
        deadline = time.time() + 60
        ok = 0
        for i, r in enumerate(results):
            try:
                ok += r.get(timeout=max(1, deadline - time.time())) == 2 * i
            except Exception as e:  # noqa: BLE001 - reported
                print(f"task {i}: {e!r}")
                break
        print(f"{ok}/100 tasks")
        return 0 if ok == 100 else 1
    finally:
        if worker:
            worker.terminate()
            try:
                worker.wait(10)
            except subprocess.TimeoutExpired:
                worker.kill()
        stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
