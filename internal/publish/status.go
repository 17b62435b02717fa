package publish

import (
	"context"
	"errors"

	"cellguard/internal/declog"
)

// Status is what a dataset's location holds compared with its log.
type Status struct {
	Latest  uint64 // newest version in storage (0: none)
	Foreign bool   // Latest was not published by cellguard (publishing stops there)
	TxnID   string // the transaction uuid of Latest
}

// ReadStatus reads the newest version in loc and checks it against the
// log of ds, as a starting publisher does.
func ReadStatus(ctx context.Context, l *declog.Log, ds string, loc *Location) (Status, error) {
	latest, err := LatestVersion(ctx, loc)
	if err != nil || latest == 0 {
		return Status{}, err
	}
	f, err := ReadVersion(ctx, loc, latest)
	if err != nil {
		return Status{Latest: latest}, err
	}
	st := Status{Latest: latest, TxnID: txnID(f)}
	seq, err := l.VersionSeq(ctx, ds, latest)
	if errors.Is(err, declog.ErrNoVersion) {
		st.Foreign = true
		return st, nil
	}
	if err != nil {
		return st, err
	}
	r, err := l.At(ctx, seq)
	if err != nil {
		return st, err
	}
	st.Foreign = r.TxnID != st.TxnID
	return st, nil
}
