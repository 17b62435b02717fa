// Package synctrace checks, from a system-call trace of a nats-server
// process, that every publish the server acknowledged was on disk first:
// the message was written to a file-store block file and that file was
// synced before the acknowledgement left on a client socket.
//
// The trace is strace's output for
//
//	strace -f -tt -yy -xx -v -s 1048576 -e trace=write,writev,pwrite64,fsync,fdatasync -o FILE
//
// (-yy names each descriptor's file or socket, -xx prints every byte as
// \xHH, so data and paths decode exactly). Args returns those flags.
package synctrace

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Args are the strace flags whose output Parse reads, before the command.
func Args(out string) []string {
	return []string{"-f", "-tt", "-yy", "-xx", "-v", "-s", "1048576",
		"-e", "trace=write,writev,pwrite64,fsync,fdatasync", "-o", out}
}

// Kind is what a call did.
type Kind int

const (
	Write Kind = iota // write, writev or pwrite64 to a file or socket
	Sync              // fsync or fdatasync
)

// Call is one traced system call: Start is the position of the line that
// began it, End of the line that reported its result (the same line when
// the call was not interrupted by another thread's).
type Call struct {
	Kind       Kind
	PID        int
	Target     string // the descriptor's file path, or "TCP:[local->remote]"
	Data       []byte // bytes written (Write)
	Truncated  bool   // strace cut Data short
	OK         bool   // the call returned success
	Start, End int
}

var (
	lineRE   = regexp.MustCompile(`^(\d+)\s+\S+\s+(.*)$`)
	callRE   = regexp.MustCompile(`^(write|writev|pwrite64|fsync|fdatasync)\((\d+)<(\w+:\[[^\]]*\]|[^>]*)>(.*)$`)
	resumeRE = regexp.MustCompile(`^<\.\.\. (\w+) resumed>(.*)$`)
	strRE    = regexp.MustCompile(`"((?:\\x[0-9a-f]{2})*)"(\.\.\.)?`)
	retRE    = regexp.MustCompile(`\)\s+=\s+(-?\d+)`)
)

// Parse reads a trace written with Args. Calls come back in the order
// they started; lines of other calls and signals are skipped.
func Parse(r io.Reader) ([]Call, error) {
	var calls []Call
	pending := map[int]int{} // pid -> index in calls of its unfinished call
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	pos := 0
	for sc.Scan() {
		pos++
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		rest := m[2]
		if rm := resumeRE.FindStringSubmatch(rest); rm != nil {
			i, ok := pending[pid]
			if !ok {
				continue // a call outside the trace filter
			}
			delete(pending, pid)
			calls[i].End = pos
			calls[i].OK = okResult(rm[2])
			continue
		}
		cm := callRE.FindStringSubmatch(rest)
		if cm == nil {
			continue
		}
		target, err := unhex(cm[3])
		if err != nil {
			return nil, fmt.Errorf("synctrace: line %d: %w", pos, err)
		}
		c := Call{PID: pid, Target: string(target), Start: pos}
		args := cm[4]
		switch cm[1] {
		case "fsync", "fdatasync":
			c.Kind = Sync
		default:
			c.Kind = Write
			for _, s := range strRE.FindAllStringSubmatch(args, -1) {
				b, err := unhex(s[1])
				if err != nil {
					return nil, fmt.Errorf("synctrace: line %d: %w", pos, err)
				}
				c.Data = append(c.Data, b...)
				c.Truncated = c.Truncated || s[2] != ""
			}
		}
		if strings.HasSuffix(args, "<unfinished ...>") {
			pending[pid] = len(calls)
		} else {
			c.End = pos
			c.OK = okResult(args)
		}
		calls = append(calls, c)
	}
	return calls, sc.Err()
}

func okResult(s string) bool {
	m := retRE.FindAllStringSubmatch(s, -1)
	if m == nil {
		return false
	}
	n, err := strconv.Atoi(m[len(m)-1][1])
	return err == nil && n >= 0
}

