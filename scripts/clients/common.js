// Helpers the Node client checks share (scripts/clients/*.js): the
// binary named by `--binary`, a free 127.0.0.1 port, sleep and assert.

"use strict";
const net = require("net");

const args = process.argv.slice(2);

/** The Basalt binary to start: `--binary PATH`, else the debug build. */
const binary = args.includes("--binary") ? args[args.indexOf("--binary") + 1] : "target/debug/basalt";

/** A port on 127.0.0.1 that nothing listens on now. */
function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}

module.exports = { binary, freePort, sleep, assert };
