// The nsbench workload: LanceDB-shaped commits from unmodified LanceDB,
// against a local directory or through a Lance REST namespace, the same
// calls either way. Run by package nsbench after lancedbtest.Prelude.
//
// Input: {target: {dir} | {uri}, prefix, check?, scenarios: [{name,
// kind: "append" | "mixed", handles, ops, keys?}]}.
//   append: one table; each handle (its own connection) adds `ops` rows,
//           one row per add; the handles run concurrently.
//   mixed:  one table with `keys` rows per handle; each handle runs `ops`
//           operations in the rotation update, delete, mergeInsert on its
//           own keys (key j of handle h is h*100000+j), concurrently with
//           the others: the same rows' fragment, so every commit is a
//           conflict to rebase.
// Output: {scenarios: [{name, ms, ok, failed, errors, latencies (ms per
// successful call), count, rows?, versions?}]}; rows (id, x sorted by id)
// and versions only with check.
const input = JSON.parse(await readStdin());
const target = input.target;
// Every LanceDB call is bounded: one without an answer by then fails the
// run, naming the call, instead of leaving the driver waiting.
const callTimeoutMs = input.callTimeoutMs ?? 120000;

function bounded(what, p) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${callTimeoutMs} ms`)), callTimeoutMs);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

async function connect() {
  if (target.uri) return lancedb.connectNamespace("rest", { uri: target.uri, headers: target.headers ?? {} });
  return lancedb.connect(target.dir);
}

function keyOf(h, j) { return h * 100000 + j; }

async function setup(sc, table) {
  const db = await connect();
  if (sc.kind === "append") {
    await db.createTable(table, [{ id: -1, x: 0 }]);
    return;
  }
  const rows = [];
  for (let h = 0; h < sc.handles; h++) for (let j = 0; j < sc.keys; j++) rows.push({ id: keyOf(h, j), x: 0 });
  await db.createTable(table, rows);
}

// op runs operation i of handle h on tbl.
async function op(sc, tbl, h, i) {
  if (sc.kind === "append") {
    const id = keyOf(h, i);
    return tbl.add([{ id, x: id }]);
  }
  const key = keyOf(h, Math.floor(i / 3) % sc.keys);
  switch (i % 3) {
    case 0: return tbl.update({ where: `id = ${key}`, valuesSql: { x: "x + 1" } });
    case 1: return tbl.delete(`id = ${key}`);
    default:
      return tbl.mergeInsert("id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute([{ id: key, x: 1000000 + i }]);
  }
}

async function runScenario(sc) {
  const table = `${input.prefix}${sc.name}`;
  await bounded(`${target.uri ? "namespace" : "local"} ${sc.name}: create`, setup(sc, table));
  const handles = [];
  for (let h = 0; h < sc.handles; h++) handles.push(await bounded(`${sc.name}: open handle ${h}`, (async () => (await connect()).openTable(table))()));
  const latencies = [];
  const errors = [];
  let failed = 0;
  const t0 = performance.now();
  await Promise.all(handles.map(async (tbl, h) => {
    for (let i = 0; i < sc.ops; i++) {
      const s = performance.now();
      try {
        await bounded(`${target.uri ? "namespace" : "local"} ${sc.name}: handle ${h} call ${i}`, op(sc, tbl, h, i));
        latencies.push(performance.now() - s);
      } catch (e) {
        failed++;
        if (errors.length < 5) errors.push(String(e.message ?? e).slice(0, 500));
      }
    }
  }));
  const ms = performance.now() - t0;
  const out = { name: sc.name, ms, ok: latencies.length, failed, errors, latencies };
  const reader = await bounded(`${sc.name}: open reader`, (async () => (await connect()).openTable(table))());
  out.count = await bounded(`${sc.name}: countRows`, reader.countRows());
  if (input.check) {
    out.rows = (await bounded(`${sc.name}: read rows`, reader.query().toArray())).map((r) => ({ id: Number(r.id), x: Number(r.x) })).sort((a, b) => a.id - b.id);
    out.versions = (await bounded(`${sc.name}: listVersions`, reader.listVersions())).map((v) => Number(v.version));
  }
  return out;
}

const scenarios = [];
for (const sc of input.scenarios) scenarios.push(await runScenario(sc));
process.stdout.write(JSON.stringify({ scenarios }));
process.exit(0);
