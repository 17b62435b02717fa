// Package subject is the one place where cellguard's NATS subjects, stream
// names, consumer names, object keys and header names are formatted and
// parsed. The committer, the producer SDK, the events SDK and the command
// line all go through it, so the scheme cannot drift between them.
//
// With the default prefix "cg":
//
//	cg.txn.<dataset>                staged transactions (stream CG_TXN)
//	cg.dec.<dataset>.committed      decision log, committed records (stream CG_DEC)
//	cg.dec.<dataset>.rejected       decision log, rejected records (stream CG_DEC)
//	CG_CHECKPOINTS <dataset>/<ver>  manifest checkpoints (object store)
//
// A dataset name is one subject token of 1 to 64 characters from
// [A-Za-z0-9_-]; Validate checks it and every formatter panics on an
// unvalidated name only through the Must helpers.
package subject

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "cg"

// MaxDatasetLen is the longest dataset name accepted.
const MaxDatasetLen = 64

// ReservedPrefix starts the names cellguard keeps for itself; Validate
// refuses them as dataset names.
const ReservedPrefix = "_cg_"

// StrayDataset is the reserved log under which the committer rejects
// staged messages whose subject token is a subject wildcard ("*" or ">",
// published literally): such a token cannot name a log of its own, since
// a filter on it would match every dataset. Its records are on
// <prefix>.dec._cg_stray.rejected, where `events tail` and the rejection
// queue see them; the offending token is in each record's message.
const StrayDataset = ReservedPrefix + "stray"

// Header names used on staged messages and decision records.
const (
	// HdrMsgID is NATS's deduplication header.
	HdrMsgID = "Nats-Msg-Id"
	// HdrTxnID carries the transaction uuid on a decision record.
	HdrTxnID = "Cg-Txn-Id"
	// HdrTxnSeq carries the CG_TXN stream sequence of the decided message.
	HdrTxnSeq = "Cg-Txn-Seq"
	// HdrVersion carries the committed version on a committed record.
	HdrVersion = "Cg-Version"
	// HdrReason carries the rejection reason name on a rejected record.
	HdrReason = "Cg-Reason"
	// HdrProposedVersion, on a staged message, is the version the stager
	// proposes for its transaction (the Lance REST namespace sends the
	// client's): the committer commits the transaction only as that
	// version, and otherwise rejects the message VERSION_MOVED.
	HdrProposedVersion = "Cg-Proposed-Version"
	// HdrRefusal, on a staged message, names the reason the stager
	// refused its transaction for (MANIFEST_MISMATCH, INVALID_TRANSACTION):
	// the committer rejects the message with it, in order, so the refusal
	// is a decision like any other. HdrRefusalMessage says why.
	HdrRefusal        = "Cg-Refusal"
	HdrRefusalMessage = "Cg-Refusal-Message"
	// HdrStorageVersion, on a staged creating transaction whose dataset
	// configuration names no data storage version, is the version of the
	// table when no data file tells it (the Lance REST namespace sends the
	// one the client's manifest records: LanceDB 0.39 creates empty tables
	// in 2.2, 0.31 in 2.1). The committer records it on the creating
	// record, where replays take it from.
	HdrStorageVersion = "Cg-Storage-Version"
)

// Outcome is the last token of a decision subject.
type Outcome string

// The two decision outcomes, and the tombstone.
const (
	Committed Outcome = "committed"
	Rejected  Outcome = "rejected"
	// Deleted is the subject of a dataset's tombstone: an admin's record
	// that the dataset is deleted (not a decision of the committer).
	Deleted Outcome = "deleted"
)

// ErrInvalidDataset is wrapped by every dataset name validation failure.
var ErrInvalidDataset = errors.New("invalid dataset name")

// ErrInvalidPrefix is returned by NewScheme for a prefix that is not a
// single subject token of letters, digits, '_' or '-'.
var ErrInvalidPrefix = errors.New("invalid subject prefix")

