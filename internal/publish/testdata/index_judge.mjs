// Asks LanceDB, at each listed version of a table, what it knows of the
// table's indices and what queries that use them answer.
// Input (stdin): {dir, table, versions, scalar: [{where}], fts: [term],
// vector: [{q, k}]}.
// Output: {at: {"v": {indices: [{name, type, columns, indexed, unindexed}],
// scalar: [{ids, plan}], fts: [ids], vector: [{ids, exact}]}}}; ids sorted
// ascending as numbers, except vector ids in result order.
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const tbl = await db.openTable(input.table);
const ids = (rows) => rows.map((r) => Number(r.id));
const out = { at: {} };
for (const v of input.versions) {
  await tbl.checkout(v);
  const at = { indices: [], scalar: [], fts: [], vector: [] };
  for (const ix of await tbl.listIndices()) {
    const st = await tbl.indexStats(ix.name);
    at.indices.push({ name: ix.name, type: ix.indexType, columns: ix.columns, indexed: st?.numIndexedRows ?? null, unindexed: st?.numUnindexedRows ?? null });
  }
  at.indices.sort((a, b) => (a.name < b.name ? -1 : 1));
  for (const s of input.scalar) {
    const q = tbl.query().where(s.where).select(["id"]);
    at.scalar.push({ ids: ids(await q.toArray()).sort((a, b) => a - b), plan: await q.explainPlan() });
  }
  for (const term of input.fts) {
    const rows = await tbl.query().fullTextSearch(term, { columns: ["text"] }).select(["id"]).limit(100).toArray();
    at.fts.push(ids(rows).sort((a, b) => a - b));
  }
  for (const s of input.vector) {
    const ann = await tbl.query().nearestTo(s.q).column("vec").refineFactor(10).select(["id"]).limit(s.k).toArray();
    const exact = await tbl.query().nearestTo(s.q).column("vec").bypassVectorIndex().select(["id"]).limit(s.k).toArray();
    at.vector.push({ ids: ids(ann), exact: ids(exact) });
  }
  out.at[String(v)] = at;
}
process.stdout.write(JSON.stringify(out));
