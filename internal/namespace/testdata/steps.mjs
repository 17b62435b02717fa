// The everyday steps of a LanceDB user, on one table: either a local
// directory (input.dir) or through a REST namespace (input.uri). Every
// step runs whatever the previous ones did; each reports whether it
// succeeded, its error, and then the table's row count and schema.
// A step that does not end within input.stepMs (default 60000) fails
// with "TIMEOUT" (LanceDB 0.31 retries a refused commit for 30 minutes).
// Input: {dir | uri, headers?, table, stepMs?}. Output: {steps: [{op, ok, error, count, schema}]}.
const input = JSON.parse(await readStdin());
const connect = () =>
  input.uri ? lancedb.connectNamespace("rest", { uri: input.uri, headers: input.headers ?? {} }) : lancedb.connect(input.dir);
const db = await connect();
const steps = [];
let tbl = null;
const schemaOf = async (t) => (await t.schema()).fields.map((f) => `${f.name}:${f.type}`).join(",");
const schema = new arrow.Schema([
  new arrow.Field("id", new arrow.Int64(), true),
  new arrow.Field("x", new arrow.Float64(), true),
  new arrow.Field("s", new arrow.Utf8(), true),
  new arrow.Field("tags", new arrow.List(new arrow.Field("item", new arrow.Utf8(), true)), true),
  new arrow.Field("vec", new arrow.FixedSizeList(4, new arrow.Field("item", new arrow.Float32(), true)), true),
]);
const vec = (i) => [i, i + 1, i + 2, i + 3].map((v) => v / 8);
const rows = (from, n) =>
  Array.from({ length: n }, (_, k) => ({ id: BigInt(from + k), x: (from + k) * 1.5, s: `s${(from + k) % 7}`, tags: [`t${(from + k) % 3}`], vec: vec(from + k) }));
async function step(op, f) {
  const s = { op, ok: true, error: null };
  try {
    const r = await Promise.race([f(), new Promise((_, rej) => setTimeout(() => rej(new Error("TIMEOUT")), input.stepMs ?? 60000))]);
    if (r !== undefined) s.result = r;
  } catch (e) {
    s.ok = false;
    s.error = String(e.message ?? e).slice(0, 600);
  }
  try {
    if (tbl) {
      s.count = await tbl.countRows();
      s.schema = await schemaOf(tbl);
    }
  } catch (e) {
    s.after = String(e.message ?? e).slice(0, 300);
  }
  steps.push(s);
}
await step("create", async () => { tbl = await db.createTable(input.table, rows(0, 300), { schema }); });
await step("add", async () => { await tbl.add(rows(300, 50)); });
await step("update", async () => { await tbl.update({ where: "id < 10", values: { x: -1 } }); });
await step("delete", async () => { await tbl.delete("id >= 340"); });
await step("mergeInsert", async () => {
  await tbl.mergeInsert("id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute(rows(330, 20));
});
await step("addColumns", async () => { await tbl.addColumns([{ name: "y", valueSql: "x * 2" }]); });
await step("alterColumns", async () => { await tbl.alterColumns([{ path: "y", rename: "y2" }]); });
await step("dropColumns", async () => { await tbl.dropColumns(["y2"]); });
await step("index btree", async () => { await tbl.createIndex("id", { config: lancedb.Index.btree() }); });
await step("index bitmap", async () => { await tbl.createIndex("s", { config: lancedb.Index.bitmap() }); });
await step("index labelList", async () => { await tbl.createIndex("tags", { config: lancedb.Index.labelList() }); });
await step("index ivfPq", async () => {
  await tbl.createIndex("vec", { config: lancedb.Index.ivfPq({ numPartitions: 2, numSubVectors: 2 }) });
});
await step("vectorSearch", async () => (await tbl.vectorSearch(vec(5)).bypassVectorIndex().limit(3).toArray()).length);
await step("optimize", async () => { await tbl.optimize(); });
await step("tags", async () => {
  const v = await tbl.version();
  await (await tbl.tags()).create("t1", v);
  return Object.keys(await (await tbl.tags()).list());
});
await step("checkout", async () => { await tbl.checkout(2); });
await step("restore", async () => { await tbl.restore(); });
await step("listVersions", async () => (await tbl.listVersions()).length > 0);
await step("reopen", async () => { tbl = await (await connect()).openTable(input.table); });
await step("tableNames", async () => await db.tableNames());
await step("dropTable", async () => {
  await db.dropTable(input.table);
  tbl = null;
  return await db.tableNames();
});
process.stdout.write(JSON.stringify({ steps }));
process.exit(0); // a step that timed out may still be retrying
