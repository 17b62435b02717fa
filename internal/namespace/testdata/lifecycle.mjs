// Drives a table through the REST namespace with unmodified LanceDB:
// create, add, update, delete, add a column; then reads every version.
// Input: {uri, table, headers?}. Output: {steps: [{op, version}], versions,
// at: {"n": {count, rows}}}.
const input = JSON.parse(await readStdin());
const db = await lancedb.connectNamespace("rest", { uri: input.uri, headers: input.headers ?? {} });
const steps = [];
const tbl = await db.createTable(input.table, [
  { id: 1, x: 10 }, { id: 2, x: 20 }, { id: 3, x: 30 },
]);
steps.push({ op: "create", version: Number(await tbl.version()) });
await tbl.add([{ id: 4, x: 40 }, { id: 5, x: 50 }]);
steps.push({ op: "add", version: Number(await tbl.version()) });
await tbl.update({ where: "id = 2", values: { x: 200 } });
steps.push({ op: "update", version: Number(await tbl.version()) });
await tbl.delete("id = 3");
steps.push({ op: "delete", version: Number(await tbl.version()) });
await tbl.addColumns([{ name: "y", valueSql: "x * 2" }]);
steps.push({ op: "addColumns", version: Number(await tbl.version()) });

const reader = await (await lancedb.connectNamespace("rest", { uri: input.uri, headers: input.headers ?? {} })).openTable(input.table);
const versions = (await reader.listVersions()).map((v) => Number(v.version));
const at = {};
for (const v of versions) {
  await reader.checkout(v);
  const rows = (await reader.query().toArray()).map((r) => {
    const o = {};
    for (const [k, val] of Object.entries(r)) o[k] = typeof val === "bigint" ? Number(val) : val;
    return o;
  });
  rows.sort((a, b) => a.id - b.id);
  at[String(v)] = { count: await reader.countRows(), rows };
}
const names = await db.tableNames();
process.stdout.write(JSON.stringify({ steps, versions, at, names }));
