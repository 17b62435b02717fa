package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/apache/arrow-go/v18/arrow/array"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/lancefile"
	"cellguard/producer"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// verify checks, from the data files, that (a) every committed
// transaction that published y published y == f(x) for every live row it
// wrote, at the version it created, and (b) y == f(x) for every live row
// at the head. It reads through a new Store, so nothing comes from the
// workers' caches.
func (d *demoRun) verify(ctx context.Context, pc *producer.Client, res *demoResult) error {
	store, err := data.Open(ctx, d.dir)
	if err != nil {
		return err
	}
	defer store.Close()
	sc, err := subject.NewScheme(pc.Prefix())
	if err != nil {
		return err
	}
	dl, err := declog.Open(ctx, pc.JetStream(), sc, declog.Options{})
	if err != nil {
		return err
	}
	last, err := pc.Latest(ctx, demoDataset)
	if err != nil {
		return err
	}
	type published struct {
		m     *table.Manifest
		frags []uint64
	}
	var pubs []published
	var m *table.Manifest
	for r, err := range dl.Scan(ctx, sc.Dec(demoDataset, subject.Committed), 1, declog.ScanOptions{To: last.Seq()}) {
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		var txn *lancepb.Transaction
		if m, txn, err = declog.Replay(ctx, m, r, pc.Versions(demoDataset)); err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		var frags []uint64
		for _, g := range txn.GetDataReplacement().GetReplacements() {
			if slices.Contains(g.GetNewFile().GetFields(), FieldY) {
				frags = append(frags, g.GetFragmentId())
			}
		}
		if len(frags) > 0 {
			pubs = append(pubs, published{m: m, frags: frags})
		}
	}
	res.yTxns = len(pubs)
	for _, p := range pubs {
		for _, f := range p.frags {
			n, bad, err := checkFragment(ctx, store, p.m, f)
			if err != nil {
				return fmt.Errorf("verify version %d fragment %d: %w", p.m.Version(), f, err)
			}
			res.rowsChecked += n
			res.stalePublished += bad
		}
	}
	head := last.Manifest()
	res.head, res.manifest = head.Version(), head
	if err := d.checkLanceLayout(head, res); err != nil {
		return err
	}
	for f := range head.Fragments() {
		n, bad, err := checkFragment(ctx, store, head, f.ID())
		if err != nil {
			return fmt.Errorf("verify head fragment %d: %w", f.ID(), err)
		}
		res.headRows += n
		res.staleAtHead += bad
	}
	return nil
}

// checkLanceLayout counts the data files and data overlays of the head,
// and the data files that are not Lance files of the head's data storage
// version, judged from their bytes and from what the manifest records.
func (d *demoRun) checkLanceLayout(head *table.Manifest, res *demoResult) error {
	v, err := data.FileVersion(head)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	res.format = head.DataFormat().GetVersion() // "" fails the check: Lance needs it
	major, minor := v.Numbers()
	for f := range head.Fragments() {
		res.headOverlays += len(f.Overlays())
		for _, df := range f.Files() {
			res.headFiles++
			got, err := lanceFileVersion(filepath.Join(d.dir, "data", df.GetPath()))
			if err != nil || got != v || df.GetFileMajorVersion() != major || df.GetFileMinorVersion() != minor {
				res.foreignFiles++
			}
		}
	}
	return nil
}

// lanceFileVersion returns the Lance version of the file at path, read
// from its footer.
func lanceFileVersion(path string) (lancefile.Version, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	rd, err := lancefile.Open(f, st.Size())
	if err != nil {
		return 0, err
	}
	return rd.Version(), nil
}

// checkFragment counts the live rows of fragment f in m, and those whose y
// is not f(x) (a null y counts as wrong).
func checkFragment(ctx context.Context, s *data.Store, m *table.Manifest, f uint64) (rows, bad int64, err error) {
	b, err := s.ReadFragment(ctx, m, f, []int32{FieldX, FieldY})
	if err != nil {
		return 0, 0, err
	}
	xs, ys := b.Columns[FieldX].(*array.Int64), b.Columns[FieldY].(*array.Int64)
	for i := range b.Offsets {
		rows++
		if ys.IsNull(i) || ys.Value(i) != demoF(xs.Value(i)) {
			bad++
		}
	}
	return rows, bad, nil
}