// ErrNotOurs is returned by the parsers for a subject outside the scheme.
var ErrNotOurs = errors.New("subject not in scheme")

// DatasetError names the offending dataset and why it was refused.
type DatasetError struct {
	Name   string
	Reason string
}

func (e *DatasetError) Error() string {
	return fmt.Sprintf("%s %q: %s", ErrInvalidDataset, e.Name, e.Reason)
}

// Unwrap returns ErrInvalidDataset.
func (e *DatasetError) Unwrap() error { return ErrInvalidDataset }

// Validate checks that name is a valid dataset name. The error is a
// *DatasetError wrapping ErrInvalidDataset.
func Validate(name string) error {
	if name == "" {
		return &DatasetError{Name: name, Reason: "empty"}
	}
	if len(name) > MaxDatasetLen {
		return &DatasetError{Name: name, Reason: "longer than " + strconv.Itoa(MaxDatasetLen) + " bytes"}
	}
	for i, r := range name {
		if !tokenRune(r) {
			return &DatasetError{Name: name, Reason: fmt.Sprintf("%s at byte %d; a dataset name is one subject token of [A-Za-z0-9_-]", describeRune(name[i:], r), i)}
		}
	}
	if strings.HasPrefix(name, ReservedPrefix) {
		return &DatasetError{Name: name, Reason: fmt.Sprintf("names starting with %q are reserved for cellguard", ReservedPrefix)}
	}
	return nil
}

// ValidateLog checks a name whose decision log is to be read: a valid
// dataset name, or StrayDataset, the reserved log no one can write to as
// a dataset but everyone may read.
func ValidateLog(name string) error {
	if name == StrayDataset {
		return nil
	}
	return Validate(name)
}

// describeRune says what is wrong with r, the first rune of rest, in a
// dataset name. Characters are quoted with %q, so control characters,
// invalid UTF-8 and look-alike non-ASCII letters are visible.
func describeRune(rest string, r rune) string {
	switch {
	case r == '.':
		return "'.' separates subject tokens"
	case r == '*' || r == '>':
		return fmt.Sprintf("%q is a subject wildcard", r)
	case r == utf8.RuneError && !strings.HasPrefix(rest, string(utf8.RuneError)):
		return fmt.Sprintf("invalid UTF-8 byte %q", rest[:1])
	case unicode.IsSpace(r):
		return fmt.Sprintf("whitespace %q", r)
	case unicode.IsControl(r):
		return fmt.Sprintf("control character %q", r)
	case r > unicode.MaxASCII:
		return fmt.Sprintf("non-ASCII character %q (%U)", r, r)
	}
	return fmt.Sprintf("character %q", r)
}

func tokenRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// Scheme formats and parses the subjects of one deployment.
// The zero Scheme uses DefaultPrefix.
type Scheme struct {
	prefix string
}

// NewScheme returns the scheme for prefix ("" means DefaultPrefix).
func NewScheme(prefix string) (Scheme, error) {
	if prefix == "" {
		return Scheme{}, nil
	}
	if len(prefix) > 32 || strings.IndexFunc(prefix, func(r rune) bool { return !tokenRune(r) }) >= 0 {
		return Scheme{}, fmt.Errorf("%w: %q", ErrInvalidPrefix, prefix)
	}
	return Scheme{prefix: prefix}, nil
}

// Prefix returns the subject prefix.
func (s Scheme) Prefix() string {
	if s.prefix == "" {
		return DefaultPrefix
	}
	return s.prefix
}

func (s Scheme) upper() string { return strings.ToUpper(strings.ReplaceAll(s.Prefix(), "-", "_")) }

// TxnStream is the name of the staged-transaction stream (CG_TXN).
func (s Scheme) TxnStream() string { return s.upper() + "_TXN" }

// DecStream is the name of the decision log stream (CG_DEC).
func (s Scheme) DecStream() string { return s.upper() + "_DEC" }

