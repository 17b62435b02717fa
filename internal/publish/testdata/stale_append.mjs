// A stale LanceDB writer: opens the table, signals input.ready, waits for
// the file input.go (meanwhile cellguard publishes a new version), then
// appends input.rows through its stale handle, which must rebase over
// the version it did not see. Prints what a fresh handle then reads.
// Input (stdin): {dir, table, ready, go, rows: [{id, x}]}.
import * as fs from "node:fs";
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const tbl = await db.openTable(input.table);
const before = Number(await tbl.version());
fs.writeFileSync(input.ready, "ready");
const deadline = Date.now() + 120000;
while (!fs.existsSync(input.go)) {
  if (Date.now() > deadline) throw new Error("no go signal");
  await new Promise((r) => setTimeout(r, 20));
}
await tbl.add(input.rows.map((r) => ({ id: BigInt(r.id), x: r.x })));
const after = Number(await tbl.version());
const fresh = await (await lancedb.connect(input.dir)).openTable(input.table);
const ids = (await fresh.query().toArray()).map((r) => Number(r.id)).sort((a, b) => a - b);
const versions = (await fresh.listVersions()).map((v) => Number(v.version));
process.stdout.write(JSON.stringify({ before, after, ids, versions }));
