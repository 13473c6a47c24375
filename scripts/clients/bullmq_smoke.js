#!/usr/bin/env node
// Real client, real server: BullMQ (Node's most used job queue: every
// operation is a Lua script over lists, sorted sets, hashes and a stream
// of events) against a Basalt server, unchanged application code.
//
// Starts one Basalt process on a free 127.0.0.1 port and checks:
//   * 20 jobs, a delayed one, a prioritized one, a bulk of two and a flow
//     (a parent waiting for two children) all complete through a Worker of
//     concurrency 4, with their return values and progress; a job that
//     throws is retried once (attempts: 2, fixed backoff) and ends failed
//     with its reason; QueueEvents (XREAD BLOCK on the queue's event
//     stream) sees every completion; the parent reads its children's
//     values;
//   * 10 jobs queued while no worker runs survive a SIGKILL of the server
//     and a restart on the same directory, and a new worker runs them all;
//   * pause, resume and obliterate.
// Every wait is bounded in time. Exit status 0 when all pass.
//
// Usage: node scripts/clients/bullmq_smoke.js [--binary PATH]
// Needs bullmq and ioredis (`npm install bullmq@6 ioredis@5`; NODE_PATH
// may point at their node_modules).

"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const net = require("net");
const os = require("os");
const path = require("path");
const { Queue, Worker, QueueEvents, FlowProducer } = require("bullmq");

const { binary, freePort, sleep, assert } = require("./common");

async function until(what, f, seconds = 20) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    if (await f()) return;
    if (Date.now() > deadline) throw new Error(`not within ${seconds} s: ${what}`);
    await sleep(50);
  }
}

function pingable(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    s.on("connect", () => {
      s.write("PING\r\n");
    });
    s.on("data", (d) => {
      s.destroy();
      resolve(d.toString().startsWith("+PONG"));
    });
    s.on("error", () => resolve(false));
  });
}

async function startServer(port, dir) {
  const p = spawn(binary, ["--port", String(port), "--http-port", "0", "--dir", dir], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  await until("the server answers PING", () => pingable(port));
  return p;
}

async function main() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "basalt-bullmq-"));
  const port = await freePort();
  let server = await startServer(port, root);
  const connection = { host: "127.0.0.1", port, maxRetriesPerRequest: null };
  const opened = [];
  const open = (o) => {
    opened.push(o);
    return o;
  };
  try {
    const name = "orders";
    const queue = open(new Queue(name, { connection }));
    const events = open(new QueueEvents(name, { connection }));
    await events.waitUntilReady();
    const completedEvents = new Set();
    events.on("completed", ({ jobId }) => completedEvents.add(jobId));

    const worker = open(
      new Worker(
        name,
        async (job) => {
          if (job.name === "fails") throw new Error("boom");
          if (job.name === "parent") {
            const children = await job.getChildrenValues();
            return { children: Object.values(children).map((v) => v.doubled).sort() };
          }
          await job.updateProgress(50);
          return { doubled: job.data.x * 2 };
        },
        { connection, concurrency: 4 },
      ),
    );
    const jobs = [];
    for (let i = 0; i < 20; i++) jobs.push(await queue.add(`job${i}`, { x: i }));
    const delayed = await queue.add("delayed", { x: 100 }, { delay: 200 });
    const prio = await queue.add("prio", { x: 7 }, { priority: 3 });
    const fails = await queue.add("fails", { x: 1 }, { attempts: 2, backoff: { type: "fixed", delay: 50 } });
    await queue.addBulk([
      { name: "bulk1", data: { x: 1 } },
      { name: "bulk2", data: { x: 2 } },
    ]);
    const flow = open(new FlowProducer({ connection }));
    const tree = await flow.add({
      name: "parent",
      queueName: name,
      data: {},
      children: [
        { name: "child1", queueName: name, data: { x: 3 } },
        { name: "child2", queueName: name, data: { x: 4 } },
      ],
    });
    // 20 + delayed + prio + 2 bulk + parent + 2 children = 27 complete.
    await until("27 jobs completed and one failed", async () => {
      const c = await queue.getJobCounts("completed", "failed");
      return c.completed === 27 && c.failed === 1;
    });
    const counts = await queue.getJobCounts();
    assert(counts.waiting === 0 && counts.active === 0 && counts.delayed === 0, JSON.stringify(counts));
    const j5 = await queue.getJob(jobs[5].id);
    assert(j5.returnvalue.doubled === 10, `job5 returned ${JSON.stringify(j5.returnvalue)}`);
    assert(j5.progress === 50, `job5 progress ${j5.progress}`);
    assert((await queue.getJob(delayed.id)).returnvalue.doubled === 200, "the delayed job ran");
    assert((await queue.getJob(prio.id)).returnvalue.doubled === 14, "the prioritized job ran");
    const failed = await queue.getJob(fails.id);
    assert(failed.failedReason === "boom" && failed.attemptsMade === 2, `failed: ${failed.failedReason} after ${failed.attemptsMade}`);
    const parent = await queue.getJob(tree.job.id);
    assert(JSON.stringify(parent.returnvalue.children) === "[6,8]", `parent: ${JSON.stringify(parent.returnvalue)}`);
    await until("QueueEvents saw every completion", async () => completedEvents.size === 27, 10);
    console.log("ok  27 jobs (delayed, prioritized, bulk, a flow) completed, one failed after 2 attempts, 27 events");

    // Durability: jobs queued with no worker survive kill -9.
    await worker.close();
    const queued = [];
    for (let i = 0; i < 10; i++) queued.push((await queue.add(`late${i}`, { x: i })).id);
    assert((await queue.getJobCounts("waiting")).waiting === 10, "10 waiting before the kill");
    server.kill("SIGKILL");
    await new Promise((r) => server.once("exit", r));
    server = await startServer(port, root);
    await until("the queue reconnected and still holds 10 jobs", async () => {
      try {
        return (await queue.getJobCounts("waiting")).waiting === 10;
      } catch (e) {
        return false;
      }
    });
    const done = [];
    const worker2 = open(new Worker(name, async (job) => done.push(job.id) && job.data.x, { connection, concurrency: 2 }));
    await until("a new worker ran the 10 jobs", async () => (await queue.getJobCounts("completed")).completed === 37);
    assert(queued.every((id) => done.includes(id)), `ran ${done.length} of the 10`);
    console.log("ok  10 jobs queued before a SIGKILL of the server ran after its restart");

    await queue.pause();
    assert(await queue.isPaused(), "paused");
    await queue.resume();
    assert(!(await queue.isPaused()), "resumed");
    await worker2.close();
    await queue.obliterate({ force: true });
    const left = await queue.getJobCounts();
    assert(Object.values(left).every((n) => n === 0), `after obliterate: ${JSON.stringify(left)}`);
    console.log("ok  pause, resume, obliterate");
  } finally {
    for (const o of opened.reverse()) await o.close().catch(() => {});
    server.kill("SIGKILL");
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
