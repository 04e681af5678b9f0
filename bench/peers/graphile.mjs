// graphile-worker driver for the benchmark contract (see contract.mjs).
//
// Settings follow graphile-worker's performance documentation ("Batching"):
// concurrentJobs = W, localQueue.size = W + 1, completeJobBatchDelay = 25 and
// failJobBatchDelay = 25 ms, pool size max(10, W + 2) as its maxPoolSize
// advice says; LISTEN/NOTIFY with the default 2 s poll interval. Bulk enqueue
// is WorkerUtils.addJobs (one statement).

import {
  confirm,
  log,
  main,
  now,
  packageVersion,
  pgConfig,
  Probes,
  require,
  sleep,
  work,
} from "./contract.mjs";

const { Pool } = require("pg");
const { Logger, makeWorkerUtils, run, runMigrations } = require("graphile-worker");

const TASK = "noop";
const BATCH_DELAY_MS = 25;

const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") log(`graphile-worker ${level}: ${message}`);
});

function poolSize(w) {
  return Math.max(10, w + 2);
}

function preset(w) {
  return {
    worker: {
      concurrentJobs: w,
      maxPoolSize: poolSize(w),
      localQueue: { size: w + 1 },
      completeJobBatchDelay: BATCH_DELAY_MS,
      failJobBatchDelay: BATCH_DELAY_MS,
    },
  };
}

async function withPool(size, fn) {
  const pgPool = new Pool(pgConfig({ max: size }));
  pgPool.on("error", (err) => log(`pool error: ${err.message}`));
  try {
    return await fn(pgPool);
  } finally {
    await pgPool.end();
  }
}

async function setup() {
  await withPool(2, (pgPool) => runMigrations({ pgPool, logger }));
  return {
    version: packageVersion("graphile-worker"),
    settings: {
      enqueue: "WorkerUtils.addJobs (one statement)",
      worker: "run({concurrency: W}) with LISTEN/NOTIFY, pollInterval 2000 ms",
      localQueue_size: "W+1",
      completeJobBatchDelay_ms: BATCH_DELAY_MS,
      failJobBatchDelay_ms: BATCH_DELAY_MS,
      pool: "max(10, W+2)",
    },
  };
}

async function enqueue(n) {
  return withPool(2, async (pgPool) => {
    const utils = await makeWorkerUtils({ pgPool, logger });
    try {
      const specs = Array.from({ length: n }, () => ({ identifier: TASK, payload: {} }));
      const started = now();
      await utils.addJobs(specs);
      return (now() - started) / 1000;
    } finally {
      await utils.release();
    }
  });
}

async function countRow(pgPool, sql) {
  const { rows } = await pgPool.query(sql);
  return Number(rows[0].count);
}

async function drain(n, w) {
  return withPool(poolSize(w), async (pgPool) => {
    let handled = 0;
    const taskList = {
      [TASK]: async () => {
        await work();
        handled += 1;
      },
    };
    // graphile-worker deletes a job once it succeeds; a failed one stays.
    const remaining = () => countRow(pgPool, "select count(*) from graphile_worker._private_jobs");
    const started = now();
    const runner = await run({
      pgPool,
      logger,
      concurrency: w,
      noHandleSignals: true,
      taskList,
      preset: preset(w),
    });
    while (handled < n) await sleep(5);
    const left = n - (await confirm(async () => n - (await remaining()), n));
    const seconds = (now() - started) / 1000;
    await runner.stop();
    const finalLeft = await remaining();
    return {
      seconds,
      verified: { ok: handled === n && left === 0 && finalLeft === 0, handled, left_in_queue: finalLeft },
    };
  });
}

async function latency(k, w) {
  return withPool(poolSize(w) + 1, async (pgPool) => {
    const probes = new Probes();
    const taskList = {
      [TASK]: async (payload) => {
        probes.handlerStarted(payload.i);
      },
    };
    const runner = await run({
      pgPool,
      logger,
      concurrency: w,
      noHandleSignals: true,
      taskList,
      preset: preset(w),
    });
    const utils = await makeWorkerUtils({ pgPool, logger });
    await sleep(500); // let the worker LISTEN before the first probe
    const samples = await probes.run(k, (i) => utils.addJob(TASK, { i }));
    await utils.release();
    await runner.stop();
    return samples;
  });
}

await main({ setup, enqueue, drain, latency });
