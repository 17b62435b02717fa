package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// serverLog hands the embedded server's warnings and errors to a slog
// logger. They are what explains a failed API call: the server answers
// "error creating store for stream" to the client and logs only here what
// the file store met (a full disk, no file descriptors left). Its notices,
// debug and trace lines are left out: they describe a healthy server
// starting and serving.
type serverLog struct{ log *slog.Logger }

var _ server.Logger = serverLog{}

func (l serverLog) emit(level slog.Level, format string, v []any) {
	l.log.Log(context.Background(), level, "nats server: "+strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (l serverLog) Warnf(format string, v ...any)  { l.emit(slog.LevelWarn, format, v) }
func (l serverLog) Errorf(format string, v ...any) { l.emit(slog.LevelError, format, v) }
func (l serverLog) Fatalf(format string, v ...any) { l.emit(slog.LevelError, format, v) }
func (serverLog) Noticef(string, ...any)           {}
func (serverLog) Debugf(string, ...any)            {}
func (serverLog) Tracef(string, ...any)            {}
