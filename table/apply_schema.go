package table

import (
	"maps"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Project replaces the schema (drop, rename, nullability changes) and drops
// from every fragment the data files left with no field of the new schema.
// A tombstoned id (-2) is never in a schema, so a file whose only other
// fields were dropped goes too. Overlays are left as they are, as Lance
// does. The wire form of Project carries no schema metadata; the head's is
// kept (Lance keeps the in-memory schema's, which is the same).
func (a *applier) applyProject(op *lancepb.Transaction_Project) error {
	schema, err := a.newSchema(op.GetSchema())
	if err != nil {
		return err
	}
	for f := range a.head.Fragments() {
		files := f.Files()
		keep := slices.DeleteFunc(slices.Clone(files), func(df *lancepb.DataFile) bool {
			return !slices.ContainsFunc(df.GetFields(), func(id int32) bool {
				_, ok := schema.Field(id)
				return ok
			})
		})
		if len(keep) == len(files) {
			continue
		}
		c := proto.CloneOf(f.Proto())
		c.Files = cloneAll(keep)
		if err := a.b.Replace(NewFragment(c)); err != nil {
			return err
		}
	}
	a.b.SetSchema(schema)
	return nil
}

// UpdateConfig changes table config, table metadata, schema metadata and
// field metadata through UpdateMaps (an entry with a value sets the key, one
// without removes it; replace starts from empty). The deprecated form is
// read as Lance reads it: upsert_values and delete_keys update the config
// incrementally (upserts in key order, then deletions), schema_metadata
// replaces the schema metadata, field_metadata replaces each named field's
// metadata. Mixing both forms is invalid, as in Lance.
func (a *applier) applyUpdateConfig(op *lancepb.Transaction_UpdateConfig) error {
	hasNew := op.GetConfigUpdates() != nil || op.GetTableMetadataUpdates() != nil ||
		op.GetSchemaMetadataUpdates() != nil || len(op.GetFieldMetadataUpdates()) > 0
	hasOld := len(op.GetUpsertValues()) > 0 || len(op.GetDeleteKeys()) > 0 ||
		len(op.GetSchemaMetadata()) > 0 || len(op.GetFieldMetadata()) > 0
	if hasNew && hasOld {
		return a.invalid("UpdateConfig mixes the deprecated and the current update fields")
	}
	config, tableMeta, schemaMeta := op.GetConfigUpdates(), op.GetTableMetadataUpdates(), op.GetSchemaMetadataUpdates()
	fieldMeta := map[int32]*lancepb.Transaction_UpdateMap{}
	for id, m := range op.GetFieldMetadataUpdates() {
		fieldMeta[id] = m
	}
	if hasOld {
		if len(op.GetUpsertValues()) > 0 || len(op.GetDeleteKeys()) > 0 {
			config = &lancepb.Transaction_UpdateMap{}
			for _, k := range slices.Sorted(maps.Keys(op.GetUpsertValues())) {
				config.UpdateEntries = append(config.UpdateEntries, &lancepb.Transaction_UpdateMapEntry{Key: k, Value: proto.String(op.GetUpsertValues()[k])})
			}
			for _, k := range op.GetDeleteKeys() {
				config.UpdateEntries = append(config.UpdateEntries, &lancepb.Transaction_UpdateMapEntry{Key: k})
			}
		}
		if len(op.GetSchemaMetadata()) > 0 {
			schemaMeta = replacingMap(op.GetSchemaMetadata())
		}
		for id, u := range op.GetFieldMetadata() {
			if id > math.MaxInt32 {
				return a.invalid("field metadata update for field id %d", id)
			}
			fieldMeta[int32(id)] = replacingMap(u.GetMetadata())
		}
	}

	h := a.b.Header()
	if config != nil {
		h.Config = applyUpdateMap(h.GetConfig(), config, func(s string) string { return s })
	}
	if tableMeta != nil {
		h.TableMetadata = applyUpdateMap(h.GetTableMetadata(), tableMeta, func(s string) string { return s })
	}
	if schemaMeta != nil {
		h.SchemaMetadata = applyUpdateMap(h.GetSchemaMetadata(), schemaMeta, func(s string) []byte { return []byte(s) })
	}
	if len(fieldMeta) == 0 {
		return nil
	}
	fields := slices.Clone(a.head.Schema().Fields())
	for _, id := range slices.Sorted(maps.Keys(fieldMeta)) {
		i := slices.IndexFunc(fields, func(f *lancepb.Field) bool { return f.GetId() == id })
		if i < 0 {
			return a.invalid("field %d does not exist", id)
		}
		f := proto.CloneOf(fields[i])
		f.Metadata = applyUpdateMap(f.GetMetadata(), fieldMeta[id], func(s string) []byte { return []byte(s) })
		fields[i] = f
	}
	schema, err := NewSchema(fields)
	if err != nil {
		return a.invalid("schema: %v", err)
	}
	a.b.SetSchema(schema)
	return nil
}

// replacingMap is the UpdateMap that replaces a map by m (the deprecated
// UpdateConfig forms).
func replacingMap(m map[string]string) *lancepb.Transaction_UpdateMap {
	u := &lancepb.Transaction_UpdateMap{Replace: true}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		u.UpdateEntries = append(u.UpdateEntries, &lancepb.Transaction_UpdateMapEntry{Key: k, Value: proto.String(m[k])})
	}
	return u
}

