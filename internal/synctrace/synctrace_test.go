package synctrace

import (
	"fmt"
	"strings"
	"testing"
)

// x writes s as strace -xx prints it.
func x(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, `\x%02x`, s[i])
	}
	return b.String()
}

const blk = "/data/jetstream/ACC/streams/CG_DEC/msgs/1.blk"

func ackLine(pid int, body string) string {
	return fmt.Sprintf(`%d 10:00:00.000003 writev(9<TCP:[127.0.0.1:4222->127.0.0.1:5000]>, [{iov_base="%s", iov_len=%d}], 1) = %d`, pid, x(body), len(body), len(body))
}

func trace(lines ...string) []Call {
	calls, err := Parse(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	if err != nil {
		panic(err)
	}
	return calls
}

func msgs(m map[uint64]string) Message {
	return func(stream string, seq uint64) ([]byte, error) {
		b, ok := m[seq]
		if !ok || stream != "CG_DEC" {
			return nil, fmt.Errorf("no message %s %d", stream, seq)
		}
		return []byte(b), nil
	}
}

func TestSyncedBeforeAck(t *testing.T) {
	calls := trace(
		fmt.Sprintf(`7 10:00:00.000001 pwrite64(12<%s>, "%s", 9, 0) = 9`, x(blk), x("..rec-one")),
		fmt.Sprintf(`7 10:00:00.000002 fsync(12<%s>) = 0`, x(blk)),
		ackLine(8, "MSG _INBOX.a 1 25\r\n"+`{"stream":"CG_DEC","seq":1}`+"\r\n"),
	)
	acks := Acks(calls, 4222)
	if len(acks) != 1 || acks[0].Seq != 1 || acks[0].Stream != "CG_DEC" {
		t.Fatalf("acks %+v", acks)
	}
	if errs := Verify(calls, acks, msgs(map[uint64]string{1: "rec-one"})); len(errs) != 0 {
		t.Fatal(errs)
	}
}

func TestAckBeforeSyncIsCaught(t *testing.T) {
	// The sync starts before the ack but finishes after it (another
	// thread's line interrupts it): not durable when the ack left.
	calls := trace(
		fmt.Sprintf(`7 10:00:00.000001 pwrite64(12<%s>, "%s", 9, 0) = 9`, x(blk), x("..rec-one")),
		fmt.Sprintf(`7 10:00:00.000002 fsync(12<%s> <unfinished ...>`, x(blk)),
		ackLine(8, `{"stream":"CG_DEC","seq":1}`),
		`7 10:00:00.000004 <... fsync resumed>) = 0`,
	)
	acks := Acks(calls, 4222)
	if errs := Verify(calls, acks, msgs(map[uint64]string{1: "rec-one"})); len(errs) != 1 {
		t.Fatalf("errors %v, want one", errs)
	}
}

func TestUnsyncedAndOtherFileAreCaught(t *testing.T) {
	other := "/data/jetstream/ACC/streams/CG_TXN/msgs/1.blk"
	calls := trace(
		fmt.Sprintf(`7 10:00:00.000001 pwrite64(12<%s>, "%s", 9, 0) = 9`, x(blk), x("..rec-one")),
		fmt.Sprintf(`7 10:00:00.000002 fsync(13<%s>) = 0`, x(other)),
		ackLine(8, `{"stream":"CG_DEC","seq":1}`),
		fmt.Sprintf(`7 10:00:00.000004 pwrite64(12<%s>, "%s", 9, 0) = 9`, x(blk), x("..rec-two")),
		fmt.Sprintf(`7 10:00:00.000005 fsync(12<%s>) = 0`, x(blk)),
	)
	acks := Acks(calls, 4222)
	if errs := Verify(calls, acks, msgs(map[uint64]string{1: "rec-one"})); len(errs) != 1 {
		t.Fatalf("errors %v, want one", errs)
	}
}

func TestBatchAckCoversEveryMessage(t *testing.T) {
	calls := trace(
		fmt.Sprintf(`7 10:00:00.000001 pwrite64(12<%s>, "%s", 9, 0) = 9`, x(blk), x("..rec-one..rec-two")),
		fmt.Sprintf(`7 10:00:00.000002 fsync(12<%s>) = 0`, x(blk)),
		ackLine(8, `{"stream":"CG_DEC","seq":3,"batch":"b1","count":3}`),
	)
	acks := Acks(calls, 4222)
	if len(acks) != 1 || acks[0].Count != 3 {
		t.Fatalf("acks %+v", acks)
	}
	// Message 3 was never written: one error, for it alone.
	errs := Verify(calls, acks, msgs(map[uint64]string{1: "rec-one", 2: "rec-two", 3: "rec-three"}))
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "seq 3") {
		t.Fatalf("errors %v, want one for seq 3", errs)
	}
}

func TestAcksOnlyFromTheServerSide(t *testing.T) {
	// A client writing JSON that looks like an ack (its local port is
	// not the server's) is no acknowledgement.
	calls := trace(
		fmt.Sprintf(`8 10:00:00.000003 write(9<TCP:[127.0.0.1:5000->127.0.0.1:4222]>, "%s", 27) = 27`, x(`{"stream":"CG_DEC","seq":1}`)),
	)
	if acks := Acks(calls, 4222); len(acks) != 0 {
		t.Fatalf("acks %+v", acks)
	}
}
