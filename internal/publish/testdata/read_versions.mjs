// Reads every version of a Lance table with real LanceDB.
// Input (stdin): {dir, table, maxRows, append?: {id, x, vec, y}}; with
// append, LanceDB then adds that row itself (output: appended).
// Output: {versions: [n...], at: {"n": {count, rows: [...]}}}, rows sorted
// by "id" and normalized for JSON: 64-bit integers as strings, vectors as
// arrays of numbers.
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const tbl = await db.openTable(input.table);
const versions = (await tbl.listVersions()).map((v) => Number(v.version));
const out = { versions, at: {} };
for (const v of versions) {
  await tbl.checkout(v);
  const count = await tbl.countRows();
  const rows = (await tbl.query().limit(input.maxRows).toArray()).map(normRow);
  rows.sort((a, b) => Number(a.id) - Number(b.id));
  out.at[String(v)] = { count, rows };
}
await tbl.checkoutLatest();
out.latest = Number(await tbl.version());
if (input.append) {
  // A LanceDB writer commits straight to storage after our versions.
  const r = input.append;
  await tbl.add([{ id: BigInt(r.id), x: r.x, vec: r.vec, y: BigInt(r.y) }]);
  out.appended = { version: Number(await tbl.version()), count: await tbl.countRows() };
}
process.stdout.write(JSON.stringify(out));

function normRow(row) {
  const o = {};
  for (const [k, v] of Object.entries(row)) o[k] = norm(v);
  return o;
}

function norm(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === "bigint") return v.toString();
  if (typeof v !== "object") return v;
  if (typeof v.toArray === "function") return Array.from(v.toArray(), norm);
  if (ArrayBuffer.isView(v) || Array.isArray(v)) return Array.from(v, norm);
  return String(v);
}
