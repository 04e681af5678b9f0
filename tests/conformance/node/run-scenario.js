// Runs one conformance scenario (tests/conformance/sql/NN_name.sql) through
// node-postgres and prints what `psql -X -a -q` prints for it, so that the
// output can be compared with the same golden file (tests/conformance/expected).
//
// Each statement is sent on its own with the simple query protocol, exactly as
// written in the scenario once psql variables are substituted. Only the psql
// subset the scenarios use is understood: echo of every input line (-a),
// aligned tables, errors under `\set VERBOSITY sqlstate`, `\set`, `\gset`,
// and `:name` / `:'name'` interpolation. Anything else is refused rather than
// imitated, so a scenario cannot silently pass here while meaning something
// else in psql.
//
// Usage: node run-scenario.js SCENARIO.sql   (connection from PGHOST, PGPORT,
// PGUSER, PGDATABASE, PGPASSWORD, as libpq reads them)

import { readFileSync } from "node:fs";
import pg from "pg";

// psql right-aligns these types (print.c, column_type_alignment).
const NUMERIC_TYPES = new Set([20, 21, 23, 26, 28, 29, 700, 701, 790, 1700, 5069]);

// Every value as the server's text, which is what psql prints.
const RAW_TEXT = { getTypeParser: () => (value) => value };

class Refused extends Error {}

const out = [];
const print = (line) => out.push(line);

function renderTable(result) {
  const names = result.fields.map((f) => f.name);
  const right = result.fields.map((f) => NUMERIC_TYPES.has(f.dataTypeID));
  const rows = result.rows.map((row) => row.map((v) => (v === null ? "" : String(v))));
  for (const row of rows) {
    if (row.some((v) => v.includes("\n"))) {
      throw new Refused("multi-line values are not rendered; select them differently");
    }
  }
  const width = (s) => [...s].length;
  const widths = names.map((name, i) => Math.max(width(name), ...rows.map((r) => width(r[i]))));
  const pad = (s, w) => s + " ".repeat(w - width(s));
  const header = names.map((name, i) => {
    const room = widths[i] - width(name);
    return " ".repeat(Math.floor(room / 2)) + name + " ".repeat(Math.ceil(room / 2));
  });
  print(" " + header.join(" | ") + " ");
  print(widths.map((w) => "-".repeat(w + 2)).join("+"));
  for (const row of rows) {
    const cells = row.map((v, i) => {
      if (right[i]) return " ".repeat(widths[i] - width(v)) + v;
      return i === row.length - 1 ? v : pad(v, widths[i]);
    });
    print(" " + cells.join(" | "));
  }
  print(rows.length === 1 ? "(1 row)" : `(${rows.length} rows)`);
  print("");
}

// psql's lexer, reduced: tracks quotes and comments across lines, finds the
// statement-ending semicolon and the start of a backslash command, and
// substitutes variables outside quotes.
class Lexer {
  constructor(vars) {
    this.vars = vars;
    this.state = null; // null, "'", '"', "/*", or a dollar-quote tag
    this.depth = 0;
  }

  quoteLiteral(value) {
    if (value.includes("\\")) throw new Refused("backslash in an interpolated literal");
    return "'" + value.replaceAll("'", "''") + "'";
  }

