"""Starting Basalt for the client scripts: one node, or a 3-node Raft group.

`start(binary, root, group)` starts the server(s) in directories under
`root` on free 127.0.0.1 ports, waits until they serve, and returns
`(port, stop)`: the port the client should use and a function that stops
every process. For a group, the port is a follower's, so that the client
exercises what a follower does for it (forwarded writes, blocked clients
waiting there, read barriers); the group is ready once every node names
the same leader.
"""
import os
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cmd(port, *args):
    """One RESP command over a fresh socket; the reply's first line."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(f"*{len(args)}\r\n".encode() + b"".join(
            f"${len(a)}\r\n{a}\r\n".encode() for a in args))
        return s.recv(4096)


def start(binary, root, group=False, timeout=30):
    n = 3 if group else 1
    ports = [free_port() for _ in range(n)]
    rafts = [free_port() for _ in range(n)]
    peers = ",".join(f"{i + 1}@127.0.0.1:{rafts[i]}" for i in range(n))
    procs = []
    for i in range(n):
        argv = [binary, "--port", str(ports[i]), "--http-port", "0",
                "--dir", os.path.join(root, f"n{i + 1}")]
        if group:
            argv += ["--node-id", str(i + 1), "--raft-port", str(rafts[i]), "--peers", peers]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop():
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    deadline = time.monotonic() + timeout
    while True:
        try:
            if not group:
                if _cmd(ports[0], "PING").startswith(b"+PONG"):
                    return ports[0], stop
            else:
                leaders = {_cmd(p, "SENTINEL", "get-master-addr-by-name", "mymaster") for p in ports}
                if len(leaders) == 1 and leaders.pop().startswith(b"*2"):
                    for p in ports:
                        if b"slave" in _cmd(p, "ROLE"):
                            return p, stop
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop()
            raise SystemExit("Basalt did not start serving")
        time.sleep(0.05)