// CheckpointBucket is the name of the checkpoint object store (CG_CHECKPOINTS).
func (s Scheme) CheckpointBucket() string { return s.upper() + "_CHECKPOINTS" }

// Txn returns the staging subject of dataset ds.
func (s Scheme) Txn(ds string) string { return s.Prefix() + ".txn." + ds }

// TxnAll matches every staging subject.
func (s Scheme) TxnAll() string { return s.Prefix() + ".txn.*" }

// TxnTree matches every subject under the staging prefix, including a
// literal ">" token, which the server's stores do not match with TxnAll's
// "*".
func (s Scheme) TxnTree() string { return s.Prefix() + ".txn.>" }

// Dec returns the decision subject of ds for outcome o.
func (s Scheme) Dec(ds string, o Outcome) string { return s.Prefix() + ".dec." + ds + "." + string(o) }

// DecOf matches both decision subjects of ds: the fencing domain.
func (s Scheme) DecOf(ds string) string { return s.Prefix() + ".dec." + ds + ".*" }

// DecAll matches every decision subject.
func (s Scheme) DecAll() string { return s.Prefix() + ".dec.*.*" }

// Beacon is the core NATS subject on which committers announce the
// consumer pins they hold (no stream stores it).
func (s Scheme) Beacon() string { return s.Prefix() + ".committer.alive" }

// RejectedAll matches the rejected records of every dataset.
func (s Scheme) RejectedAll() string { return s.Prefix() + ".dec.*." + string(Rejected) }

// Consumer returns the durable consumer name of the committer for ds. A
// token that is not a valid dataset name (it still needs its messages
// rejected) gets a name derived from its hash, since consumer names allow
// fewer characters than subject tokens.
func (s Scheme) Consumer(ds string) string {
	if Validate(ds) != nil {
		h := sha256.Sum256([]byte(ds))
		return "commit-x" + hex.EncodeToString(h[:12])
	}
	return "commit-" + ds
}

// PriorityGroup is the priority group committers pull from.
const PriorityGroup = "committer"

// ParseTxn returns the dataset token of a staging subject. The token is
// not validated: a staged message on a badly named dataset still needs a
// decision.
func (s Scheme) ParseTxn(subj string) (string, error) {
	rest, ok := strings.CutPrefix(subj, s.Prefix()+".txn.")
	if !ok || rest == "" || strings.Contains(rest, ".") {
		return "", fmt.Errorf("%w: %q", ErrNotOurs, subj)
	}
	return rest, nil
}

// ParseStaged returns the dataset token of a subject a staged message was
// stored under, which the stream may accept even when it is no valid
// dataset: a literal "*" or ">" token, or a dataset with dots when the
// stream's subjects are wider than one token. A subject outside the
// staging prefix gives an error wrapping ErrNotOurs. A token that is not
// a valid dataset name is returned together with a *DatasetError
// (wrapping ErrInvalidDataset), so that the caller can reject the message
// with a decision instead of ignoring it: such a message must never
// stall, or be taken for, another dataset's traffic.
func (s Scheme) ParseStaged(subj string) (string, error) {
	rest, ok := strings.CutPrefix(subj, s.Prefix()+".txn.")
	if !ok || rest == "" {
		return "", fmt.Errorf("%w: %q", ErrNotOurs, subj)
	}
	return rest, Validate(rest)
}

// Partition returns the partition, 0 ≤ p < n, of dataset ds among n, as
// the NATS server computes it for a subject mapping
// "{{partition(n,k)}}" whose k-th wildcard token is ds: the 32-bit FNV-1a
// hash of the token's bytes, modulo n. (The server hashes the listed
// tokens concatenated; with one token, that is the dataset name.) n ≤ 0
// gives 0, as the server does for 0.
func Partition(ds string, n int) int {
	if n <= 0 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(ds)) // never fails
	return int(h.Sum32() % uint32(n))
}

