#!/usr/bin/env node
// Real client, real group: ioredis's Sentinel support against a 3-node
// Basalt Raft group (a second Sentinel client beside redis-py's, with its
// own way of finding the master: it asks each sentinel in turn, refreshes
// its list with SENTINEL SENTINELS, checks the role of the node it
// reaches, and reconnects by itself after a failover).
//
// Starts three Basalt processes on free 127.0.0.1 ports as one group (the
// README's flags) and, unchanged application code:
//   * `new Redis({sentinels, name: "mymaster"})` writes 100 keys and an
//     INCR through the leader; a `role: "slave"` client reads from a
//     follower;
//   * the leader is killed with SIGKILL; the same client keeps writing
//     (ioredis finds the new leader through the sentinels, within a
//     bounded retry), and every write acknowledged before and after the
//     kill is there.
// Every loop is bounded in count and time. Exit status 0 when all pass.
//
// Usage: node scripts/clients/ioredis_sentinel.js [--binary PATH]
// Needs ioredis (`npm install ioredis@5`; NODE_PATH may point at its
// node_modules).

"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");
const Redis = require("ioredis");

const { binary, freePort, sleep, assert } = require("./common");

async function retry(what, f, seconds = 15) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    try {
      return await f();
    } catch (e) {
      if (Date.now() > deadline) throw new Error(`${what}: still failing after ${seconds} s: ${e}`);
      await sleep(100);
    }
  }
}

async function main() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "basalt-ioredis-"));
  const ports = [await freePort(), await freePort(), await freePort()];
  const rafts = [await freePort(), await freePort(), await freePort()];
  const peers = rafts.map((p, i) => `${i + 1}@127.0.0.1:${p}`).join(",");
  const procs = [];
  const clients = [];
  try {
    for (let i = 0; i < 3; i++) {
      procs[i] = spawn(binary, [
        "--port", String(ports[i]), "--http-port", "0", "--dir", path.join(root, `n${i + 1}`),
        "--node-id", String(i + 1), "--raft-port", String(rafts[i]), "--peers", peers,
      ], { stdio: "ignore" });
    }
    const sentinels = ports.map((port) => ({ host: "127.0.0.1", port }));
    // A plain connection per node, to wait for an agreed leader.
    const direct = ports.map((port) => new Redis({ port, lazyConnect: true, maxRetriesPerRequest: 0 }));
    clients.push(...direct);
    // Connection errors while nodes start or die are expected; the checks
    // below are what counts.
    direct.forEach((c) => c.on("error", () => {}));
    const leaderPort = await retry("an agreed leader", async () => {
      const seen = [];
      for (const c of direct) {
        if (c.status !== "ready") await c.connect().catch(() => {});
        seen.push(await c.call("SENTINEL", "get-master-addr-by-name", "mymaster"));
      }
      assert(seen.every((s) => s && s[1] === seen[0][1]), `leaders named: ${JSON.stringify(seen)}`);
      return Number(seen[0][1]);
    }, 30);
    direct.forEach((c) => c.disconnect());

    const master = new Redis({ sentinels, name: "mymaster", enableOfflineQueue: true });
    const replica = new Redis({ sentinels, name: "mymaster", role: "slave" });
    clients.push(master, replica);
    [master, replica].forEach((c) => c.on("error", () => {}));
    for (let i = 0; i < 100; i++) assert((await master.set(`k${i}`, i)) === "OK", "SET");
    assert((await master.incrby("n", 5)) === 5, "INCRBY");
    const read = await retry("a follower read", async () => {
      const v = await replica.get("k99");
      assert(v === "99", `follower read k99: ${v}`);
      return v;
    });
    assert(read === "99", "follower read");
    console.log(`ok  writes through the leader (${leaderPort}), a read through a follower`);

    const leader = ports.indexOf(leaderPort);
    procs[leader].kill("SIGKILL");
    const killed = Date.now();
    await retry("write after the kill", () => master.set("after", "kill"));
    const took = Date.now() - killed;
    for (let i = 100; i < 200; i++) await retry("write", () => master.set(`k${i}`, i));
    assert((await master.incrby("n", 5)) === 10, "INCRBY after the failover");
    const values = await master.mget(Array.from({ length: 200 }, (_, i) => `k${i}`));
    assert(values.every((v, i) => v === String(i)), "every acknowledged write is there");
    const role = await master.call("ROLE");
    assert(role[0] === "master", `the client talks to the new leader: ${role[0]}`);
    console.log(`ok  the client followed the failover: first write ${took} ms after the kill`);
    console.log("ok  ioredis Sentinel client: all checks passed");
  } finally {
    clients.forEach((c) => c.disconnect());
    procs.forEach((p) => p && p.kill("SIGKILL"));
    fs.rmSync(root, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`FAIL ${e.stack || e}`);
    process.exit(1);
  },
);
