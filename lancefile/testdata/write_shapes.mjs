// Has real LanceDB write one 2.1 table whose columns are shaped so that
// LanceDB's default (and field-metadata-selected) compression picks each
// of its 2.1 encodings: bit-packing of small integers and of definition
// levels, dictionaries of low-cardinality strings, FSST of short and long
// strings, run-length encoding of runs, a constant column, zstd, lz4 and
// byte-stream-split chosen through field metadata, and a fixed-size list
// with null items. It prints the rows as LanceDB reads them back and the
// data files it wrote.
// With extra set it adds the columns whose encodings change in 2.2
// (constant layouts, fixed-width and LZ4-wrapped dictionaries,
// timestamps, dates, all-null pages).
// Input (stdin): {dir, rows, version: "2.1", extra}. Output: {rows: [...],
// files: [abs paths]}; values are normalized as in write_tables.mjs.
import fs from "node:fs";
import path from "node:path";

const input = JSON.parse(await readStdin());
const A = arrow;
const meta = (kv) => new Map(Object.entries(kv));
const f = (name, t, nullable, md) => new A.Field(name, t, nullable, md ? meta(md) : undefined);
const fields = [
  f("seq", new A.Int64(), false),
  f("small_n", new A.Int32(), true),
  f("u8", new A.Uint8(), false),
  f("neg", new A.Int16(), false),
  f("f64", new A.Float64(), false),
  f("b_n", new A.Bool(), true),
  f("dict_s", new A.Utf8(), true),
  f("fsst_s", new A.Utf8(), false),
  f("long_s", new A.Utf8(), true),
  f("runs", new A.Int32(), false),
  f("const", new A.Int64(), false),
  f("zstd_i", new A.Int64(), false, { "lance-encoding:compression": "zstd" }),
  f("lz4_s", new A.Utf8(), true, { "lance-encoding:compression": "lz4" }),
  f("zstd_s", new A.Utf8(), false, { "lance-encoding:compression": "zstd" }),
  f("bss_f", new A.Float32(), false, { "lance-encoding:bss": "on" }),
  f("bss_d", new A.Float64(), true, { "lance-encoding:bss": "on" }),
  f("v4_n", new A.FixedSizeList(4, new A.Field("item", new A.Float32(), true)), true),
];
if (input.extra) {
  fields.push(
    f("ts_us_n", new A.TimestampMicrosecond(), true),
    f("ts_s", new A.TimestampSecond(), false),
    f("ts_ms_utc", new A.Timestamp(A.TimeUnit.MILLISECOND, "UTC"), true),
    f("date_n", new A.Date_(A.DateUnit.DAY), true),
    f("f64_3", new A.Float64(), false),
    f("i32_dict_n", new A.Int32(), true),
    f("const_s", new A.Utf8(), false),
    f("const_b", new A.Bool(), false),
    f("const_f_n", new A.Float32(), true),
    f("const_v4", new A.FixedSizeList(4, new A.Field("item", new A.Float32(), true)), false),
    f("null_i", new A.Int64(), true),
    f("null_s", new A.Utf8(), true),
    f("bin_n", new A.Binary(), true),
  );
}
const schema = new A.Schema(fields);
const colors = ["red", "green", "blue"];

function row(r) {
  const word = (k) => ["alpha", "beta", "gamma", "delta", "omega"][k % 5];
  return {
    seq: BigInt(r),
    small_n: r % 3 === 1 ? null : r % 100,
    u8: r % 17,
    neg: (r % 50) - 25,
    f64: Math.sin(r) * 1000,
    b_n: r % 4 === 3 ? null : r % 3 === 0,
    dict_s: r % 5 === 4 ? null : colors[r % 3],
    fsst_s: `user-${(r * 7919) % 100000}-${word(r)}`,
    long_s: r % 10 === 9 ? null : `${word(r)}:${r}:`.repeat(40).slice(0, 300 + (r % 7)),
    runs: Math.floor(r / 500),
    const: 42n,
    zstd_i: BigInt(r % 1000) * 1000003n,
    lz4_s: r % 6 === 5 ? null : `lz4 value ${r % 250}`,
    zstd_s: `zstd ${word(r)} ${r}`,
    bss_f: r / 7,
    bss_d: r % 9 === 8 ? null : r * 0.001 + 100,
    v4_n: r % 4 === 1 ? null : [r, r % 3 === 0 ? null : r + 0.5, r + 0.25, -r],
    // Arrow JS takes timestamps and dates in milliseconds.
    ts_us_n: r % 4 === 1 ? null : 1700000000000 + r * 3,
    ts_s: (1700000000 + r * 60) * 1000,
    ts_ms_utc: r % 5 === 2 ? null : 1600000000000 + r * 7,
    date_n: r % 3 === 0 ? null : (19000 + (r % 400)) * 86400000,
    f64_3: [0.5, 1.25, -3][r % 3],
    i32_dict_n: r % 8 === 7 ? null : [100000, -7, 123456789, 5][r % 4],
    const_s: "same",
    const_b: true,
    const_f_n: r % 2 === 0 ? null : 2.5,
    const_v4: [1, 2, 3, 4],
    null_i: null,
    null_s: null,
    bin_n: r % 2 ? null : Buffer.from(`bin-${r % 100}|`.repeat(8)),
  };
}

const rows = [];
const names = fields.map((fd) => fd.name);
for (let r = 0; r < input.rows; r++) {
  const all = row(r);
  rows.push(Object.fromEntries(names.map((n) => [n, all[n]])));
}
const db = await lancedb.connect(input.dir);
// makeArrowTable drops field metadata; a table created from the schema
// keeps it, and the encoder reads it from there.
const tbl = await db.createEmptyTable("shapes", schema, {
  storageOptions: { new_table_data_storage_version: input.version || "2.1" },
});
await tbl.add(lancedb.makeArrowTable(rows, { schema }));
const back = await tbl.query().limit(input.rows + 1).toArray();
const dataDir = path.join(input.dir, "shapes.lance", "data");
process.stdout.write(JSON.stringify({
  rows: back.map(normRow),
  files: fs.readdirSync(dataDir).map((f) => path.join(dataDir, f)),
}));

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
