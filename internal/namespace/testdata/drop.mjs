// Drops a table with unmodified LanceDB through the namespace.
// Input: {uri, table, writer: headers, admin: headers}. The writer
// creates the table and adds a row; the writer, then the admin, call
// dropTable; then the writer lists, opens and re-creates the table.
// Output: {before, workerDrop, adminDrop, after, open, recreate,
// dropAgain}: table names, or null for a call that succeeded and the
// error message of one that failed.
const input = JSON.parse(await readStdin());
const connect = (headers) => lancedb.connectNamespace("rest", { uri: input.uri, headers: headers ?? {} });
const attempt = async (fn) => {
  try {
    await fn();
    return null;
  } catch (e) {
    return String(e.message ?? e);
  }
};
const db = await connect(input.writer);
const tbl = await db.createTable(input.table, [{ id: 1, x: 10 }]);
await tbl.add([{ id: 2, x: 20 }]);
const before = await db.tableNames();
const workerDrop = await attempt(() => db.dropTable(input.table));
const admin = await connect(input.admin);
const adminDrop = await attempt(() => admin.dropTable(input.table));
const after = await db.tableNames();
const open = await attempt(async () => (await db.openTable(input.table)).countRows());
const recreate = await attempt(() => db.createTable(input.table, [{ id: 3, x: 30 }]));
const dropAgain = await attempt(() => admin.dropTable(input.table));
process.stdout.write(JSON.stringify({ before, workerDrop, adminDrop, after, open, recreate, dropAgain }));
process.exit(0);
