// Generates Lance table histories with indices for cellguard's replay tests.
//
// Usage: node indices.mjs <dir-with-node_modules> <output-dir>
//   e.g. node indices.mjs ~/.cache/cellguard/lancedb-<hash> ../../table/testdata/lance-indices/lance8
//
// The first argument names a directory whose node_modules holds the
// @lancedb/lancedb release to drive (and apache-arrow): the same script
// writes the histories with LanceDB 0.31 (Lance 8) and 0.39 (Lance 12).
// Only metadata is kept, as generate.mjs keeps it: _versions/*.manifest,
// _transactions/*.txn, _deletions/*, and a history.json describing every
// version, with the index list LanceDB reports (listIndices) at each one.
// Data files and index files are dropped.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [modulesArg, outArg] = process.argv.slice(2);
if (!modulesArg || !outArg) {
  console.error("usage: node indices.mjs <dir-with-node_modules> <output-dir>");
  process.exit(2);
}
const req = createRequire(path.join(path.resolve(modulesArg), "package.json"));
const lancedb = await import(pathToFileURL(req.resolve("@lancedb/lancedb")).href);
const arrow = await import(pathToFileURL(req.resolve("apache-arrow")).href);
const versionOf = (pkg) =>
  JSON.parse(
    fs.readFileSync(
      path.join(path.resolve(modulesArg), "node_modules", pkg, "package.json"),
      "utf8",
    ),
  ).version;
const LANCEDB_VERSION = versionOf("@lancedb/lancedb");
const ARROW_VERSION = versionOf("apache-arrow");

const DIM = 8;
const SCHEMA = new arrow.Schema([
  new arrow.Field("id", new arrow.Int32(), false),
  new arrow.Field("str", new arrow.Utf8(), true),
  new arrow.Field("text", new arrow.Utf8(), true),
  new arrow.Field(
    "tags",
    new arrow.List(new arrow.Field("item", new arrow.Utf8(), true)),
    true,
  ),
  new arrow.Field(
    "vector",
    new arrow.FixedSizeList(DIM, new arrow.Field("item", new arrow.Float32(), true)),
    true,
  ),
]);

const WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape"];

/** Deterministic rows with ids [start, start+count). */
function rows(start, count, tag = "s") {
  const out = [];
  for (let i = 0; i < count; i++) {
    const id = start + i;
    const vector = [];
    for (let d = 0; d < DIM; d++) vector.push(Math.sin(id * 0.37 + d * 1.3) + (id % 3));
    out.push({
      id,
      str: `${tag}${id % 4}`,
      text: `${WORDS[id % 7]} ${WORDS[(id * 3) % 7]} row${id}`,
      tags: [WORDS[id % 7], WORDS[(id + 2) % 7]],
      vector,
    });
  }
  return out;
}

const NO_CLEANUP = { cleanupOlderThan: new Date(0) };
const I = lancedb.Index;
const ivfPq = () => I.ivfPq({ numPartitions: 2, numSubVectors: 2 });

