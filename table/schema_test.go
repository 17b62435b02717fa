package table_test

import (
	"testing"

	"cellguard/internal/gctest"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

func schemaFields(meta string) []*lancepb.Field {
	return []*lancepb.Field{
		{Id: 0, ParentId: -1, Name: "x", LogicalType: "int64"},
		{Id: 1, ParentId: -1, Name: "y", LogicalType: "double", Nullable: true,
			Metadata: map[string][]byte{"a": []byte(meta), "b": []byte("2")}},
	}
}

// TestEqualSchemasAreOne checks that schemas of equal fields, built apart
// (tables created one by one, manifests read), are one Schema while in
// use, and that different fields make different schemas.
func TestEqualSchemasAreOne(t *testing.T) {
	a, err := table.NewSchema(schemaFields("1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := table.NewSchema(schemaFields("1"))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("equal fields built two schemas")
	}
	c, err := table.NewSchema(schemaFields("other"))
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Fatal("different field metadata shared a schema")
	}
	if f, _ := c.Field(1); string(f.GetMetadata()["a"]) != "other" {
		t.Fatalf("field 1 of the second schema: %v", f)
	}
	m, err := table.FromProto(&lancepb.Manifest{Fields: schemaFields("1"), Version: 3})
	if err != nil {
		t.Fatal(err)
	}
	if m.Schema() != a {
		t.Fatal("a manifest of the same fields has a schema of its own")
	}
	// A field list that is not a schema is refused, shared or not.
	bad := schemaFields("1")
	bad[1].Id = 0
	if _, err := table.NewSchema(bad); err == nil {
		t.Fatal("duplicate field ids built a schema")
	}
}

// TestUnusedSchemaIsCollected checks that the set of schemas in use does
// not keep a schema alive.
func TestUnusedSchemaIsCollected(t *testing.T) {
	s, err := table.NewSchema(schemaFields("collected"))
	if err != nil {
		t.Fatal(err)
	}
	released := gctest.Watch(s)
	gctest.AwaitReleased(t, released, "a schema no table holds")
	again, err := table.NewSchema(schemaFields("collected"))
	if err != nil || again == nil {
		t.Fatalf("rebuilt after collection: %v, %v", again, err)
	}
}
