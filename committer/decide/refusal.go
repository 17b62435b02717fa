package decide

// refusal.go is what a stager may say about the message it stages: the
// version it proposes the transaction for, and a refusal of the
// transaction. The Lance REST namespace (internal/namespace) is the
// stager that does: it proposes the client's version and refuses a
// client's manifest that is not the table model's. Both headers only
// ever reject the message that carries them and never commit anything;
// a forger can reject nothing with them that it could not reject without
// them (docs/design.md §9.2, "Forged headers").

import (
	"strconv"
	"strings"

	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// maxRefusalMessage bounds the stager's message copied into a decision.
const maxRefusalMessage = 4096

// refusalReasons are the reasons a stager may refuse a transaction for.
var refusalReasons = map[string]cellguardpb.Reason{
	cellguardpb.Reason_MANIFEST_MISMATCH.String():   cellguardpb.Reason_MANIFEST_MISMATCH,
	cellguardpb.Reason_INVALID_TRANSACTION.String(): cellguardpb.Reason_INVALID_TRANSACTION,
}

// checkStager applies the stager's headers of in, before anything is
// checked against the table, in this order:
//
//   - subject.HdrProposedVersion: the transaction commits only as that
//     version. If the next version is another one (a writer committed
//     between the stager's check and this decision), the message is
//     rejected VERSION_MOVED under its own identity (fallbackID: its
//     Nats-Msg-Id, else seq-<n>), not the transaction's uuid: the attempt
//     is decided, the transaction is not, so its retry at the next
//     version can commit. A uuid still commits at most once: commits are
//     only ever recorded under the uuid, and a decided uuid is skipped.
//   - subject.HdrRefusal: the transaction is rejected with the stager's
//     reason and message (under its uuid: final, like any rejection).
func (s *State) checkStager(in Staged, rec *cellguardpb.Decision) *Rejection {
	if p := headerValue(in.Header, subject.HdrProposedVersion); p != "" {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil || v == 0 {
			return Reject(cellguardpb.Reason_INVALID_TRANSACTION, "header %s %.32q is not a version", subject.HdrProposedVersion, p)
		}
		if next := s.HeadVersion() + 1; v != next {
			txnID := rec.TxnUuid
			rec.TxnUuid = fallbackID(in)
			return Reject(cellguardpb.Reason_VERSION_MOVED, "transaction %s was proposed as version %d, but the next version is %d: rebase and propose the next version",
				txnID, v, next)
		}
	}
	r := headerValue(in.Header, subject.HdrRefusal)
	if r == "" {
		return nil
	}
	msg := strings.ToValidUTF8(headerValue(in.Header, subject.HdrRefusalMessage), "?")
	if len(msg) > maxRefusalMessage {
		msg = strings.ToValidUTF8(msg[:maxRefusalMessage], "") + "…"
	}
	reason, ok := refusalReasons[r]
	if !ok {
		return Reject(cellguardpb.Reason_INVALID_TRANSACTION, "refused by its stager (%.32q): %s", r, msg)
	}
	return Reject(reason, "refused by its stager: %s", msg)
}

// attemptDecided reports whether in is an attempt (a message with a
// proposed version) whose own identity already has a decision: it was
// rejected VERSION_MOVED, and staged again after the staging stream's
// duplicate window. Deciding it again would append a second record under
// the same identity; it is acked instead, like a decided uuid.
func (s *State) attemptDecided(in Staged) bool {
	return headerValue(in.Header, subject.HdrProposedVersion) != "" && s.Decided.Has(fallbackID(in))
}

// headerValue is the first value of header key in h, "" if none: header
// names are case-sensitive, as NATS sends them.
func headerValue(h map[string][]string, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
