// Has real LanceDB write one table per requested storage version, with
// every type the Go reader handles, and prints the rows as LanceDB reads
// them back plus the data files it wrote.
// Input (stdin): {dir, rows, versions: ["2.0", "2.1"]}.
// Output: {"2.0": {rows: [...], files: [abs paths]}, ...}; values are
// normalized as in read_table.mjs.
import fs from "node:fs";
import path from "node:path";

const input = JSON.parse(await readStdin());
const A = arrow;
const vec = (d) => new A.FixedSizeList(d, new A.Field("item", new A.Float32(), true));
const types = {
  i8: new A.Int8(), i16: new A.Int16(), i32: new A.Int32(), i64: new A.Int64(),
  u8: new A.Uint8(), u16: new A.Uint16(), u32: new A.Uint32(), u64: new A.Uint64(),
  f32: new A.Float32(), f64: new A.Float64(), b: new A.Bool(),
  s: new A.Utf8(), bin: new A.Binary(), // LanceDB JS cannot build LargeUtf8 input
  v4: vec(4), v96: vec(96),
};
const fields = [];
for (const [name, t] of Object.entries(types)) {
  fields.push(new A.Field(name, t, false), new A.Field(name + "_n", t, true));
}
const schema = new A.Schema(fields);

function value(name, r) {
  const str = r % 7 === 0 ? "" : (r % 5 === 0 ? "low" : `row-${r}`);
  switch (name) {
    case "i8": return ((r + 128) % 256) - 128;
    case "i16": return (r * 3) % 32768;
    case "i32": return r * 7 - 1000;
    case "i64": return BigInt(r) * -123456789n;
    case "u8": return r % 256;
    case "u16": return (r * 5) % 65536;
    case "u32": return (r * 2654435761) % 4294967296;
    case "u64": return BigInt(r) << 33n;
    case "f32": return r / 4;
    case "f64": return r * 1.5e-3;
    case "b": return r % 2 === 0;
    case "s": return str;
    case "bin": return Buffer.from(str);
    case "v4": case "v96": {
      const d = name === "v4" ? 4 : 96;
      return Array.from({ length: d }, (_, k) => Math.fround(r + k / 100));
    }
  }
}

const rows = [];
for (let r = 0; r < input.rows; r++) {
  const row = {};
  for (const name of Object.keys(types)) {
    row[name] = value(name, r);
    row[name + "_n"] = r % 3 === 1 ? null : value(name, r);
  }
  rows.push(row);
}

const out = {};
const db = await lancedb.connect(input.dir);
for (const v of input.versions) {
  const name = "t" + v.replace(".", "_");
  const data = lancedb.makeArrowTable(rows, { schema });
  const tbl = await db.createTable(name, data, { storageOptions: { new_table_data_storage_version: v } });
  const back = await tbl.query().limit(input.rows + 1).toArray();
  const dataDir = path.join(input.dir, name + ".lance", "data");
  out[v] = {
    rows: back.map(normRow),
    files: fs.readdirSync(dataDir).map((f) => path.join(dataDir, f)),
  };
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