const HISTORIES = [
  {
    name: "index-lifecycle",
    description:
      "btree, bitmap, label_list, FTS and IVF-PQ indices, then appends, " +
      "deletes (partial and whole fragment), update, mergeInsert, optimize " +
      "(compaction and index merging) twice, addColumns, rename, btree " +
      "replace, dropColumns of indexed columns, dropIndex, restore, and an " +
      "IVF-HNSW-SQ index replacing the IVF-PQ one.",
    async run(h) {
      await h.create("create table with 300 rows (ids 0-299)", rows(0, 300));
      await h.op("createIndex btree(id)", (t) => t.createIndex("id", { config: I.btree() }));
      await h.op("createIndex bitmap(str)", (t) => t.createIndex("str", { config: I.bitmap() }));
      await h.op("createIndex labelList(tags)", (t) => t.createIndex("tags", { config: I.labelList() }));
      await h.op("createIndex fts(text)", (t) => t.createIndex("text", { config: I.fts() }));
      await h.op("createIndex ivfPq(vector)", (t) => t.createIndex("vector", { config: ivfPq() }));
      await h.op("append 50 rows (ids 300-349)", (t) => t.add(rows(300, 50)));
      await h.op("append 30 rows (ids 350-379)", (t) => t.add(rows(350, 30)));
      await h.op("delete id < 10 (partial, indexed fragment 0)", (t) => t.delete("id < 10"));
      await h.op("delete id >= 350 (whole unindexed fragment 2)", (t) => t.delete("id >= 350"));
      await h.op("update str where id = 20", (t) => t.update({ where: "id = 20", values: { str: "u" } }));
      await h.op("mergeInsert upsert ids 298-302 and 400-402", (t) =>
        t
          .mergeInsert("id")
          .whenMatchedUpdateAll()
          .whenNotMatchedInsertAll()
          .execute(rows(298, 5, "m").concat(rows(400, 3, "m"))),
      );
      await h.op("optimize (compaction, index merge, no cleanup)", (t) => t.optimize(NO_CLEANUP));
      await h.op("append 40 rows (ids 500-539)", (t) => t.add(rows(500, 40)));
      await h.op("optimize again (compaction, index merge, no cleanup)", (t) => t.optimize(NO_CLEANUP));
      await h.op("addColumns extra = id * 2", (t) => t.addColumns([{ name: "extra", valueSql: "id * 2" }]));
      await h.op("rename str to s2", (t) => t.alterColumns([{ path: "str", rename: "s2" }]));
      await h.op("createIndex btree(id) again (replace)", (t) =>
        t.createIndex("id", { config: I.btree(), replace: true }),
      );
      await h.op("dropColumns s2, tags (bitmap and label_list indexed)", (t) => t.dropColumns(["s2", "tags"]));
      await h.op("dropIndex id_idx", (t) => t.dropIndex("id_idx"));
      await h.op("restore version 7 (checkout(7) + restore)", async (t) => {
        await t.checkout(7);
        await t.restore();
      });
      await h.op("createIndex ivfHnswSq(vector) (replace)", (t) =>
        t.createIndex("vector", { config: I.hnswSq({ numPartitions: 2 }), replace: true }),
      );
      await h.op("append 20 rows (ids 600-619)", (t) => t.add(rows(600, 20)));
      await h.op("optimize (vector delta, no cleanup)", (t) => t.optimize(NO_CLEANUP));
    },
  },
  {
    name: "index-vector-fragment-deleted",
    description:
      "IVF-PQ and btree indices on fragment 0, an append, then a delete of " +
      "all of fragment 0 (Lance 8 drops the vector index whose coverage is " +
      "gone, Lance 12 keeps it), an append and optimize.",
    async run(h) {
      await h.create("create table with 300 rows (ids 0-299)", rows(0, 300));
      await h.op("createIndex ivfPq(vector)", (t) => t.createIndex("vector", { config: ivfPq() }));
      await h.op("createIndex btree(id)", (t) => t.createIndex("id", { config: I.btree() }));
      await h.op("append 300 rows (ids 300-599)", (t) => t.add(rows(300, 300)));
      await h.op("delete id < 300 (whole indexed fragment 0)", (t) => t.delete("id < 300"));
      await h.op("append 20 rows (ids 600-619)", (t) => t.add(rows(600, 20)));
      await h.op("optimize (no cleanup)", (t) => t.optimize(NO_CLEANUP));
    },
  },
  {
    name: "index-stable-row-ids",
    description:
      "btree, bitmap and FTS indices on a table with stable row ids: " +
      "updates (the rewritten rows' new fragments join the indices on " +
      "other columns), delete, and optimize (bitmaps recalculated in place).",
    storageOptions: { new_table_enable_stable_row_ids: "true" },
    async run(h) {
      await h.create("create table with 200 rows (ids 0-199)", rows(0, 200));
      await h.op("createIndex btree(id)", (t) => t.createIndex("id", { config: I.btree() }));
      await h.op("createIndex bitmap(str)", (t) => t.createIndex("str", { config: I.bitmap() }));
      await h.op("createIndex fts(text)", (t) => t.createIndex("text", { config: I.fts() }));
      await h.op("append 50 rows (ids 200-249)", (t) => t.add(rows(200, 50)));
      await h.op("update str where id < 5", (t) => t.update({ where: "id < 5", values: { str: "u" } }));
      await h.op("update id where id = 7", (t) => t.update({ where: "id = 7", valuesSql: { id: "1007" } }));
      await h.op("delete id >= 240", (t) => t.delete("id >= 240"));
      await h.op("optimize (compaction, index merge, no cleanup)", (t) => t.optimize(NO_CLEANUP));
    },
  },
];

class HistoryRecorder {
  constructor(db, storageOptions) {
    this.db = db;
    this.storageOptions = storageOptions;
    this.table = null;
    this.labels = new Map();
    this.errors = new Map();
  }

  async create(label, data) {
    const opts = { schema: SCHEMA, mode: "create" };
    if (this.storageOptions) opts.storageOptions = { ...this.storageOptions };
    this.table = await this.db.createTable("t", data, opts);
    this.labels.set(await this.table.version(), label);
  }