// TxnPartitioned returns the subject a staged message of ds is stored
// under when CG_TXN spreads staging over n partitions:
// <prefix>.txp.<n>.<part>.<ds>, the form TxnPartitionMapping produces
// (part = Partition(ds, n)). The partition count is part of the subject,
// so the messages staged before a change of the count stay apart from
// those staged after it.
func (s Scheme) TxnPartitioned(n, part int, ds string) string {
	f := s.PartitionFilter(n, part)
	return f[:len(f)-1] + ds
}

// PartitionFilter matches the staged messages of partition part of n.
func (s Scheme) PartitionFilter(n, part int) string {
	return s.Prefix() + ".txp." + strconv.Itoa(n) + "." + strconv.Itoa(part) + ".*"
}

// TxnPartitionTree matches every partitioned staged message.
func (s Scheme) TxnPartitionTree() string { return s.Prefix() + ".txp.>" }

// StagedFilters returns the subject filters that find every staged
// message of ds, whatever the partition count was when it was staged:
// the partitioned form and the plain staging subject (messages stored
// before CG_TXN was partitioned).
func (s Scheme) StagedFilters(ds string) []string {
	return []string{s.Prefix() + ".txp.*.*." + ds, s.Txn(ds)}
}

// TxnPartitionMapping returns the source and destination of the stream
// subject transform that spreads staged transactions over n partitions:
// <prefix>.txn.* → <prefix>.txp.<n>.<Partition(ds, n)>.<ds>. A subject
// with a literal wildcard token ("*", ">") is not transformed by the
// server: it stays under <prefix>.txn., where no partition consumer sees
// it (the committer rejects such strays separately).
func (s Scheme) TxnPartitionMapping(n int) (src, dest string) {
	ns := strconv.Itoa(n)
	return s.TxnAll(), s.Prefix() + ".txp." + ns + ".{{partition(" + ns + ",1)}}.{{wildcard(1)}}"
}

// ParsePartitioned splits a partitioned staging subject into its
// partition count, partition and dataset token. The token is returned
// with a *DatasetError when it is not a valid dataset name (the message
// still needs a decision); a subject of another form gives ErrNotOurs.
func (s Scheme) ParsePartitioned(subj string) (n, part int, ds string, err error) {
	rest, ok := strings.CutPrefix(subj, s.Prefix()+".txp.")
	if !ok {
		return 0, 0, "", fmt.Errorf("%w: %q", ErrNotOurs, subj)
	}
	toks := strings.SplitN(rest, ".", 3)
	if len(toks) != 3 || toks[2] == "" {
		return 0, 0, "", fmt.Errorf("%w: %q", ErrNotOurs, subj)
	}
	n, err1 := strconv.Atoi(toks[0])
	part, err2 := strconv.Atoi(toks[1])
	if err1 != nil || err2 != nil || n < 1 || part < 0 || part >= n {
		return 0, 0, "", fmt.Errorf("%w: %q", ErrNotOurs, subj)
	}
	return n, part, toks[2], Validate(toks[2])
}

// PartitionConsumer is the durable consumer name of partition part of n.
// Dataset consumers of the one-consumer-per-dataset layout are named
// "commit-<dataset>": the names cannot collide.
func (s Scheme) PartitionConsumer(n, part int) string {
	return "partition-" + strconv.Itoa(n) + "-" + strconv.Itoa(part)
}

// ParsePartitionConsumer is the inverse of PartitionConsumer.
func ParsePartitionConsumer(name string) (n, part int, ok bool) {
	rest, ok := strings.CutPrefix(name, "partition-")
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	n, err1 := strconv.Atoi(a)
	part, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || n < 1 || part < 0 || part >= n || strconv.Itoa(n) != a || strconv.Itoa(part) != b {
		return 0, 0, false
	}
	return n, part, true
}

