package evaluator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// IndexedOptions configure EvaluateIndexed and BlameIndexed.
type IndexedOptions struct {
	Options
	// Pin returns the manifest at the read version. It is called only when
	// the change index no longer covers the read version (it is older than
	// the index's horizon). Nil: such a read is an error wrapping
	// ErrNotIndexed.
	Pin func() (*table.Manifest, error)
	// MaxBlameSteps bounds the culprit search of one verdict: the number of
	// single cell-group evaluations over all its violations. Zero means
	// DefaultMaxBlameSteps.
	MaxBlameSteps int
}

// DefaultMaxBlameSteps is the default IndexedOptions.MaxBlameSteps.
const DefaultMaxBlameSteps = 1024

// ErrNotIndexed reports a read version the change index does not cover,
// with no IndexedOptions.Pin to load it.
var ErrNotIndexed = errors.New("evaluator: read version not covered by the change index")

// CheckTransaction is the half of Prepare that needs no manifest: it
// decodes txn's preconditions (Decode) and checks that txn's operation and
// read version may carry them. EvaluateIndexed checks the rest, that the
// cells named exist at the read version. Errors are *InvalidError.
func CheckTransaction(txn *lancepb.Transaction, lim Limits) ([]Precondition, error) {
	pre, err := Decode(txn.GetPreconditions(), lim)
	if err != nil || len(pre) == 0 {
		return pre, err
	}
	if err := checkOperation(txn); err != nil {
		return nil, err
	}
	return pre, nil
}

// EvaluateIndexed is Evaluate followed by Blame for a transaction read at
// readVersion and landing on ix.Head(), with the table at the read version
// and every later version read through the change index instead of
// manifests: its cost depends on what the preconditions name and on how
// often those cells changed since the read version, not on how many
// versions passed.
//
// The verdict is exactly Evaluate's on the manifest at readVersion and the
// head: the index hands evaluation the very fragments, schema and base
// paths those manifests hold. Only when readVersion is older than the
// index's horizon is the manifest loaded with opts.Pin. Preconditions
// invalid at the read version give *InvalidError, as Evaluate does.
//
// Violations name their culprit as BlameIndexed does.
func EvaluateIndexed(ctx context.Context, ix *table.ChangeIndex, readVersion uint64, pre []Precondition, opts IndexedOptions) (Verdict, error) {
	if ix == nil || ix.Head() == nil {
		return Verdict{}, errors.New("evaluator: EvaluateIndexed needs a change index with a head")
	}
	pinned, err := pinAt(ix, readVersion, nil, opts.Pin)
	if err != nil {
		return Verdict{}, err
	}
	v, err := evaluate(ctx, pinned, ofManifest(ix.Head()), pre, opts.Options)
	if err != nil || v.Accepted() {
		return v, err
	}
	return blameIndexed(ctx, ix, pinned, pre, v, opts), nil
}

// pinAt returns the table at version rv: pinned if given, else the index's
// view, else what pin loads.
func pinAt(ix *table.ChangeIndex, rv uint64, pinned *table.Manifest, pin func() (*table.Manifest, error)) (snapshot, error) {
	if pinned != nil {
		return ofManifest(pinned), nil
	}
	if w, ok := ix.At(rv); ok {
		return ofView(w), nil
	}
	if pin == nil {
		return snapshot{}, fmt.Errorf("%w: version %d, horizon %d, head %d", ErrNotIndexed, rv, ix.Horizon(), ix.Head().Version())
	}
	m, err := pin()
	if err != nil {
		return snapshot{}, fmt.Errorf("evaluator: pin read version %d: %w", rv, err)
	}
	if m == nil || m.Version() != rv {
		return snapshot{}, fmt.Errorf("evaluator: Pin returned a manifest that is not version %d", rv)
	}
	return ofManifest(m), nil
}

