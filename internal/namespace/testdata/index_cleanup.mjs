// Through the namespace: an indexed table (btree on id, IVF-PQ on vec),
// rows added and deleted, then optimize() with cleanup of everything older
// than now: LanceDB compacts, merges the indices and deletes the old
// manifests and the files only they used. Then (step "look") reads the
// latest version's indices and answers; with input.phase = "look" it only
// reads.
// Input: {uri, table, phase}. Output: {versions, indices, stats, ids, plan, ann}.
const input = JSON.parse(await readStdin());
const db = await lancedb.connectNamespace("rest", { uri: input.uri });
const vec = (id) => [id, id * 0.5, -id, 1];
const rows = (from, n) => Array.from({ length: n }, (_, i) => ({ id: from + i, x: from + i + 0.5, vec: vec(from + i) }));
const schema = new arrow.Schema([
  new arrow.Field("id", new arrow.Int64(), false),
  new arrow.Field("x", new arrow.Float64(), true),
  new arrow.Field("vec", new arrow.FixedSizeList(4, new arrow.Field("item", new arrow.Float32(), true)), true),
]);
const out = {};
if (input.phase === "build") {
  const tbl = await db.createTable(input.table, rows(0, 300), { schema });
  await tbl.createIndex("id", { config: lancedb.Index.btree() });
  await tbl.createIndex("vec", { config: lancedb.Index.ivfPq({ numPartitions: 2, numSubVectors: 2 }) });
  await tbl.add(rows(300, 20));
  await tbl.delete("id < 200");
  out.before = Number(await tbl.version());
  await tbl.optimize({ cleanupOlderThan: new Date(Date.now() + 1000), deleteUnverified: true });
  out.after = Number(await tbl.version());
}
const r = await db.openTable(input.table);
out.versions = (await r.listVersions()).map((v) => Number(v.version));
out.indices = (await r.listIndices()).map((ix) => ix.name).sort();
out.stats = {};
for (const n of out.indices) {
  const st = await r.indexStats(n);
  out.stats[n] = [st.numIndexedRows, st.numUnindexedRows];
}
const q = r.query().where("id = 5 OR id = 205 OR id = 1002").select(["id"]);
out.ids = (await q.toArray()).map((x) => Number(x.id)).sort((a, b) => a - b);
out.plan = (await q.explainPlan()).includes("ScalarIndexQuery");
out.ann = (await r.query().nearestTo(vec(1002)).column("vec").refineFactor(10).select(["id"]).limit(1).toArray()).map((x) => Number(x.id));
out.count = await r.countRows();
process.stdout.write(JSON.stringify(out));