// IsWildcardToken reports whether a dataset token taken from a stored
// staging subject is a subject wildcard ("*" or ">"), which a publisher
// can use literally: no consumer filter can single such a subject out.
func IsWildcardToken(tok string) bool { return tok == "*" || tok == ">" }

// ParseDec returns the dataset and outcome of a decision subject.
func (s Scheme) ParseDec(subj string) (string, Outcome, error) {
	rest, ok := strings.CutPrefix(subj, s.Prefix()+".dec.")
	if !ok {
		return "", "", fmt.Errorf("%w: %q", ErrNotOurs, subj)
	}
	ds, o, ok := strings.Cut(rest, ".")
	if !ok || ds == "" || (Outcome(o) != Committed && Outcome(o) != Rejected && Outcome(o) != Deleted) {
		return "", "", fmt.Errorf("%w: %q", ErrNotOurs, subj)
	}
	return ds, Outcome(o), nil
}

// CheckpointKey returns the object name of the checkpoint of ds at version.
func CheckpointKey(ds string, version uint64) string {
	return ds + "/" + strconv.FormatUint(version, 10)
}

// ParseCheckpointKey splits a checkpoint object name.
func ParseCheckpointKey(key string) (ds string, version uint64, err error) {
	ds, v, ok := strings.Cut(key, "/")
	if !ok {
		return "", 0, fmt.Errorf("%w: checkpoint key %q", ErrNotOurs, key)
	}
	version, err = strconv.ParseUint(v, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("%w: checkpoint key %q", ErrNotOurs, key)
	}
	return ds, version, nil
}

// DecisionMsgID is the Nats-Msg-Id of ds's decision for a transaction
// uuid. The log deduplicates across every dataset, and a uuid is the
// identity of a transaction within its dataset only: the same uuid staged
// to two datasets gets a decision in each. The dataset is written between
// colons, which no dataset name contains, so no two (dataset, uuid) pairs
// share an id.
func DecisionMsgID(ds, txnID string) string { return "dec:" + ds + ":" + txnID }

// TombstoneMsgID is the Nats-Msg-Id of ds's tombstone. No decision can
// take it: theirs all start with "dec:".
func TombstoneMsgID(ds string) string { return "deleted-" + ds }

// AnonymousTxnID is the identity used for a staged message whose body has
// no readable uuid (garbage bytes, truncated protobuf) and no usable
// Nats-Msg-Id: "seq-" and its stream sequence. No two staged messages share
// a stream sequence, and ValidTxnID refuses every id in the "seq-"
// namespace, so an anonymous identity can never be one a client chose.
func AnonymousTxnID(txnSeq uint64) string { return anonymousPrefix + strconv.FormatUint(txnSeq, 10) }

const anonymousPrefix = "seq-"

// MaxTxnIDLen is the longest transaction identity accepted.
const MaxTxnIDLen = 128

// ErrInvalidTxnID reports a transaction uuid or message id that cannot be
// a transaction's identity.
var ErrInvalidTxnID = errors.New("invalid transaction id")

// ValidTxnID checks that id can identify a transaction (as a body's uuid
// or a staged message's Nats-Msg-Id): 1 to MaxTxnIDLen printable ASCII
// characters without spaces, and not in the namespace of AnonymousTxnID
// ("seq-", in any case), which only the committer assigns.
func ValidTxnID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidTxnID)
	case len(id) > MaxTxnIDLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidTxnID, len(id), MaxTxnIDLen)
	case strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
		return fmt.Errorf("%w: %q has a character outside printable ASCII", ErrInvalidTxnID, id)
	case len(id) >= len(anonymousPrefix) && strings.EqualFold(id[:len(anonymousPrefix)], anonymousPrefix):
		return fmt.Errorf("%w: %q: the %q prefix is reserved for messages with no identity", ErrInvalidTxnID, id, anonymousPrefix)
	}
	return nil
}