// BlameIndexed names the culprit of each violation of v, a verdict on
// preconditions read at readVersion against ix.Head(): it returns a copy
// of v in which every violation's Version and TxnUUID are those of the
// first version after the read version whose state differs from the read
// version's for the violation's cells, judged by Evaluate's rules. This
// is Blame's answer, found without walking the versions in between: the
// state of a fragment can only differ at a version where the index saw
// that fragment, the schema or the base paths change, so only those
// versions are evaluated.
//
// pinned is the manifest at readVersion, or nil to read it through the
// index (or opts.Pin). Work is bounded by opts.MaxBlameSteps single-group
// evaluations in all. Where the search cannot name a culprit, the
// violation keeps zero Version and TxnUUID and its Detail says why and how
// far it searched:
//
//   - "culprit not identified past version N": the step budget ran out
//     after examining the versions up to N;
//   - "culprit not identified: changed at or before version H, older than
//     the change index": the read version is older than the index's
//     horizon H and the cells already differed at H (unless H is the
//     version right after the read version: H is then the culprit, its
//     TxnUUID empty when the index no longer knows it).
//
// When the read version is older than the horizon and the cells were
// unchanged at H, the culprit named is the first differing version after
// H; a change made and undone before H is not seen, and the Detail says
// "earlier versions not indexed".
func BlameIndexed(ctx context.Context, ix *table.ChangeIndex, readVersion uint64, pinned *table.Manifest, pre []Precondition, v Verdict, opts IndexedOptions) Verdict {
	if len(v.Violations) == 0 || ix == nil || ix.Head() == nil {
		return v
	}
	p, err := pinAt(ix, readVersion, pinned, opts.Pin)
	if err != nil {
		return v
	}
	return blameIndexed(ctx, ix, p, pre, v, opts)
}

// blameSearch is the state of one BlameIndexed call.
type blameSearch struct {
	ix     *table.ChangeIndex
	pinned snapshot
	pre    []Precondition
	opts   Options
	budget int
}

func blameIndexed(ctx context.Context, ix *table.ChangeIndex, pinned snapshot, pre []Precondition, v Verdict, opts IndexedOptions) Verdict {
	b := blameSearch{ix: ix, pinned: pinned, pre: pre, opts: opts.Options, budget: opts.MaxBlameSteps}
	if b.budget <= 0 {
		b.budget = DefaultMaxBlameSteps
	}
	out := Verdict{Outcome: v.Outcome, Violations: slices.Clone(v.Violations)}
	for k := range out.Violations {
		b.name(ctx, &out.Violations[k])
	}
	return out
}

// name finds x's culprit, or says in x.Detail why it cannot.
func (b *blameSearch) name(ctx context.Context, x *Violation) {
	rv := b.pinned.Version()
	after, note := rv, ""
	if h := b.ix.Horizon(); rv < h {
		if b.budget == 0 {
			x.Detail = appendNote(x.Detail, fmt.Sprintf("culprit not identified past version %d", rv))
			return
		}
		b.budget--
		if w, _ := b.ix.At(h); differs(ctx, b.pinned, ofView(w), b.pre, x, b.opts) {
			if h == rv+1 { // the only version after the read version: it is the culprit
				x.Version = h
				x.TxnUUID, _ = b.ix.Txn(h) // the index may have forgotten it: empty then
				return
			}
			x.Detail = appendNote(x.Detail, fmt.Sprintf("culprit not identified: changed at or before version %d, older than the change index", h))
			return
		}
		after, note = h, fmt.Sprintf("earlier versions not indexed before version %d", h)
	}
	for b.budget > 0 {
		cands := b.ix.Changes(x.FragmentID, after, min(b.budget, 64))
		if len(cands) == 0 {
			return // nothing differs up to head: v was not computed against ix.Head()
		}
		for _, c := range cands {
			b.budget--
			if w, _ := b.ix.At(c); differs(ctx, b.pinned, ofView(w), b.pre, x, b.opts) {
				x.Version = c
				x.TxnUUID, _ = b.ix.Txn(c)
				if note != "" {
					x.Detail = appendNote(x.Detail, note)
				}
				return
			}
			after = c
		}
	}
	x.Detail = appendNote(x.Detail, fmt.Sprintf("culprit not identified past version %d", after))
}

func appendNote(detail, note string) string {
	if detail == "" {
		return note
	}
	return detail + "; " + note
}
