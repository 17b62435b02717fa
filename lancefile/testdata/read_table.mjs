// Reads a Lance table with real LanceDB and prints its rows as JSON.
// Input (stdin): {dir, table, rows, search?: {column, vector, k}}.
// Output: {rows: [...], search?: [...]} where every value is normalized
// for JSON: 64-bit integers as strings, binary as "hex:..", vectors as
// arrays of numbers.
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const tbl = await db.openTable(input.table);
const out = { rows: (await tbl.query().limit(input.rows + 1).toArray()).map(normRow) };
if (input.search) {
  const s = input.search;
  const hits = await tbl.vectorSearch(s.vector).column(s.column).limit(s.k).toArray();
  out.search = hits.map(normRow);
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
  if (v instanceof Uint8Array) return "hex:" + Buffer.from(v).toString("hex");
  if (typeof v !== "object") return v;
  // Arrow vectors (list values): get(i) keeps null items, toArray would not.
  if (typeof v.get === "function" && typeof v.length === "number") {
    return Array.from({ length: v.length }, (_, i) => norm(v.get(i)));
  }
  if (typeof v.toArray === "function") return Array.from(v.toArray(), norm);
  if (ArrayBuffer.isView(v) || Array.isArray(v)) return Array.from(v, norm);
  return String(v);
}