  async op(label, fn) {
    const before = await this.table.version();
    let error = null;
    try {
      await fn(this.table);
    } catch (e) {
      // Lance 8's optimize can fail after some of its versions committed
      // (its index builder on stable row ids); what committed is kept.
      error = String(e?.message ?? e).split("\n")[0];
      await this.table.checkoutLatest();
    }
    const after = await this.table.version();
    if (after <= before) {
      throw new Error(`operation "${label}" did not create a new version${error ? ": " + error : ""}`);
    }
    const n = after - before;
    for (let v = before + 1; v <= after; v++) {
      this.labels.set(v, label + (n > 1 ? ` [${v - before}/${n}]` : ""));
      if (error) this.errors.set(v, error);
    }
  }
}

function copyMatching(srcDir, dstDir, pred) {
  if (!fs.existsSync(srcDir)) return [];
  const names = fs.readdirSync(srcDir).filter(pred).sort();
  if (names.length) fs.mkdirSync(dstDir, { recursive: true });
  for (const n of names) fs.copyFileSync(path.join(srcDir, n), path.join(dstDir, n));
  return names;
}

// The manifest file of version v in V2 naming (LanceDB's default).
function manifestName(v) {
  return (18446744073709551615n - BigInt(v)).toString().padStart(20, "0") + ".manifest";
}

async function runHistory(spec, outDir, workRoot) {
  const dbDir = path.join(workRoot, spec.name);
  fs.mkdirSync(dbDir, { recursive: true });
  const db = await lancedb.connect(dbDir);
  const rec = new HistoryRecorder(db, spec.storageOptions);
  await spec.run(rec);
  const table = rec.table;

  const versions = (await table.listVersions()).map((v) => v.version);
  const state = new Map();
  for (const v of versions) {
    await table.checkout(v);
    const indices = [];
    for (const ix of await table.listIndices()) {
      indices.push({ name: ix.name, indexType: ix.indexType, columns: ix.columns });
    }
    state.set(v, { rows: await table.countRows(), indices });
  }
  await table.checkoutLatest();
  table.close();

  const tableDir = path.join(dbDir, "t.lance");
  const dst = path.join(outDir, spec.name);
  fs.rmSync(dst, { recursive: true, force: true });
  fs.mkdirSync(dst, { recursive: true });
  const manifests = copyMatching(path.join(tableDir, "_versions"), path.join(dst, "_versions"), (n) =>
    n.endsWith(".manifest"),
  );
  copyMatching(path.join(tableDir, "_transactions"), path.join(dst, "_transactions"), (n) => n.endsWith(".txn"));
  copyMatching(path.join(tableDir, "_deletions"), path.join(dst, "_deletions"), () => true);

  const entries = versions.map((v) => {
    const m = manifestName(v);
    if (!manifests.includes(m)) throw new Error(`${spec.name}: no ${m} for version ${v}`);
    return {
      version: v,
      operation: rec.labels.get(v) ?? null,
      manifest: `_versions/${m}`,
      rows: state.get(v).rows,
      indices: state.get(v).indices,
      error: rec.errors.get(v) ?? null,
    };
  });
  for (const e of entries) if (!e.operation) throw new Error(`${spec.name}: version ${e.version} has no label`);
  const history = {
    name: spec.name,
    description: spec.description,
    generator: { script: "scripts/lance-fixtures/indices.mjs", lancedb: LANCEDB_VERSION, apacheArrow: ARROW_VERSION },
    manifestNaming: "v2",
    storageOptions: spec.storageOptions ?? {},
    versions: entries,
  };
  fs.writeFileSync(path.join(dst, "history.json"), JSON.stringify(history, null, 2) + "\n");
  return entries;
}

async function main() {
  const outDir = path.resolve(outArg);
  if (fs.existsSync(outDir)) {
    for (const n of fs.readdirSync(outDir)) {
      if (!HISTORIES.some((h) => h.name === n)) {
        throw new Error(`refusing to wipe ${outDir}: unexpected entry ${n}`);
      }
    }
    fs.rmSync(outDir, { recursive: true, force: true });
  }
  fs.mkdirSync(outDir, { recursive: true });
  const workRoot = fs.mkdtempSync(path.join(os.tmpdir(), "lance-index-fixtures-"));
  try {
    for (const spec of HISTORIES) {
      const entries = await runHistory(spec, outDir, workRoot);
      console.log(`${spec.name} (lancedb ${LANCEDB_VERSION}): ${entries.length} versions`);
      for (const e of entries) {
        const ix = e.indices.map((i) => i.name).join(",");
        console.log(`  v${e.version}: ${e.operation} rows=${e.rows} indices=[${ix}]${e.error ? " ERROR " + e.error : ""}`);
      }
    }
  } finally {
    fs.rmSync(workRoot, { recursive: true, force: true });
  }
}

await main();