// applyUpdateMap returns a new map: cur with u applied, entries in order.
func applyUpdateMap[V any](cur map[string]V, u *lancepb.Transaction_UpdateMap, conv func(string) V) map[string]V {
	out := make(map[string]V, len(cur))
	if !u.GetReplace() {
		for k, v := range cur {
			out[k] = v
		}
	}
	for _, e := range u.GetUpdateEntries() {
		if e.Value != nil {
			out[e.GetKey()] = conv(e.GetValue())
		} else if !u.GetReplace() {
			delete(out, e.GetKey())
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// CreateIndex adds, replaces or removes indexes. Index metadata lives in the
// manifest file's index section, not in the Manifest message, so the new
// manifest has head's fragments and schema unchanged; the committer
// keeps the index section. The new indexes are checked: a
// 16-byte uuid, real fields of the schema, a decodable fragment bitmap.
func (a *applier) applyCreateIndex(op *lancepb.Transaction_CreateIndex) error {
	for i, idx := range op.GetNewIndices() {
		if msg := a.checkIndex(idx); msg != "" {
			return a.invalid("new index %d: %s", i, msg)
		}
	}
	return nil
}

// UpdateBases registers new base paths. A base whose name or path is
// already registered is refused, as in Lance (two unnamed bases count as
// the same name, as there); a base with id 0 gets the next id. Lance
// overwrites a base whose explicit id is taken; cellguard refuses it.
func (a *applier) applyUpdateBases(op *lancepb.Transaction_UpdateBases) error {
	return a.addBases(a.b.Header(), op.GetNewBases(), true)
}

func (a *applier) addBases(h *lancepb.Manifest, bases []*lancepb.BasePath, checkNames bool) error {
	for i, nb := range bases {
		if nb == nil {
			return a.invalid("base path %d is empty", i)
		}
		if checkNames && slices.ContainsFunc(h.GetBasePaths(), func(bp *lancepb.BasePath) bool {
			return (bp.Name == nil) == (nb.Name == nil) && bp.GetName() == nb.GetName() || bp.GetPath() == nb.GetPath()
		}) {
			return a.invalid("base path %q (name %q) is already registered", nb.GetPath(), nb.GetName())
		}
		bp := proto.CloneOf(nb)
		if bp.GetId() == 0 && checkNames {
			next := uint32(1)
			for _, x := range h.GetBasePaths() {
				if x.GetId() >= next {
					if x.GetId() == math.MaxUint32 {
						return a.invalid("no base path id left")
					}
					next = x.GetId() + 1
				}
			}
			bp.Id = next
		}
		if slices.ContainsFunc(h.GetBasePaths(), func(x *lancepb.BasePath) bool { return x.GetId() == bp.GetId() }) {
			return a.invalid("base path id %d is already registered", bp.GetId())
		}
		h.BasePaths = append(h.BasePaths, bp)
	}
	return nil
}
