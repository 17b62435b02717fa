// Generates Lance table-history fixtures for cellguard tests.
//
// Usage: node generate.mjs <output-dir>
//   e.g. node generate.mjs ../../table/testdata/lance
//
// Every history below is run against a fresh LanceDB table in a temporary
// directory using the real Lance engine (via @lancedb/lancedb). Afterwards
// only the metadata files are copied into <output-dir>/<history>/:
//
//   _versions/*.manifest    one manifest per table version
//   _transactions/*.txn     the transaction files Lance wrote
//   _deletions/*            deletion vectors (small)
//
// Data files (data/), indices (_indices/), _latest.manifest,
// latest_version_hint.json and everything else are dropped. A history.json is
// written next to them describing every version (operation label, row count,
// columns, manifest and transaction file names, Lance operation kind).

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as lancedb from "@lancedb/lancedb";
import {
  Field,
  Float64,
  Int32,
  Int64,
  Schema,
  Utf8,
} from "apache-arrow";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const installedVersion = (pkg) =>
  JSON.parse(
    fs.readFileSync(path.join(HERE, "node_modules", pkg, "package.json"), "utf8"),
  ).version;
const LANCEDB_VERSION = installedVersion("@lancedb/lancedb");
const ARROW_VERSION = installedVersion("apache-arrow");

// ---------------------------------------------------------------------------
// Deterministic data
// ---------------------------------------------------------------------------

// Base schema used by every history. `id` and `category` are non-nullable so
// that a nullability change can be exercised.
const BASE_SCHEMA = new Schema([
  new Field("id", new Int32(), false),
  new Field("name", new Utf8(), true),
  new Field("value", new Float64(), true),
  new Field("category", new Int32(), false),
]);

/** Rows with ids [start, start+count). `extra(id)` adds/overrides columns. */
function rows(start, count, extra = () => ({})) {
  const out = [];
  for (let i = 0; i < count; i++) {
    const id = start + i;
    out.push({
      id,
      name: `name-${id}`,
      value: id * 1.5,
      category: id % 5,
      ...extra(id),
    });
  }
  return out;
}

/** Rows for a merge-insert source: ids from `ids`, values tagged with `tag`. */
function upsertRows(ids, tag, extra = () => ({})) {
  return ids.map((id) => ({
    id,
    name: `${tag}-${id}`,
    value: id * 10 + 0.25,
    category: (id % 5) + 10,
    ...extra(id),
  }));
}

function range(start, end) {
  const out = [];
  for (let i = start; i < end; i++) out.push(i);
  return out;
}

// Never removes anything: only versions older than 1970 would be cleaned up.
const NO_CLEANUP = { cleanupOlderThan: new Date(0) };

// ---------------------------------------------------------------------------
// Histories
// ---------------------------------------------------------------------------