  // Returns { text, end, meta }: the query text of this line (variables
  // substituted), whether a semicolon ended the statement, and the
  // backslash command that follows, if any.
  scan(line) {
    let text = "";
    let i = 0;
    while (i < line.length) {
      const ch = line[i];
      const next = line[i + 1];
      if (this.state === "'" || this.state === '"') {
        text += ch;
        if (ch === this.state) {
          if (next === this.state) {
            text += next;
            i += 2;
            continue;
          }
          this.state = null;
        }
        i += 1;
      } else if (this.state === "/*") {
        text += ch;
        if (ch === "*" && next === "/") {
          text += next;
          this.state = null;
          i += 2;
          continue;
        }
        i += 1;
      } else if (this.state !== null) {
        if (line.startsWith(this.state, i)) {
          text += this.state;
          i += this.state.length;
          this.state = null;
        } else {
          text += ch;
          i += 1;
        }
      } else if (ch === "-" && next === "-") {
        break;
      } else if (ch === "/" && next === "*") {
        this.state = "/*";
        text += "/*";
        i += 2;
      } else if (ch === "'" || ch === '"') {
        if (ch === "'" && /[eE]$/.test(text) && !/[A-Za-z0-9_][eE]$/.test(text)) {
          throw new Refused("E'' strings are not supported");
        }
        this.state = ch;
        text += ch;
        i += 1;
      } else if (ch === "$" && !/[A-Za-z0-9_]$/.test(text)) {
        const tag = /^\$([A-Za-z_][A-Za-z0-9_]*)?\$/.exec(line.slice(i));
        if (tag) {
          this.state = tag[0];
          text += tag[0];
          i += tag[0].length;
        } else {
          text += ch;
          i += 1;
        }
      } else if (ch === ":" && next === ":") {
        text += "::";
        i += 2;
      } else if (ch === ":") {
        const quoted = /^:'([A-Za-z0-9_]+)'/.exec(line.slice(i));
        const plain = /^:([A-Za-z0-9_]+)/.exec(line.slice(i));
        if (quoted && this.vars.has(quoted[1])) {
          text += this.quoteLiteral(this.vars.get(quoted[1]));
          i += quoted[0].length;
        } else if (plain && this.vars.has(plain[1])) {
          text += this.vars.get(plain[1]);
          i += plain[0].length;
        } else {
          text += ch;
          i += 1;
        }
      } else if (ch === "\\") {
        return { text, end: false, meta: line.slice(i) };
      } else if (ch === ";" && this.depth === 0) {
        const rest = line.slice(i + 1).trim();
        if (rest !== "" && !rest.startsWith("--")) {
          throw new Refused("one statement per line, please");
        }
        return { text: text + ";", end: true, meta: null };
      } else {
        if (ch === "(") this.depth += 1;
        if (ch === ")") this.depth -= 1;
        text += ch;
        i += 1;
      }
    }
    return { text, end: false, meta: null };
  }
}

async function main() {
  const [scriptPath] = process.argv.slice(2);
  if (!scriptPath) throw new Refused("usage: node run-scenario.js SCENARIO.sql");
  const lines = readFileSync(scriptPath, "utf8").replace(/\n$/, "").split("\n");
  const vars = new Map();
  const lexer = new Lexer(vars);
  const client = new pg.Client({ types: RAW_TEXT });
  await client.connect();
  client.on("notice", (msg) => print(`${msg.severity}:  ${msg.code}`));
  let buffer = [];

  async function run(gset) {
    const sql = buffer.join("\n").trim();
    buffer = [];
    let result;
    try {
      result = await client.query({ text: sql, rowMode: "array" });
    } catch (error) {
      if (!error.code) throw error;
      print(`${error.severity ?? "ERROR"}:  ${error.code}`);
      return;
    }
    if (gset !== null) {
      if (result.rows.length !== 1) {
        throw new Refused(`\\gset needs exactly one row, got ${result.rows.length}`);
      }
      result.fields.forEach((field, i) => {
        const value = result.rows[0][i];
        if (value === null) vars.delete(gset + field.name);
        else vars.set(gset + field.name, String(value));
      });
    } else if (result.fields.length > 0) {
      renderTable(result);
    }
  }

  for (const line of lines) {
    print(line);
    const { text, end, meta } = lexer.scan(line);
    if (text.trim() !== "" || buffer.length > 0) buffer.push(text);
    if (end) {
      await run(null);
    } else if (meta !== null) {
      const [command, ...args] = meta.trim().split(/\s+/);
      if (command === "\\gset") {
        await run(args[0] ?? "");
      } else if (command === "\\set" && buffer.join("").trim() === "") {
        buffer = [];
        if (args[0] === "VERBOSITY" && args[1] !== "sqlstate") {
          throw new Refused("errors are only rendered as with \\set VERBOSITY sqlstate");
        }
        vars.set(args[0], args.slice(1).join(""));
      } else {
        throw new Refused(`unsupported psql command: ${meta}`);
      }
    }
  }
  if (buffer.join("").trim() !== "") await run(null);
  await client.end();
  process.stdout.write(out.map((l) => l + "\n").join(""));
}

main().catch((error) => {
  process.stdout.write(out.map((l) => l + "\n").join(""));
  console.error(error instanceof Refused ? `run-scenario: ${error.message}` : error);
  process.exit(2);
});
