// Drives an indexed table through the REST namespace with unmodified
// LanceDB: create, the index kinds, searches, an add after indexing,
// optimize() (compaction and index optimisation), a replaced and a
// dropped index, tags, checkout + restore. Each step records the version
// it made or its error; after every step a second handle reads what
// LanceDB knows of the indices and what queries through them answer.
// Input: {uri | dir, table}: through the namespace at uri, or on a local
// LanceDB directory dir (the same steps, for comparison). Output: {steps: [{op, version, error, indices,
// stats, scalar, fts, vector, bitmap}]}.
const input = JSON.parse(await readStdin());
const conn = () => (input.dir ? lancedb.connect(input.dir) : lancedb.connectNamespace("rest", { uri: input.uri }));
const db = await conn();
const vec = (id) => [id, id * 0.5, -id, 1];
const rows = (from, n) =>
  Array.from({ length: n }, (_, i) => {
    const id = from + i;
    return { id, x: id + 0.5, cat: `c${id % 3}`, text: `word${id % 5} row${id}`, vec: vec(id) };
  });
const schema = new arrow.Schema([
  new arrow.Field("id", new arrow.Int64(), false),
  new arrow.Field("x", new arrow.Float64(), true),
  new arrow.Field("cat", new arrow.Utf8(), true),
  new arrow.Field("text", new arrow.Utf8(), true),
  new arrow.Field("vec", new arrow.FixedSizeList(4, new arrow.Field("item", new arrow.Float32(), true)), true),
]);
const ids = (rs) => rs.map((r) => Number(r.id));
const steps = [];
let tbl = null;

async function look() {
  const r = await (await conn()).openTable(input.table);
  const out = { indices: [], stats: {} };
  for (const ix of await r.listIndices()) {
    out.indices.push(ix.name);
    const st = await r.indexStats(ix.name);
    out.stats[ix.name] = [st?.numIndexedRows ?? null, st?.numUnindexedRows ?? null];
  }
  out.indices.sort();
  const q = r.query().where("id = 5").select(["id"]);
  out.scalar = { ids: ids(await q.toArray()), plan: (await q.explainPlan()).includes("ScalarIndexQuery") };
  out.bitmap = ids(await r.query().where("cat = 'c1' AND id < 8").select(["id"]).toArray()).sort((a, b) => a - b);
  try {
    out.fts = ids(await r.query().fullTextSearch("row7", { columns: ["text"] }).select(["id"]).toArray());
  } catch (e) {
    out.fts = String(e.message).split("\n")[0];
  }
  const ann = await r.query().nearestTo(vec(7)).column("vec").refineFactor(10).select(["id"]).limit(2).toArray();
  out.vector = ids(ann);
  return out;
}

async function step(op, fn) {
  const s = { op };
  try {
    await fn();
    s.version = Number(await tbl.version());
  } catch (e) {
    s.error = String(e?.message ?? e).split("\n")[0];
  }
  try {
    Object.assign(s, await look());
  } catch (e) {
    s.lookError = String(e?.message ?? e).split("\n")[0];
  }
  steps.push(s);
}

await step("create", async () => {
  tbl = await db.createTable(input.table, rows(0, 300), { schema });
});
await step("btree(id)", () => tbl.createIndex("id", { config: lancedb.Index.btree() }));
await step("bitmap(cat)", () => tbl.createIndex("cat", { config: lancedb.Index.bitmap() }));
await step("fts(text)", () => tbl.createIndex("text", { config: lancedb.Index.fts() }));
await step("ivfPq(vec)", () => tbl.createIndex("vec", { config: lancedb.Index.ivfPq({ numPartitions: 2, numSubVectors: 2 }) }));
await step("add", () => tbl.add(rows(300, 20)));
await step("delete id = 7", () => tbl.delete("id = 7"));
await step("update x where id = 5", () => tbl.update({ where: "id = 5", values: { x: 99 } }));
await step("optimize", () => tbl.optimize());
await step("tag v1 = 4", async () => (await tbl.tags()).create("v1", 4));
await step("checkout tag v1", () => tbl.checkout("v1"));
await step("checkoutLatest", () => tbl.checkoutLatest());
await step("btree(id) replace", () => tbl.createIndex("id", { config: lancedb.Index.btree(), replace: true }));
await step("dropIndex cat_idx", () => tbl.dropIndex("cat_idx"));
await step("restore 5", async () => {
  await tbl.checkout(5);
  await tbl.restore();
});
process.stdout.write(JSON.stringify({ steps }));