const HISTORIES = [
  {
    name: "appends-deletes",
    description:
      "Several appends (one fragment each), then partial deletes, a delete " +
      "matching a whole fragment, a delete that empties a fragment that " +
      "already has a deletion file, and a delete matching nothing.",
    async run(h) {
      await h.create("create table with 20 rows (ids 0-19)", rows(0, 20));
      await h.op("append 20 rows (ids 20-39)", (t) => t.add(rows(20, 20)));
      await h.op("append 20 rows (ids 40-59)", (t) => t.add(rows(40, 20)));
      await h.op("append 20 rows (ids 60-79)", (t) => t.add(rows(60, 20)));
      await h.op("delete id < 5 (partial, fragment 0)", (t) =>
        t.delete("id < 5"),
      );
      await h.op("delete id >= 20 AND id < 40 (whole fragment 1)", (t) =>
        t.delete("id >= 20 AND id < 40"),
      );
      await h.op("delete id >= 60 AND id % 2 = 0 (partial, fragment 3)", (t) =>
        t.delete("id >= 60 AND id % 2 = 0"),
      );
      await h.op(
        "delete id >= 5 AND id < 20 (rest of fragment 0, which already had deletions)",
        (t) => t.delete("id >= 5 AND id < 20"),
      );
      await h.op("delete id = 1000 (matches no rows)", (t) =>
        t.delete("id = 1000"),
      );
      await h.op("append 10 rows (ids 80-89)", (t) => t.add(rows(80, 10)));
    },
  },
  {
    name: "schema-evolution",
    description:
      "addColumns with SQL expressions, alterColumns (rename, nullability, " +
      "int32->int64 type change), dropColumns, with appends in between.",
    async run(h) {
      await h.create("create table with 30 rows (ids 0-29)", rows(0, 30));
      await h.op("append 30 rows (ids 30-59)", (t) => t.add(rows(30, 30)));
      await h.op(
        "add columns double_value = value * 2, label = concat('item-', CAST(id AS VARCHAR))",
        (t) =>
          t.addColumns([
            { name: "double_value", valueSql: "value * 2" },
            { name: "label", valueSql: "concat('item-', CAST(id AS VARCHAR))" },
          ]),
      );
      await h.op("append 30 rows (ids 60-89) with the new columns", (t) =>
        t.add(
          rows(60, 30, (id) => ({
            double_value: id * 3,
            label: `item-${id}`,
          })),
        ),
      );
      await h.op("rename column name -> title", (t) =>
        t.alterColumns([{ path: "name", rename: "title" }]),
      );
      await h.op("make column category nullable", (t) =>
        t.alterColumns([{ path: "category", nullable: true }]),
      );
      await h.op("change type of column category int32 -> int64", (t) =>
        t.alterColumns([{ path: "category", dataType: "int64" }]),
      );
      await h.op("drop column double_value", (t) =>
        t.dropColumns(["double_value"]),
      );
      await h.op("add column flag = id % 3 = 0", (t) =>
        t.addColumns([{ name: "flag", valueSql: "id % 3 = 0" }]),
      );
      await h.op("append 30 rows (ids 90-119) in the evolved schema", (t) =>
        t.add(
          range(90, 120).map((id) => ({
            id,
            title: `name-${id}`,
            value: id * 1.5,
            category: BigInt(id % 5),
            label: `item-${id}`,
            flag: id % 3 === 0,
          })),
        ),
      );
      await h.op("drop columns label, flag", (t) =>
        t.dropColumns(["label", "flag"]),
      );
      await h.op("rename column title -> name and value -> amount", (t) =>
        t.alterColumns([
          { path: "title", rename: "name" },
          { path: "value", rename: "amount" },
        ]),
      );
    },
  },
  {
    name: "update-compact",
    description:
      "Many small fragments, updates that rewrite rows (partial fragments " +
      "and one whole fragment), a partial delete, then optimize() compaction " +
      "(cleanup disabled so all versions stay).",
    async run(h) {
      await h.create("create table with 25 rows (ids 0-24)", rows(0, 25));
      for (let k = 1; k < 6; k++) {
        const s = k * 25;
        await h.op(`append 25 rows (ids ${s}-${s + 24})`, (t) =>
          t.add(rows(s, 25)),
        );
      }
      await h.op("update value = value + 100 where id < 10", (t) =>
        t.update({ where: "id < 10", valuesSql: { value: "value + 100" } }),
      );
      await h.op("update name = 'seven' where id % 7 = 0", (t) =>
        t.update({ where: "id % 7 = 0", values: { name: "seven" } }),
      );
      await h.op(
        "update category = 4 where id >= 25 AND id < 50 (every row of fragment 1)",
        (t) =>
          t.update({ where: "id >= 25 AND id < 50", values: { category: 4 } }),
      );
      await h.op("delete id >= 100 AND id < 110 (partial)", (t) =>
        t.delete("id >= 100 AND id < 110"),
      );
      await h.op("optimize (compaction, no cleanup)", (t) =>
        t.optimize(NO_CLEANUP),
      );
      await h.op("append 25 rows (ids 150-174)", (t) => t.add(rows(150, 25)));
      await h.op("update category = 9 where id >= 140", (t) =>
        t.update({ where: "id >= 140", values: { category: 9 } }),
      );
      await h.op("delete id % 10 = 3", (t) => t.delete("id % 10 = 3"));
      await h.op("optimize again (compaction, no cleanup)", (t) =>
        t.optimize(NO_CLEANUP),
      );
    },
  },
  {
    name: "merge-insert",
    description:
      "mergeInsert upserts (update matched + insert new), insert-only, " +
      "update-only, and upsert with whenNotMatchedBySourceDelete.",
    async run(h) {
      await h.create("create table with 40 rows (ids 0-39)", rows(0, 40));
      await h.op("append 40 rows (ids 40-79)", (t) => t.add(rows(40, 40)));
      await h.op(
        "merge-insert on id: upsert ids 30-59 (update) + 80-99 (insert)",
        (t) =>
          t
            .mergeInsert("id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute(upsertRows([...range(30, 60), ...range(80, 100)], "up1")),
      );
      await h.op("merge-insert on id: insert-only ids 95-119 (95-99 exist)", (t) =>
        t
          .mergeInsert("id")
          .whenNotMatchedInsertAll()
          .execute(upsertRows(range(95, 120), "ins")),
      );
      await h.op("merge-insert on id: update-only ids 0-9 and 200-204", (t) =>
        t
          .mergeInsert("id")
          .whenMatchedUpdateAll()
          .execute(upsertRows([...range(0, 10), ...range(200, 205)], "upd")),
      );
      await h.op(
        "merge-insert on id: upsert ids 100-104 + 120-129, delete target rows not in source where id >= 105 (ids 105-119)",
        (t) =>
          t
            .mergeInsert("id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .whenNotMatchedBySourceDelete({ where: "id >= 105" })
            .execute(
              upsertRows([...range(100, 105), ...range(120, 130)], "up2"),
            ),
      );
      await h.op("merge-insert on id: upsert ids 0-4 (all already exist)", (t) =>
        t
          .mergeInsert("id")
          .whenMatchedUpdateAll()
          .whenNotMatchedInsertAll()
          .execute(upsertRows(range(0, 5), "up3")),
      );
    },
  },
  {
    name: "mixed",
    description:
      "One long history doing everything: appends, updates, partial and " +
      "whole-fragment deletes, schema evolution, merge-insert, compaction.",
    async run(h) {
      await h.create("create table with 20 rows (ids 0-19)", rows(0, 20));
      await h.op("append 20 rows (ids 20-39)", (t) => t.add(rows(20, 20)));
      await h.op("append 20 rows (ids 40-59)", (t) => t.add(rows(40, 20)));
      await h.op("append 20 rows (ids 60-79)", (t) => t.add(rows(60, 20)));
      await h.op("update value = value * 2 where id % 4 = 0", (t) =>
        t.update({ where: "id % 4 = 0", valuesSql: { value: "value * 2" } }),
      );
      await h.op("delete id < 8 (partial)", (t) => t.delete("id < 8"));
      await h.op("delete id >= 40 AND id < 60 (whole fragment 2)", (t) =>
        t.delete("id >= 40 AND id < 60"),
      );
      await h.op("add column score = value + id", (t) =>
        t.addColumns([{ name: "score", valueSql: "value + CAST(id AS DOUBLE)" }]),
      );
      await h.op("append 20 rows (ids 80-99) with score", (t) =>
        t.add(rows(80, 20, (id) => ({ score: id * 2.5 }))),
      );
      await h.op("rename column name -> label", (t) =>
        t.alterColumns([{ path: "name", rename: "label" }]),
      );
      await h.op("make column category nullable", (t) =>
        t.alterColumns([{ path: "category", nullable: true }]),
      );
      await h.op(
        "merge-insert on id: upsert ids 70-89 (update) + 100-109 (insert)",
        (t) =>
          t
            .mergeInsert("id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute(
              [...range(70, 90), ...range(100, 110)].map((id) => ({
                id,
                label: `merged-${id}`,
                value: id * 10 + 0.5,
                category: 7,
                score: id * 0.5,
              })),
            ),
      );
      await h.op("drop column score", (t) => t.dropColumns(["score"]));
      await h.op("update category = 3 where label LIKE 'merged-%'", (t) =>
        t.update({ where: "label LIKE 'merged-%'", values: { category: 3 } }),
      );
      await h.op("delete id % 5 = 1", (t) => t.delete("id % 5 = 1"));
      await h.op("optimize (compaction, no cleanup)", (t) =>
        t.optimize(NO_CLEANUP),
      );
      const labelled = (start, end) =>
        range(start, end).map((id) => ({
          id,
          label: `name-${id}`,
          value: id * 1.5,
          category: id % 5,
        }));
      await h.op("append 15 rows (ids 110-124)", (t) =>
        t.add(labelled(110, 125)),
      );
      await h.op("append 15 rows (ids 125-139)", (t) =>
        t.add(labelled(125, 140)),
      );
      await h.op("change type of column category int32 -> int64", (t) =>
        t.alterColumns([{ path: "category", dataType: "int64" }]),
      );
      await h.op("add column bucket = id / 10", (t) =>
        t.addColumns([{ name: "bucket", valueSql: "id / 10" }]),
      );
      await h.op("delete id >= 125 (whole last fragment)", (t) =>
        t.delete("id >= 125"),
      );
      await h.op("delete id % 7 = 0 (partial, several fragments)", (t) =>
        t.delete("id % 7 = 0"),
      );
      await h.op("optimize again (compaction, no cleanup)", (t) =>
        t.optimize(NO_CLEANUP),
      );
    },
  },
  {
    name: "overwrite-restore",
    description:
      "Overwrite (add with mode=overwrite, also changing the schema) and " +
      "restore of an older version (checkout + restore).",
    async run(h) {
      await h.create("create table with 20 rows (ids 0-19)", rows(0, 20));
      await h.op("append 20 rows (ids 20-39)", (t) => t.add(rows(20, 20)));
      await h.op("delete id < 10", (t) => t.delete("id < 10"));
      await h.op(
        "overwrite with 15 rows (ids 100-114), schema id/name only",
        (t) =>
          t.add(
            range(100, 115).map((id) => ({ id, name: `over-${id}` })),
            { mode: "overwrite" },
          ),
      );
      await h.op("append 5 rows (ids 115-119)", (t) =>
        t.add(range(115, 120).map((id) => ({ id, name: `over-${id}` }))),
      );
      await h.op("restore version 3 (checkout(3) + restore)", async (t) => {
        await t.checkout(3);
        await t.restore();
      });
      await h.op("append 10 rows (ids 40-49) after restore", (t) =>
        t.add(rows(40, 10)),
      );
    },
  },
  {
    name: "stable-row-ids",
    description:
      "Same kinds of operations with stable row ids enabled " +
      "(storage option new_table_enable_stable_row_ids=true).",
    storageOptions: { new_table_enable_stable_row_ids: "true" },
    async run(h) {
      await h.create("create table with 20 rows (ids 0-19)", rows(0, 20));
      await h.op("append 20 rows (ids 20-39)", (t) => t.add(rows(20, 20)));
      await h.op("append 20 rows (ids 40-59)", (t) => t.add(rows(40, 20)));
      await h.op("update value = -1 where id >= 15 AND id < 25", (t) =>
        t.update({ where: "id >= 15 AND id < 25", values: { value: -1 } }),
      );
      await h.op("delete id < 5 (partial)", (t) => t.delete("id < 5"));
      await h.op("delete id >= 40 AND id < 60 (whole fragment 2)", (t) =>
        t.delete("id >= 40 AND id < 60"),
      );
      await h.op(
        "merge-insert on id: upsert ids 30-39 (update) + 60-69 (insert)",
        (t) =>
          t
            .mergeInsert("id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute(upsertRows([...range(30, 40), ...range(60, 70)], "sr")),
      );
      await h.op("add column double_value = value * 2", (t) =>
        t.addColumns([{ name: "double_value", valueSql: "value * 2" }]),
      );
      await h.op("optimize (compaction, no cleanup)", (t) =>
        t.optimize(NO_CLEANUP),
      );
      await h.op("append 10 rows (ids 70-79)", (t) =>
        t.add(rows(70, 10, (id) => ({ double_value: id * 3 }))),
      );
    },
  },
  {
    name: "v1-manifest-paths",
    description:
      "Small history written with the legacy V1 manifest naming " +
      "(storage option new_table_enable_v2_manifest_paths=false): " +
      "_versions/{version}.manifest.",
    storageOptions: { new_table_enable_v2_manifest_paths: "false" },
    async run(h) {
      await h.create("create table with 20 rows (ids 0-19)", rows(0, 20));
      await h.op("append 20 rows (ids 20-39)", (t) => t.add(rows(20, 20)));
      await h.op("update name = 'changed' where id % 3 = 0", (t) =>
        t.update({ where: "id % 3 = 0", values: { name: "changed" } }),
      );
      await h.op("delete id >= 30 (partial)", (t) => t.delete("id >= 30"));
      await h.op("add column half = value / 2", (t) =>
        t.addColumns([{ name: "half", valueSql: "value / 2" }]),
      );
      await h.op("optimize (compaction, no cleanup)", (t) =>
        t.optimize(NO_CLEANUP),
      );
    },
  },
];

// ---------------------------------------------------------------------------
// History runner
// ---------------------------------------------------------------------------

class HistoryRecorder {
  constructor(db, tableName, storageOptions) {
    this.db = db;
    this.tableName = tableName;
    this.storageOptions = storageOptions;
    this.table = null;
    this.labels = new Map(); // version -> label
    this.results = new Map(); // version -> API result (JSON-able)
  }

  async create(label, data) {
    const opts = { schema: BASE_SCHEMA, mode: "create" };
    if (this.storageOptions) opts.storageOptions = { ...this.storageOptions };
    this.table = await this.db.createTable(this.tableName, data, opts);
    const v = await this.table.version();
    this.labels.set(v, label);
  }

  async op(label, fn) {
    const before = await this.table.version();
    const result = await fn(this.table);
    const after = await this.table.version();
    if (after <= before) {
      throw new Error(`operation "${label}" did not create a new version`);
    }
    const n = after - before;
    for (let v = before + 1; v <= after; v++) {
      const suffix = n > 1 ? ` [${v - before}/${n}]` : "";
      this.labels.set(v, label + suffix);
      if (result !== undefined) this.results.set(v, toJSONable(result));
    }
  }
}

function toJSONable(x) {
  return JSON.parse(
    JSON.stringify(x, (_k, v) => (typeof v === "bigint" ? Number(v) : v)),
  );
}

// ---------------------------------------------------------------------------
// Minimal protobuf reading (only to describe what Lance wrote)
// ---------------------------------------------------------------------------

function readVarint(buf, pos) {
  let result = 0n;
  let shift = 0n;
  for (;;) {
    const b = buf[pos++];
    result |= BigInt(b & 0x7f) << shift;
    if ((b & 0x80) === 0) break;
    shift += 7n;
  }
  return [result, pos];
}

/** Returns an array of {field, wire, value} for one message (no recursion). */
function decodeFields(buf) {
  const out = [];
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Number(key >> 3n);
    const wire = Number(key & 7n);
    let value;
    if (wire === 0) {
      [value, pos] = readVarint(buf, pos);
    } else if (wire === 1) {
      value = buf.subarray(pos, pos + 8);
      pos += 8;
    } else if (wire === 2) {
      let len;
      [len, pos] = readVarint(buf, pos);
      value = buf.subarray(pos, pos + Number(len));
      pos += Number(len);
    } else if (wire === 5) {
      value = buf.subarray(pos, pos + 4);
      pos += 4;
    } else {
      throw new Error(`unsupported wire type ${wire}`);
    }
    out.push({ field, wire, value });
  }
  return out;
}

const first = (fields, n) => fields.find((f) => f.field === n);
const str = (f) => (f ? Buffer.from(f.value).toString("utf8") : null);

/**
 * A Lance manifest file ends with: u64 position of the manifest message,
 * u16 major, u16 minor, "LANC". At that position: u32 length + protobuf.
 */
function readManifest(file) {
  const buf = fs.readFileSync(file);
  if (buf.subarray(buf.length - 4).toString("latin1") !== "LANC") {
    throw new Error(`${file}: missing LANC magic`);
  }
  const pos = Number(buf.readBigUInt64LE(buf.length - 16));
  const len = buf.readUInt32LE(pos);
  const msg = buf.subarray(pos + 4, pos + 4 + len);
  const f = decodeFields(msg);
  const wv = first(f, 13) ? decodeFields(first(f, 13).value) : [];
  const df = first(f, 15) ? decodeFields(first(f, 15).value) : [];
  const txnSection = first(f, 21);
  let inlineTxn = null;
  if (txnSection) {
    const p = Number(txnSection.value);
    const l = buf.readUInt32LE(p);
    inlineTxn = decodeTransaction(buf.subarray(p + 4, p + 4 + l));
  }
  return {
    version: Number(first(f, 3)?.value ?? 0n),
    fragments: f.filter((x) => x.field === 2).length,
    writerVersion: {
      library: str(first(wv, 1)),
      version: str(first(wv, 2)),
    },
    dataFormat: { fileFormat: str(first(df, 1)), version: str(first(df, 2)) },
    readerFeatureFlags: Number(first(f, 9)?.value ?? 0n),
    writerFeatureFlags: Number(first(f, 10)?.value ?? 0n),
    transactionFile: str(first(f, 12)) || null,
    inlineTransaction: inlineTxn,
  };
}

const OPERATIONS = {
  100: "Append",
  101: "Delete",
  102: "Overwrite",
  103: "CreateIndex",
  104: "Rewrite",
  105: "Merge",
  106: "Restore",
  107: "ReserveFragments",
  108: "Update",
  109: "Project",
  110: "UpdateConfig",
  111: "DataReplacement",
  112: "UpdateMemWalState",
  113: "Clone",
  114: "UpdateBases",
  115: "DataOverlay",
  116: "AppendFragmentReuseTransitions",
};

function decodeTransaction(buf) {
  const f = decodeFields(buf);
  const opField = f.find((x) => x.field >= 100);
  return {
    readVersion: Number(first(f, 1)?.value ?? 0n),
    uuid: str(first(f, 2)),
    operation: opField
      ? OPERATIONS[opField.field] ?? `field${opField.field}`
      : null,
  };
}

// ---------------------------------------------------------------------------
// Running, pruning, describing
// ---------------------------------------------------------------------------

function manifestNaming(names) {
  // V2: 20-digit zero-padded (u64::MAX - version); V1: plain decimal version.
  if (names.every((n) => /^\d{20}\.manifest$/.test(n))) return "v2";
  if (names.every((n) => /^\d+\.manifest$/.test(n))) return "v1";
  return "unknown";
}

function copyMatching(srcDir, dstDir, pred) {
  if (!fs.existsSync(srcDir)) return [];
  const names = fs.readdirSync(srcDir).filter(pred).sort();
  if (names.length) fs.mkdirSync(dstDir, { recursive: true });
  for (const n of names) {
    fs.copyFileSync(path.join(srcDir, n), path.join(dstDir, n));
  }
  return names;
}

async function runHistory(spec, outDir, workRoot) {
  const dbDir = path.join(workRoot, spec.name);
  fs.mkdirSync(dbDir, { recursive: true });
  const db = await lancedb.connect(dbDir);
  const rec = new HistoryRecorder(db, "t", spec.storageOptions);
  await spec.run(rec);
  const table = rec.table;

  // Per-version logical state, read back through Lance.
  const versions = await table.listVersions();
  const state = new Map();
  for (const { version } of versions) {
    await table.checkout(version);
    const schema = await table.schema();
    state.set(version, {
      rows: await table.countRows(),
      columns: schema.fields.map((fld) => ({
        name: fld.name,
        type: String(fld.type),
        nullable: fld.nullable,
      })),
    });
  }
  await table.checkoutLatest();
  table.close();

  // Prune: copy only metadata files into the fixture directory.
  const tableDir = path.join(dbDir, "t.lance");
  const dst = path.join(outDir, spec.name);
  fs.rmSync(dst, { recursive: true, force: true });
  fs.mkdirSync(dst, { recursive: true });
  const manifests = copyMatching(
    path.join(tableDir, "_versions"),
    path.join(dst, "_versions"),
    (n) => n.endsWith(".manifest"),
  );
  const txns = copyMatching(
    path.join(tableDir, "_transactions"),
    path.join(dst, "_transactions"),
    (n) => n.endsWith(".txn"),
  );
  const deletions = copyMatching(
    path.join(tableDir, "_deletions"),
    path.join(dst, "_deletions"),
    () => true,
  );
  const dropped = fs
    .readdirSync(tableDir)
    .filter((n) => !["_versions", "_transactions", "_deletions"].includes(n));

  // Describe every version.
  const naming = manifestNaming(manifests);
  const entries = [];
  let writerVersion = null;
  for (const m of manifests) {
    const info = readManifest(path.join(dst, "_versions", m));
    writerVersion ??= info.writerVersion;
    let txn = null;
    if (info.transactionFile) {
      const p = path.join(dst, "_transactions", info.transactionFile);
      if (fs.existsSync(p)) txn = decodeTransaction(fs.readFileSync(p));
    }
    if (
      txn &&
      info.inlineTransaction &&
      (txn.uuid !== info.inlineTransaction.uuid ||
        txn.operation !== info.inlineTransaction.operation)
    ) {
      throw new Error(
        `${spec.name} v${info.version}: transaction file and manifest-inline transaction differ`,
      );
    }
    const t = txn ?? info.inlineTransaction;
    entries.push({
      version: info.version,
      operation: rec.labels.get(info.version) ?? null,
      lanceOperation: t?.operation ?? null,
      readVersion: t?.readVersion ?? null,
      manifest: `_versions/${m}`,
      transactionFile: info.transactionFile
        ? `_transactions/${info.transactionFile}`
        : null,
      transactionInlineInManifest: info.inlineTransaction !== null,
      fragments: info.fragments,
      readerFeatureFlags: info.readerFeatureFlags,
      writerFeatureFlags: info.writerFeatureFlags,
      dataFormat: info.dataFormat,
      rows: state.get(info.version)?.rows ?? null,
      columns: state.get(info.version)?.columns ?? null,
      apiResult: rec.results.get(info.version) ?? null,
    });
  }
  entries.sort((a, b) => a.version - b.version);

  const history = {
    name: spec.name,
    description: spec.description,
    generator: {
      script: "scripts/lance-fixtures/generate.mjs",
      lancedb: LANCEDB_VERSION,
      apacheArrow: ARROW_VERSION,
    },
    lanceWriterVersion: writerVersion,
    manifestNaming: naming,
    storageOptions: spec.storageOptions ?? {},
    prunedFromTableDir: dropped,
    versions: entries,
  };
  fs.writeFileSync(
    path.join(dst, "history.json"),
    JSON.stringify(history, null, 2) + "\n",
  );

  // Sanity checks.
  const problems = [];
  const expected = range(1, versions.length + 1);
  const got = entries.map((e) => e.version);
  if (JSON.stringify(expected) !== JSON.stringify(got)) {
    problems.push(`versions ${got} != 1..${versions.length}`);
  }
  for (const e of entries) {
    if (!e.operation) problems.push(`version ${e.version} has no label`);
    if (e.transactionFile && !txns.includes(path.basename(e.transactionFile))) {
      problems.push(`version ${e.version}: missing ${e.transactionFile}`);
    }
  }
  if (problems.length) {
    throw new Error(`${spec.name}: ${problems.join("; ")}`);
  }
  return { entries, manifests, txns, deletions, naming, writerVersion, dropped };
}

const OUTPUT_README = `# Lance history fixtures (generated)

Generated by \`scripts/lance-fixtures/generate.mjs\` with real Lance
(@lancedb/lancedb ${LANCEDB_VERSION}). Do not edit by hand; see
\`scripts/lance-fixtures/README.md\` to regenerate.

Each directory is one table history. Only metadata is kept:
\`_versions/*.manifest\`, \`_transactions/*.txn\`, \`_deletions/*\`.
Data files were deleted, so the tables cannot be scanned. \`history.json\`
describes every version (human operation label, Lance operation kind, row
count and columns as read back through Lance, file names).
`;

function prepareOutputDir(outDir) {
  const known = new Set(HISTORIES.map((h) => h.name));
  if (fs.existsSync(outDir)) {
    // Refuse to wipe a directory that does not look like ours.
    for (const n of fs.readdirSync(outDir)) {
      const p = path.join(outDir, n);
      const ours =
        n === "README.md" ||
        known.has(n) ||
        (fs.statSync(p).isDirectory() &&
          fs.existsSync(path.join(p, "history.json")));
      if (!ours) {
        throw new Error(
          `refusing to wipe ${outDir}: unexpected entry ${n} (not a fixture)`,
        );
      }
    }
    fs.rmSync(outDir, { recursive: true, force: true });
  }
  fs.mkdirSync(outDir, { recursive: true });
}

async function main() {
  const outArg = process.argv[2];
  if (!outArg) {
    console.error("usage: node generate.mjs <output-dir>");
    process.exit(2);
  }
  const outDir = path.resolve(outArg);
  prepareOutputDir(outDir);
  fs.writeFileSync(path.join(outDir, "README.md"), OUTPUT_README);

  const workRoot = fs.mkdtempSync(path.join(os.tmpdir(), "lance-fixtures-"));
  try {
    for (const spec of HISTORIES) {
      const r = await runHistory(spec, outDir, workRoot);
      const wv = r.writerVersion
        ? `${r.writerVersion.library} ${r.writerVersion.version}`
        : "?";
      console.log(
        `${spec.name}: ${r.entries.length} versions, ${r.manifests.length} manifests ` +
          `(${r.naming}), ${r.txns.length} txns, ${r.deletions.length} deletion files, ` +
          `writer ${wv}; pruned ${r.dropped.join(", ") || "nothing"}`,
      );
      for (const e of r.entries) {
        console.log(
          `  v${e.version} ${e.lanceOperation ?? "-"}: ${e.operation} ` +
            `(rows=${e.rows}, fragments=${e.fragments}${e.transactionFile ? "" : ", no txn file"})`,
        );
      }
    }
  } finally {
    fs.rmSync(workRoot, { recursive: true, force: true });
  }
}

await main();
