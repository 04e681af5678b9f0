// pg-boss driver for the benchmark contract (see contract.mjs).
//
// pg-boss 10 has no LISTEN/NOTIFY: each work() call is one polling worker
// that fetches up to batchSize jobs, runs its handler on the batch, and waits
// out the rest of pollingIntervalSeconds before fetching again, so a worker
// tops out at batchSize / interval jobs per second. Settings: W work() calls
// (its documented way to add concurrency), batchSize BATCH_SIZE with the jobs
// of a batch handled concurrently (as its maintainer advises for batches),
// pollingIntervalSeconds 0.5 (the documented minimum), pool max(10, W + 2).
// Bulk enqueue is boss.insert(jobs) (one statement). Maintenance and cron
// stay at their defaults.

import { confirm, log, main, now, packageVersion, pgConfig, Probes, require, sleep, work } from "./contract.mjs";

const PgBoss = require("pg-boss");

const QUEUE = "noop";
const BATCH_SIZE = Number(process.env.PGBOSS_BATCH_SIZE ?? 100);
const POLLING_INTERVAL_S = 0.5;

async function withBoss(max, fn) {
  const boss = new PgBoss(pgConfig({ max }));
  boss.on("error", (err) => log(`pg-boss error: ${err.message}`));
  await boss.start();
  try {
    return await fn(boss);
  } finally {
    await boss.stop({ graceful: true, wait: true, timeout: 10000 });
  }
}

function poolSize(w) {
  return Math.max(10, w + 2);
}

async function setup() {
  await withBoss(2, (boss) => boss.createQueue(QUEUE));
  return {
    version: packageVersion("pg-boss"),
    settings: {
      enqueue: "boss.insert(jobs) (one statement)",
      worker: "W x boss.work(queue, {batchSize, pollingIntervalSeconds})",
      batchSize: BATCH_SIZE,
      pollingIntervalSeconds: POLLING_INTERVAL_S,
      pool: "max(10, W+2)",
      notify: "none (polling only)",
    },
  };
}

async function enqueue(n) {
  return withBoss(2, async (boss) => {
    const jobs = Array.from({ length: n }, () => ({ name: QUEUE, data: {} }));
    const started = now();
    await boss.insert(jobs);
    return (now() - started) / 1000;
  });
}

async function countRow(boss, sql) {
  const db = boss.getDb();
  const { rows } = await db.executeSql(sql, []);
  return Number(rows[0].count);
}

function countDone(boss) {
  return countRow(
    boss,
    `select (select count(*) from pgboss.job where name = '${QUEUE}' and state = 'completed')
          + (select count(*) from pgboss.archive where name = '${QUEUE}' and state = 'completed') as count`,
  );
}

async function startWorkers(boss, w, handler) {
  const options = { batchSize: BATCH_SIZE, pollingIntervalSeconds: POLLING_INTERVAL_S };
  for (let i = 0; i < w; i++) {
    await boss.work(QUEUE, options, (jobs) => Promise.allSettled(jobs.map(handler)));
  }
}

async function drain(n, w) {
  return withBoss(poolSize(w), async (boss) => {
    let handled = 0;
    const started = now();
    await startWorkers(boss, w, async () => {
      await work();
      handled += 1;
    });
    while (handled < n) await sleep(5);
    // work() completes a batch without awaiting it, so wait for the rows.
    const done = await confirm(() => countDone(boss), n);
    const seconds = (now() - started) / 1000;
    await boss.offWork(QUEUE);
    const total = await countRow(boss, `select count(*) from pgboss.job where name = '${QUEUE}'`);
    return { seconds, verified: { ok: handled === n && done === n && total === n, handled, completed: done } };
  });
}

async function latency(k, w) {
  return withBoss(poolSize(w) + 1, async (boss) => {
    const probes = new Probes();
    await startWorkers(boss, w, async (job) => {
      probes.handlerStarted(job.data.i);
    });
    await sleep(500);
    const samples = await probes.run(k, (i) => boss.send(QUEUE, { i }));
    await boss.offWork(QUEUE);
    return samples;
  });
}

await main({ setup, enqueue, drain, latency });
