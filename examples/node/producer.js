// Enqueue COUNT jobs of type 1 (SEARCH).  Usage: node producer.js postgresql://... [COUNT]
import pg from "pg";

const [dsn, count = "10"] = process.argv.slice(2);
const client = new pg.Client({ connectionString: dsn });
await client.connect();
const payloads = Array.from({ length: Number(count) }, (_, i) => ({ query: `item ${i + 1}` }));
// pg sends a JS array of objects as a JSON array; the cast makes it jsonb[].
const { rows } = await client.query(
  "select job_id from pyjobq.job_enqueue_many(1, $1::jsonb[])",
  [payloads.map((p) => JSON.stringify(p))],
);
for (const row of rows) console.log(row.job_id);
await client.end();
