// One graphile-worker drain on the PostgreSQL of $GRAPHILE_DATABASE_URL:
// EVENTS no-op jobs carrying the same ~330-byte event as payhook's bench
// (over INTENTS serial queues, one per payment intent, or none when 0) are
// added, then a worker with concurrency 16 runs until the jobs table is
// empty. GRAPHILE_MODE=batched (default: a local queue of 500 and batched
// completion, the settings of graphile-worker's performance page) or plain.
// Prints one line: events/s and CPU seconds per 1 000 events (this process;
// the PostgreSQL server of PAYHOOK_TEST_PG_DIR when set).
import fs from "node:fs";
import { Logger, makeWorkerUtils, run } from "graphile-worker";
import pg from "pg";

const [events, intents] = process.argv.slice(2).map((n) => Number.parseInt(n, 10));
const connectionString = process.env.GRAPHILE_DATABASE_URL;
const mode = process.env.GRAPHILE_MODE ?? "batched";
if (!connectionString || !(events > 0) || !(intents >= 0)) {
  console.error("usage: GRAPHILE_DATABASE_URL=postgres://… node drain.mjs EVENTS INTENTS");
  process.exit(2);
}

function body(id, intent) {
  return {
    id,
    type: "payment_intent.succeeded",
    created: 1732264800,
    data: {
      object: {
        id: intent,
        object: "payment_intent",
        amount: 2500,
        currency: "btc",
        status: "succeeded",
        created: 1732264800,
        metadata: { order: "42" },
      },
    },
  };
}

// CPU seconds of /proc/PID/stat (user + system, with reaped children's).
function cpuOf(pid, children) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(") ") + 2).split(" ");
  const field = (n) => Number(fields[n - 3]);
  let ticks = field(14) + field(15);
  if (children) ticks += field(16) + field(17);
  return ticks / 100;
}

function postgresCpu() {
  const dir = process.env.PAYHOOK_TEST_PG_DIR;
  if (!dir) return null;
  const postmaster = fs.readFileSync(`${dir}/data/postmaster.pid`, "utf8").split("\n")[0].trim();
  let total = cpuOf(postmaster, true);
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(") ") + 2).split(" ")[1] === postmaster) total += cpuOf(name, false);
    } catch {
      // gone meanwhile
    }
  }
  return total;
}

const quiet = new Logger(() => (level, message) => {
  if (level === "error") console.error(message);
});
const utils = await makeWorkerUtils({ connectionString, logger: quiet });
await utils.migrate();
const prefix = `evt_g${process.pid}_${Date.now()}`;
for (let start = 0; start < events; start += 1000) {
  const specs = [];
  for (let i = start; i < Math.min(events, start + 1000); i += 1) {
    const intent = intents === 0 ? `pi_${prefix}_${i}` : `pi_${prefix}_${i % intents}`;
    const spec = { identifier: "noop", payload: body(`${prefix}_${i}`, intent) };
    if (intents > 0) spec.queueName = intent;
    specs.push(spec);
  }
  await utils.addJobs(specs);
}
await utils.release();

const counter = new pg.Pool({ connectionString, max: 1 });
const waiting = async () =>
  Number((await counter.query("SELECT COUNT(*) AS n FROM graphile_worker._private_jobs")).rows[0].n);

const batching =
  mode === "batched" ? { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } : {};
let handled = 0;
const processBefore = cpuOf("self", false);
const databaseBefore = postgresCpu();
const started = process.hrtime.bigint();
const runner = await run({
  logger: quiet,
  noHandleSignals: true,
  taskList: {
    noop: async () => {
      handled += 1;
    },
  },
  preset: {
    worker: {
      connectionString,
      concurrentJobs: 16,
      maxPoolSize: 17,
      pollInterval: 20,
      ...batching,
    },
  },
});
while (handled < events || (await waiting()) > 0) {
  await new Promise((resolve) => setTimeout(resolve, 20));
}
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
const processCpu = ((cpuOf("self", false) - processBefore) * 1000) / events;
const databaseAfter = postgresCpu();
await runner.stop();
await counter.end();
const database =
  databaseBefore === null ? "" : ` + database ${(((databaseAfter - databaseBefore) * 1000) / events).toFixed(3)}`;
console.log(
  `graphile-worker ${mode} drain ${events} events (${intents === 0 ? "no queues" : `${intents} queues`}): ` +
    `${(events / seconds).toFixed(0)} events/s, CPU-s per 1 000: process ${processCpu.toFixed(3)}${database}`,
);
