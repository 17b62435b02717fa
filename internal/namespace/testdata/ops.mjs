// Runs table operations with unmodified LanceDB through the namespace.
// Input: {uri, table, headers?, ops: [{op: "create", rows, storage?} | {op:
// "add", rows} | {op: "update", where, values} | {op: "optimize"} | {op:
// "checkout", version} | {op: "wait", path} (until the file exists)],
// timeoutMs?}. Stops at the first failing op.
// Output: {results: [{version} | {error}], rows (latest, sorted by id),
// versions}.
import { existsSync } from "node:fs";
const input = JSON.parse(await readStdin());
const db = await lancedb.connectNamespace("rest", { uri: input.uri, headers: input.headers ?? {} });
const timeout = (ms) => new Promise((_, rej) => setTimeout(() => rej(new Error("TIMEOUT")), ms));
const bounded = (p) => (input.timeoutMs ? Promise.race([p, timeout(input.timeoutMs)]) : p);
const results = [];
let tbl = null;
for (const o of input.ops) {
  try {
    switch (o.op) {
      case "create":
        tbl = await bounded(db.createTable(input.table, o.rows, o.storage ? { dataStorageVersion: o.storage } : {}));
        break;
      case "wait":
        while (!existsSync(o.path)) await new Promise((r) => setTimeout(r, 20));
        continue;
      case "open": tbl = await bounded(db.openTable(input.table)); break;
      case "add": await bounded(tbl.add(o.rows)); break;
      case "update": await bounded(tbl.update({ where: o.where, values: o.values })); break;
      case "optimize": await bounded(tbl.optimize({ cleanupOlderThan: new Date(Date.now() + 1000), deleteUnverified: true })); break;
      case "checkout": await bounded(tbl.checkout(o.version)); break;
      case "names": results.push({ names: await bounded(db.tableNames()) }); continue;
    }
    results.push({ version: Number(await tbl.version()) });
  } catch (e) {
    results.push({ error: String(e.message ?? e) });
    break;
  }
}
let rows = null, versions = null;
try {
  const reader = await (await lancedb.connectNamespace("rest", { uri: input.uri, headers: input.headers ?? {} })).openTable(input.table);
  rows = (await reader.query().toArray()).map((r) => {
    const o = {};
    for (const [k, v] of Object.entries(r)) o[k] = typeof v === "bigint" ? Number(v) : v;
    return o;
  }).sort((a, b) => a.id - b.id);
  versions = (await reader.listVersions()).map((v) => Number(v.version));
} catch (e) {
  rows = String(e.message ?? e);
}
process.stdout.write(JSON.stringify({ results, rows, versions }));
process.exit(0);
