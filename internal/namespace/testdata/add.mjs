// Appends rows with unmodified LanceDB through the namespace.
// Input: {uri, table, headers?, create?: bool, writers: [[ids...]...],
// timeoutMs?}. Each writer is its own connection and handle; the writers
// run concurrently, each adding its ids one row per add. With create, the
// table is created first with row id 0.
// Output: {errors: [string|null per writer], count, versions, ids, ms,
// handleCounts, handleVersions (what each writer's handle believes)}.
const input = JSON.parse(await readStdin());
const connect = () => lancedbtest_connect(input);
function lancedbtest_connect(input) {
  return lancedb.connectNamespace("rest", { uri: input.uri, headers: input.headers ?? {} });
}
if (input.create) await (await connect()).createTable(input.table, [{ id: 0, x: 0 }]);
const handles = await Promise.all(input.writers.map(async () => (await connect()).openTable(input.table)));
const t0 = Date.now();
const timeout = (ms) => new Promise((_, rej) => setTimeout(() => rej(new Error("TIMEOUT")), ms));
const errors = await Promise.all(input.writers.map(async (ids, i) => {
  try {
    for (const id of ids) {
      const add = handles[i].add([{ id, x: id * 10 }]);
      await (input.timeoutMs ? Promise.race([add, timeout(input.timeoutMs)]) : add);
    }
    return null;
  } catch (e) {
    return String(e.message ?? e);
  }
}));
const ms = Date.now() - t0;
const handleCounts = await Promise.all(handles.map(async (h) => { try { return await h.countRows(); } catch (e) { return -1; } }));
const handleVersions = await Promise.all(handles.map(async (h) => { try { return Number(await h.version()); } catch (e) { return -1; } }));
const reader = await (await connect()).openTable(input.table);
const count = await reader.countRows();
const versions = (await reader.listVersions()).map((v) => Number(v.version));
const ids = (await reader.query().toArray()).map((r) => Number(r.id)).sort((a, b) => a - b);
process.stdout.write(JSON.stringify({ errors, count, versions, ids, ms, handleCounts, handleVersions }));
process.exit(0);