// unhex decodes strace's -xx escapes (\xHH); other bytes stand for
// themselves (a socket's description is printed plainly).
func unhex(s string) ([]byte, error) {
	var out []byte
	for i := 0; i < len(s); {
		if s[i] == '\\' && i+1 < len(s) && s[i+1] == 'x' {
			if i+4 > len(s) {
				return nil, fmt.Errorf("short escape in %q", s)
			}
			b, err := hex.DecodeString(s[i+2 : i+4])
			if err != nil {
				return nil, fmt.Errorf("escape in %q: %w", s, err)
			}
			out = append(out, b[0])
			i += 4
			continue
		}
		out = append(out, s[i])
		i++
	}
	return out, nil
}

// Ack is a publish acknowledgement the server sent: the last stream
// sequence of Count messages (Count is 1 but for an atomic batch).
type Ack struct {
	Stream    string
	Seq       uint64
	Count     int
	Duplicate bool
	At        int // position of the socket write that carried it
}

// Acks finds the publish acknowledgements in the writes to sockets whose
// local address ends in ":port" (the server's client port).
func Acks(calls []Call, port int) []Ack {
	suffix := ":" + strconv.Itoa(port) + "->"
	var acks []Ack
	for _, c := range calls {
		if c.Kind != Write || !strings.HasPrefix(c.Target, "TCP:[") || !strings.Contains(c.Target, suffix) {
			continue
		}
		for _, raw := range jsonObjects(c.Data, []byte(`{"stream":"`)) {
			var a struct {
				Stream    string `json:"stream"`
				Seq       uint64 `json:"seq"`
				Count     int    `json:"count"`
				Duplicate bool   `json:"duplicate"`
			}
			if json.Unmarshal(raw, &a) != nil || a.Seq == 0 {
				continue
			}
			if a.Count == 0 {
				a.Count = 1
			}
			acks = append(acks, Ack{Stream: a.Stream, Seq: a.Seq, Count: a.Count, Duplicate: a.Duplicate, At: c.Start})
		}
	}
	return acks
}

// jsonObjects returns each JSON object of data that begins with prefix.
func jsonObjects(data, prefix []byte) [][]byte {
	var out [][]byte
	for {
		i := bytes.Index(data, prefix)
		if i < 0 {
			return out
		}
		dec := json.NewDecoder(bytes.NewReader(data[i:]))
		var raw json.RawMessage
		if dec.Decode(&raw) == nil {
			out = append(out, raw)
		}
		data = data[i+len(prefix):]
	}
}

// Durable reports whether needle was written to a block file (a path
// ending in ".blk") by a call that finished before a sync of that file
// began, the sync finishing before position at: the bytes were on disk
// before what happened at at. It returns the file, or "".
func Durable(calls []Call, needle []byte, at int) string {
	for i, w := range calls {
		if w.Kind != Write || !w.OK || w.End == 0 || w.Start >= at || !strings.HasSuffix(w.Target, ".blk") || !bytes.Contains(w.Data, needle) {
			continue
		}
		for _, s := range calls[i+1:] {
			if s.Start >= at {
				break
			}
			if s.Kind == Sync && s.OK && s.Target == w.Target && s.Start > w.End && s.End != 0 && s.End < at {
				return w.Target
			}
		}
	}
	return ""
}

// Message returns a message's bytes as the file store keeps them: its
// body, or, for an empty body, its subject (present in every record).
type Message func(stream string, seq uint64) ([]byte, error)

// Verify checks every acknowledgement in acks: each message it covers
// (Count of them, ending at Seq) was durable, by Durable, before the
// acknowledgement was written. It returns one error per message that was
// not.
func Verify(calls []Call, acks []Ack, msg Message) []error {
	var errs []error
	for _, a := range acks {
		for seq := a.Seq + 1 - uint64(a.Count); seq <= a.Seq; seq++ {
			b, err := msg(a.Stream, seq)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s seq %d: %w", a.Stream, seq, err))
				continue
			}
			if Durable(calls, b, a.At) == "" {
				errs = append(errs, fmt.Errorf("%s seq %d: acknowledged at trace line %d before a block file holding it was synced", a.Stream, seq, a.At))
			}
		}
	}
	return errs
}
