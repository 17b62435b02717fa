// Creates a Lance table with real LanceDB and indexes it: rows
// {id, x, text, vec} from input.rows, then a btree on id, a btree on x,
// an FTS index on text and an IVF-PQ index on vec.
// Input (stdin): {dir, table, rows}. Output: {version}.
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const schema = new arrow.Schema([
  new arrow.Field("id", new arrow.Int64(), false),
  new arrow.Field("x", new arrow.Float64(), true),
  new arrow.Field("text", new arrow.Utf8(), true),
  new arrow.Field("vec", new arrow.FixedSizeList(4, new arrow.Field("item", new arrow.Float32(), true)), true),
]);
const rows = input.rows.map((r) => ({ id: BigInt(r.id), x: r.x, text: r.text, vec: r.vec }));
const tbl = await db.createTable(input.table, rows, { schema });
await tbl.createIndex("id", { config: lancedb.Index.btree() });
await tbl.createIndex("x", { config: lancedb.Index.btree() });
await tbl.createIndex("text", { config: lancedb.Index.fts() });
await tbl.createIndex("vec", { config: lancedb.Index.ivfPq({ numPartitions: 2, numSubVectors: 2 }) });
process.stdout.write(JSON.stringify({ version: Number(await tbl.version()) }));
