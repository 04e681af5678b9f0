// Enqueue a fan-out/fan-in pipeline in one call: PARTS jobs of type 1 that each count a slice,
// and a merge job (type 1 too) that waits for all of them and adds their counts up; all in a
// batch whose "finish" callback (type 2, OUTBOX) reports when every job of it has ended.
// Usage: node pipeline.js postgresql://... [PARTS]
// Prints the batch id, then the merge job's id.
import pg from "pg";

const [dsn, parts = "4"] = process.argv.slice(2);
const count = Number(parts);
const client = new pg.Client({ connectionString: dsn });
await client.connect();
await client.query("begin");
const { rows: [{ batch }] } = await client.query(
  "select pyjobq.job_batch_open($1::jsonb) as batch",
  [JSON.stringify({ finish: { job_type: 2, payload: { report: "pipeline" } } })],
);
// Rows 1..PARTS are the parts; the last row names them by position: it waits for them all.
const payloads = Array.from({ length: count }, (_, i) => ({ step: "count", slice: i + 1 }));
payloads.push({ step: "merge" });
const dependsOn = payloads.map((_, i) =>
  i < count ? null : JSON.stringify(Array.from({ length: count }, (_, j) => j + 1)),
);
const { rows } = await client.query(
  "select ord, job_id from pyjobq.job_enqueue_many(1, $1::jsonb[],"
    + " p_depends_on => $2::jsonb[], p_batch_id => $3::uuid) order by ord",
  [payloads.map((p) => JSON.stringify(p)), dependsOn, batch],
);
await client.query("select pyjobq.job_batch_close($1::uuid)", [batch]);
await client.query("commit");
console.log(batch);
console.log(rows[rows.length - 1].job_id);
await client.end();
