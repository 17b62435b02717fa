// Creates a Lance table with real LanceDB: version 1 from input.first,
// version 2 appends input.second; then input.deleteWhere deletes rows
// (Lance writes an .arrow deletion file) and input.index adds a scalar
// index on "id". Input rows are {id, x, vec}.
// Input (stdin): {dir, table, first, second, deleteWhere?, index?}.
// Output: {version}.
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const schema = new arrow.Schema([
  new arrow.Field("id", new arrow.Int64(), false),
  new arrow.Field("x", new arrow.Float64(), true),
  new arrow.Field("vec", new arrow.FixedSizeList(4, new arrow.Field("item", new arrow.Float32(), true)), true),
]);
const rows = (rs) => rs.map((r) => ({ id: BigInt(r.id), x: r.x, vec: r.vec }));
const tbl = await db.createTable(input.table, rows(input.first), { schema });
await tbl.add(rows(input.second));
if (input.deleteWhere) await tbl.delete(input.deleteWhere);
if (input.index) await tbl.createIndex("id");
process.stdout.write(JSON.stringify({ version: Number(await tbl.version()) }));
